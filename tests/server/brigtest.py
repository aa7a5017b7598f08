"""Shared helpers for the end-to-end tests of `brig serve` (docs/api.md is the contract).

Python 3 standard library only. Each test class gets its own daemon on a fresh state directory
under /tmp and a free port on 127.0.0.1; on teardown every live sandbox is killed through the
API, the daemon is stopped and the state directory removed.

Run (as root, from tests/server):  /usr/bin/python3 -m unittest -v test_sandboxes
or all of them from the build dir:  ctest -R server --output-on-failure
BRIG_BINARY names the brig executable (default: build/brig in this checkout).
"""

import base64
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
BRIG = os.environ.get("BRIG_BINARY") or os.path.normpath(
    os.path.join(HERE, "..", "..", "build", "brig"))
ID_RE = re.compile(r"^[a-z0-9]{20}$")
LIVE = "creating,running,paused"
_DEFAULT = object()


def wait_for(predicate, timeout=10.0, interval=0.05):
    """Polls predicate() until it returns something truthy or `timeout` seconds pass; returns
    its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def parse_time(text):
    """An API timestamp ("2026-11-30T08:00:00.123Z") as an aware datetime."""
    assert isinstance(text, str) and re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", text), f"bad timestamp {text!r}"
    return datetime.fromisoformat(text[:-1]).replace(tzinfo=timezone.utc)


def now():
    return datetime.now(timezone.utc)


class ApiError(AssertionError):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body!r}")
        self.status, self.body = status, body


# ---- the host's view of a sandbox (for durability and cleanup checks) ----

def host_pids(sandbox_id):
    """Host pids of the processes in the sandbox's cgroup (brig-sb-<id>)."""
    pattern = re.compile(r"/brig-sb-" + re.escape(sandbox_id) + r"(/|$)", re.M)
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cgroup") as f:
                if pattern.search(f.read()):
                    pids.append(int(entry))
        except OSError:
            pass
    return sorted(pids)


def host_pid1(sandbox_id):
    """The host pid of the sandbox's PID 1 (the agent): the process of its cgroup that is pid 1
    in its own pid namespace; else the lowest pid there; None when there is none."""
    pids = host_pids(sandbox_id)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("NSpid:") and line.split()[-1] == "1":
                        return pid
        except OSError:
            pass
    return pids[0] if pids else None


def pid_alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def host_cgroups(sandbox_id):
    """Directories named brig-sb-<id> under /sys/fs/cgroup."""
    name, found = "brig-sb-" + sandbox_id, []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        if root.count("/") > 10:
            dirs[:] = []
            continue
        if name in dirs:
            found.append(os.path.join(root, name))
            dirs.remove(name)
    return found


def cgroup_file(sandbox_id, name):
    """The content of `name` in the first of the sandbox's cgroup directories that has it."""
    for directory in host_cgroups(sandbox_id):
        try:
            with open(os.path.join(directory, name)) as f:
                return f.read().strip()
        except OSError:
            pass
    return None


# ---- output streams ----

def short(value, limit=600):
    """repr(value), cut to `limit` characters: for assertion messages."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def chunk_bytes(line):
    """The bytes an output line carries (`data` is UTF-8 text, `data_b64` anything else)."""
    has_text, has_b64 = "data" in line, "data_b64" in line
    assert has_text != has_b64, f"output line needs exactly one of data/data_b64: {line}"
    return line["data"].encode("utf-8") if has_text else base64.b64decode(line["data_b64"])


class Output:
    """What a stream said: pid from `start`, stdout/stderr bytes, `data` (both, in offset
    order), `exit`, `errors`, `end`, `truncated`, and every line in `lines`."""

    def __init__(self):
        self.lines, self.errors, self.truncated = [], [], []
        self.pid = self.exit = self.end = None
        self.stdout = self.stderr = self.data = b""
        self.first_offset = self.next_offset = None

    def add(self, line):
        self.lines.append(line)
        kind = line.get("type")
        if kind == "start":
            self.pid = line["pid"]
        elif kind in ("stdout", "stderr"):
            chunk = chunk_bytes(line)
            if self.next_offset is None:
                self.first_offset = self.next_offset = line["offset"]
            assert line["offset"] == self.next_offset, (
                f"output offset {line['offset']}, expected {self.next_offset}: {self.lines}")
            self.next_offset += len(chunk)
            self.data += chunk
            if kind == "stdout":
                self.stdout += chunk
            else:
                self.stderr += chunk
        elif kind == "truncated":
            self.truncated.append(line)
            self.next_offset = line["to"]
        elif kind == "exit":
            self.exit = line
        elif kind == "error":
            self.errors.append(line)
        elif kind == "end":
            self.end = line
        else:
            raise AssertionError(f"unknown output line {line}")


def collect(lines, output=None):
    """Reads a whole stream into an Output."""
    output = output or Output()
    for line in lines:
        output.add(line)
    return output


# ---- the daemon ----

class Daemon:
    """`brig --state-dir <tmp> serve --listen 127.0.0.1:<port>` as a child process."""

    def __init__(self, port=None):
        self.root = tempfile.mkdtemp(prefix="brig-serve-test-", dir="/tmp")
        # The sandbox's root (an unprivileged host uid) must search the way to the state dir.
        os.chmod(self.root, 0o711)
        self.state = os.path.join(self.root, "state")  # absolute, under /tmp
        self.log_path = os.path.join(self.root, "daemon.log")
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = self.key = None
        self.seen_ids = set()  # every sandbox id an answer named: for the cleanup fallback

    def start(self, timeout=15.0):
        os.makedirs(self.state, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [BRIG, "--state-dir", self.state, "serve", "--listen", f"127.0.0.1:{self.port}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError(f"brig serve exited with {self.proc.returncode}:\n"
                                   + self.log_tail())
            try:
                status, _ = self.request("GET", "/health", key=None, raw=True, timeout=2)
            except OSError:
                return False
            return status == 200 and os.path.exists(os.path.join(self.state, "api-key"))

        if not wait_for(ready, timeout):
            self.stop()
            raise RuntimeError(f"brig serve not healthy within {timeout} s:\n" + self.log_tail())
        with open(os.path.join(self.state, "api-key")) as f:
            self.key = f.read().strip()
        return self

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=15.0):
        """SIGTERM, then wait (SIGKILL after `timeout`)."""
        if not self.running():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"brig serve ignored SIGTERM for {timeout} s")

    def kill9(self):
        if self.running():
            self.proc.kill()
            self.proc.wait()

    def restart(self):
        """Same state dir, same port."""
        self.stop()
        return self.start()

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return ""

    # -- HTTP --

    def connect(self, method, path, body=None, headers=None, key=_DEFAULT, timeout=60):
        """Sends one request on a new connection: (connection, response), body unread."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        hdrs = {}
        if key is _DEFAULT:
            key = self.key
        if key is not None:
            hdrs["Authorization"] = "Bearer " + key
        hdrs.update(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode()
        try:
            conn.request(method, path, body=body, headers=hdrs)
        except (BrokenPipeError, ConnectionResetError):
            pass  # it may answer (413) before reading all of a large body
        return conn, conn.getresponse()

    def request(self, method, path, body=None, headers=None, key=_DEFAULT, raw=False, timeout=60):
        """One request on its own connection: (status, parsed JSON or None when empty), or
        (status, bytes) with raw=True. `body` is JSON-encoded unless bytes or str."""
        conn, resp = self.connect(method, path, body, headers, key, timeout)
        try:
            data = resp.read()
        finally:
            conn.close()
        if raw:
            return resp.status, data
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            raise AssertionError(f"{method} {path}: HTTP {resp.status} with non-JSON body {data!r}")
        self._note_ids(parsed)
        return resp.status, parsed

    def stream(self, method, path, body=None, key=_DEFAULT, timeout=60):
        """Yields the NDJSON lines of a streaming answer as they arrive; raises ApiError when
        the status is not 200. Closing the generator closes the connection."""
        conn, resp = self.connect(method, path, body, None, key, timeout)
        try:
            if resp.status != 200:
                data = resp.read()
                try:
                    data = json.loads(data)
                except ValueError:
                    pass
                raise ApiError(resp.status, data)
            while True:
                line = resp.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            conn.close()

    def stream_status(self, method, path, body=None, key=_DEFAULT, timeout=60):
        """The status and body of a route that streams when it succeeds (errors are plain)."""
        conn, resp = self.connect(method, path, body, None, key, timeout)
        try:
            data = resp.read()
        finally:
            conn.close()
        try:
            return resp.status, json.loads(data) if resp.status != 200 else data
        except ValueError:
            return resp.status, data

    def _note_ids(self, body):
        if isinstance(body, dict):
            items = body.get("sandboxes") if isinstance(body.get("sandboxes"), list) else [body]
            for item in items:
                if isinstance(item, dict) and isinstance(item.get("id"), str):
                    self.seen_ids.add(item["id"])

    def sandboxes(self, query=""):
        """Every sandbox the list route gives for `query` (all pages)."""
        found, cursor = [], None
        for _ in range(1000):
            path = "/v1/sandboxes?limit=1000" + (f"&{query}" if query else "")
            if cursor:
                path += "&cursor=" + cursor
            status, body = self.request("GET", path)
            if status != 200:
                raise ApiError(status, body)
            found += body["sandboxes"]
            cursor = body.get("next_cursor")
            if not cursor:
                return found
        raise AssertionError("list never ends")

    # -- teardown --

    def cleanup(self):
        """Kills every live sandbox through the API (restarting a dead daemon for it), stops the
        daemon, kills what the API did not (with a warning), removes the temp dirs."""
        problems = []
        try:
            if not self.running():
                self.start()
            for sb in self.sandboxes("state=" + LIVE):
                status, body = self.request("DELETE", f"/v1/sandboxes/{sb['id']}")
                if status not in (204, 409):
                    problems.append(f"kill {sb['id']}: {status} {body}")
            self.sandboxes()  # notes every id, for the fallback below
        except Exception as e:  # noqa: BLE001 - cleanup must go on
            problems.append(f"cleanup through the API failed: {e!r}")
        try:
            self.stop()
        except AssertionError as e:
            problems.append(str(e))
        for sid in sorted(self.seen_ids):
            pid = None
            for pid in host_pids(sid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if pid is not None:
                problems.append(f"sandbox {sid} still had processes after cleanup; SIGKILLed")
            for cg in reversed(host_cgroups(sid)):
                if wait_for(lambda: _rmdir(cg), 5):
                    continue
                problems.append(f"cannot remove cgroup {cg}")
        shutil.rmtree(self.root, ignore_errors=True)
        if problems:
            print("brigtest cleanup: " + "; ".join(problems), file=sys.stderr)


def _rmdir(path):
    try:
        os.rmdir(path)
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


# ---- the base test case ----

class DaemonTestCase(unittest.TestCase):
    """One daemon per test class: self.daemon. Prints the daemon's log tail when a test fails."""

    daemon_port = None

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(cls.daemon_port)
        cls.addClassCleanup(cls.daemon.cleanup)
        cls.daemon.start()

    def run(self, result=None):
        before = len(result.failures) + len(result.errors) if result else 0
        outcome = super().run(result)
        if result and len(result.failures) + len(result.errors) > before:
            print(f"\n--- brig serve log (tail) after {self.id()} ---\n"
                  + self.daemon.log_tail(), file=sys.stderr)
        return outcome

    # -- API shortcuts that assert the status --

    def api(self, method, path, body=None, expect=200, **kw):
        status, answer = self.daemon.request(method, path, body, **kw)
        self.assertEqual(status, expect, f"{method} {path} {short(body)} -> {short(answer)}")
        return answer

    def assertError(self, status, body, expect, context=""):
        """An error answer: the status, and {code: status, message: non-empty}. A sub-test: a
        table of cases reports every case that fails."""
        with self.subTest(context or f"expect {expect}"):
            self.assertEqual(status, expect, f"{context}: {short(body)}")
            self.assertIsInstance(body, dict, context)
            self.assertEqual(body.get("code"), expect, f"{context}: {short(body)}")
            self.assertIsInstance(body.get("message"), str, f"{context}: {short(body)}")
            self.assertTrue(body["message"], f"{context}: empty message")

    def create(self, expect=201, **fields):
        sb = self.api("POST", "/v1/sandboxes", fields, expect=expect, timeout=120)
        self.assertRegex(sb["id"], ID_RE)
        return sb

    def get(self, sid):
        return self.api("GET", f"/v1/sandboxes/{sid}")

    def kill(self, sid):
        self.api("DELETE", f"/v1/sandboxes/{sid}", expect=204)

    def wait_state(self, sid, state, timeout=10.0):
        last = {}

        def reached():
            last["sb"] = self.get(sid)
            return last["sb"]["state"] == state

        self.assertTrue(wait_for(reached, timeout),
                        f"sandbox {sid} not {state} within {timeout} s: {last['sb']}")
        return last["sb"]

    def run_cmd(self, sid, query="", http_timeout=60, **body):
        """A foreground command (`body` is the request's fields), its whole stream collected."""
        return collect(self.daemon.stream("POST", f"/v1/sandboxes/{sid}/commands{query}", body,
                                          timeout=http_timeout))

    def background(self, sid, **body):
        """Starts a background command; returns its pid."""
        answer = self.api("POST", f"/v1/sandboxes/{sid}/commands", dict(body, background=True))
        self.assertIsInstance(answer.get("pid"), int, answer)
        return answer["pid"]

    def wait_exit(self, sid, pid, timeout=60):
        return self.api("GET", f"/v1/sandboxes/{sid}/commands/{pid}/wait", timeout=timeout)

    def output(self, sid, pid, offset=0, follow=True, timeout=60):
        query = f"?offset={offset}&follow={'true' if follow else 'false'}"
        return collect(self.daemon.stream(
            "GET", f"/v1/sandboxes/{sid}/commands/{pid}/output{query}", timeout=timeout))

    def processes(self, sid):
        return self.api("GET", f"/v1/sandboxes/{sid}/commands")["processes"]

    def process(self, sid, pid):
        found = [p for p in self.processes(sid) if p["pid"] == pid]
        self.assertEqual(len(found), 1, f"pid {pid} in {self.processes(sid)}")
        return found[0]


# ---- a minimal WebSocket client (RFC 6455), enough to drive the terminal route ----

class WebSocketClient:
    """Connects with the upgrade handshake; sends masked frames, reads unmasked ones."""

    def __init__(self, port, path, timeout=15):
        import base64 as b64
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        key = b64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                break
            head += chunk
        self.status = int(head.split(b" ", 2)[1]) if head else 0
        self.buffer = b""

    def send(self, data, binary=True):
        data = data if isinstance(data, bytes) else data.encode()
        header = bytes([0x80 | (0x2 if binary else 0x1)])
        n = len(data)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + n.to_bytes(2, "big")
        else:
            header += bytes([0x80 | 127]) + n.to_bytes(8, "big")
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def recv(self):
        """(opcode, payload): 1 text, 2 binary, 8 close."""
        b0, b1 = self._read(2)
        n = b1 & 0x7F
        if n == 126:
            n = int.from_bytes(self._read(2), "big")
        elif n == 127:
            n = int.from_bytes(self._read(8), "big")
        return b0 & 0x0F, self._read(n)

    def close(self):
        self.sock.close()
