"""The CLI against the daemon: create, ls, exec, kill, timeout, logs, run --remote, and how it
finds the daemon and its key (BRIG_URL/BRIG_API_KEY, --url/--api-key, defaults)."""

import json
import os
import re
import subprocess
import time
import unittest

from brigtest import BRIG, ID_RE, LIVE, DaemonTestCase, now, parse_time, port_is_free, wait_for


def brig(*args, env=None, timeout=60):
    """Runs the CLI with BRIG_* taken from `env` only (None drops a variable)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("BRIG_")}
    environ.update(env or {})
    return subprocess.run([BRIG, *args], env={k: v for k, v in environ.items() if v is not None},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)


class ShellTest(DaemonTestCase):
    """`brig shell` on a real pseudo-terminal: raw keystrokes in, the shell's terminal out,
    a window-size change becomes a resize, the shell's exit code becomes brig's."""

    def test_interactive_shell(self):
        import fcntl, pty, select, struct, termios
        sid = self.create()["id"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("BRIG_")}
        env.update({"BRIG_URL": self.daemon.url, "BRIG_API_KEY": self.daemon.key,
                    "TERM": "xterm"})
        pid, fd = pty.fork()
        if pid == 0:
            os.execve(BRIG, [BRIG, "shell", sid], env)
        seen = b""

        def until(needle, timeout=15):
            nonlocal seen
            deadline = time.monotonic() + timeout
            while needle not in seen and time.monotonic() < deadline:
                ready, _, _ = select.select([fd], [], [], 0.2)
                if ready:
                    try:
                        seen += os.read(fd, 4096)
                    except OSError:
                        break
            return needle in seen

        try:
            self.assertTrue(until(b"$ "), seen)
            os.write(fd, b"echo $((6*7)); tty\r")
            self.assertTrue(until(b"42\r\n/dev/pts/"), seen)
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 99, 0, 0))
            os.kill(pid, 28)  # SIGWINCH, as the terminal would send
            self.assertTrue(wait_for(lambda: os.write(fd, b"stty size\r") and until(b"33 99", 1),
                                     10), seen)
            os.write(fd, b"exit 7\r")
            _, status = os.waitpid(pid, 0)
            pid = None
            self.assertEqual(os.waitstatus_to_exitcode(status), 7)
        finally:
            if pid:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            os.close(fd)

    def test_needs_a_terminal(self):
        sid = self.create()["id"]
        r = brig("shell", sid, env={"BRIG_URL": self.daemon.url, "BRIG_API_KEY": self.daemon.key})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("terminal", r.stderr)


class CodeCliTest(DaemonTestCase):

    def test_code_prints_output_and_results_and_fails_on_errors(self):
        sid = self.create()["id"]
        env = {"BRIG_URL": self.daemon.url, "BRIG_API_KEY": self.daemon.key}
        r = brig("code", sid, "x = 6\nprint('hello')\nx * 7", env=env)
        self.assertEqual((r.returncode, r.stdout), (0, "hello\n42\n"), r.stderr)
        r = brig("code", sid, "x / 0", env=env)
        self.assertEqual(r.returncode, 1)
        self.assertIn("ZeroDivisionError", r.stderr)
        r = brig("code", "--json", sid, "x", env=env)
        lines = [json.loads(l) for l in r.stdout.splitlines()]
        self.assertEqual([l["type"] for l in lines], ["result", "end"])
        self.assertEqual(lines[0]["data"]["text/plain"], "6")


class CliTest(DaemonTestCase):

    def brig(self, *args, timeout=60, **env):
        return brig(*args, env=dict({"BRIG_URL": self.daemon.url,
                                     "BRIG_API_KEY": self.daemon.key}, **env), timeout=timeout)

    def ok(self, *args, **kw):
        r = self.brig(*args, **kw)
        self.assertEqual(r.returncode, 0, f"brig {args}: {r.stderr}")
        return r.stdout

    def test_create(self):
        sid = self.ok("create").strip()
        self.assertRegex(sid, ID_RE)
        sb = self.get(sid)
        self.assertEqual((sb["state"], sb["memory_mb"], sb["name"]), ("running", 512, None))

    def test_create_with_flags_json(self):
        name = "cli-" + os.urandom(4).hex()
        sb = json.loads(self.ok("create", "--name", name, "--template", "base", "--cpus", "0.5",
                                "--memory", "256M", "--disk", "1G", "--timeout", "120s",
                                "-e", "FOO=bar", "-e", "X=y z", "--meta", "team=x",
                                "--meta", "k=v", "--json"))
        self.assertRegex(sb["id"], ID_RE)
        expected = {"name": name, "template": "base", "cpus": 0.5, "memory_mb": 256,
                    "disk_mb": 1024, "env": {"FOO": "bar", "X": "y z"},
                    "metadata": {"team": "x", "k": "v"}, "state": "running"}
        self.assertEqual({k: sb.get(k) for k in expected}, expected)
        self.assertAlmostEqual((parse_time(sb["expires_at"]) - parse_time(sb["created_at"]))
                               .total_seconds(), 120, delta=2)
        self.assertEqual(self.get(sb["id"]), sb)

    def test_ls(self):
        tag = os.urandom(4).hex()
        a = self.ok("create", "--meta", f"suite={tag}").strip()
        b = self.ok("create", "--meta", f"suite={tag}").strip()
        lines = self.ok("ls", "--meta", f"suite={tag}").splitlines()
        self.assertRegex(lines[0], r"\bID\b.*\bSTATE\b")
        rows = [line for line in lines[1:] if line.strip()]
        self.assertEqual(len(rows), 2, lines)
        self.assertIn(b, rows[0])
        self.assertIn(a, rows[1])
        self.assertTrue(all("running" in row for row in rows), rows)

        def ids(*flags):
            listed = json.loads(self.ok("ls", "--meta", f"suite={tag}", "--json", *flags))
            self.assertIsInstance(listed, list)
            return [sb["id"] for sb in listed]

        self.assertEqual(ids(), [b, a])
        self.kill(a)
        self.assertEqual(ids("--state", "running"), [b])
        self.assertEqual(ids("--state", "stopped"), [a])

    def test_exec(self):
        sid = self.create(env={"SB": "1"})["id"]
        r = self.brig("exec", sid, "--", "sh", "-c", "echo out; echo err >&2; exit 5")
        self.assertEqual((r.returncode, r.stdout), (5, "out\n"), r.stderr)
        self.assertTrue(r.stderr.startswith("err\n"), r.stderr)
        self.assertEqual(self.ok("exec", sid, "--", "printf", "%s|", "a b", "c"), "a b|c|")
        self.assertEqual(self.ok("exec", sid, "--", "id", "-u"), "1000\n")
        self.assertEqual(self.ok("exec", "-e", "A=2", "-w", "/tmp", "-u", "root", sid, "--",
                                 "sh", "-c", "echo $A $SB; pwd; id -u"), "2 1\n/tmp\n0\n")
        self.assertEqual(self.brig("exec", sid, "--", "sh", "-c", "kill -TERM $$").returncode, 143)
        self.assertEqual(self.brig("exec", sid, "--", "no-such-command-xyz").returncode, 127)
        start = time.monotonic()
        r = self.brig("exec", "--timeout", "1s", sid, "--", "sleep", "30")
        self.assertEqual(r.returncode, 124, r.stderr)  # "timed out", as for `brig run` (README)
        self.assertLess(time.monotonic() - start, 10)

    def test_exec_background_and_logs(self):
        sid = self.create()["id"]
        pid = self.ok("exec", "--background", sid, "--", "sh", "-c", "echo a; echo b >&2").strip()
        self.assertRegex(pid, r"^\d+$")
        self.assertEqual(self.wait_exit(sid, int(pid)).get("exit_code"), 0)
        r = self.brig("logs", sid, pid)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout + r.stderr, "a\nb\n")
        r = self.brig("logs", "--offset", "2", sid, pid)
        self.assertEqual(r.stdout + r.stderr, "b\n")

        answer = json.loads(self.ok("exec", "--background", "--json", sid, "--", "true"))
        self.assertIsInstance(answer["pid"], int)

        pid = self.ok("exec", "--background", sid, "--", "sh", "-c", "echo x; sleep 1000").strip()
        self.assertTrue(wait_for(lambda: self.output(sid, int(pid), follow=False).data, 5))
        start = time.monotonic()
        self.assertEqual(self.ok("logs", sid, pid, timeout=20), "x\n")
        self.assertLess(time.monotonic() - start, 10, "logs without --follow waits")
        self.api("POST", f"/v1/sandboxes/{sid}/commands/{pid}/signal", {"signal": 9}, expect=204)

        pid = self.ok("exec", "--background", sid, "--", "sh", "-c",
                      "for i in 1 2 3; do echo $i; sleep 0.3; done").strip()
        self.assertEqual(self.ok("logs", "--follow", sid, pid, timeout=30), "1\n2\n3\n")

    def test_kill(self):
        sid = self.create()["id"]
        self.ok("kill", sid)
        sb = self.get(sid)
        self.assertEqual((sb["state"], sb["reason"]), ("stopped", "killed"))
        r = self.brig("kill", "a" * 20)
        self.assertNotEqual(r.returncode, 0)
        self.assertTrue(r.stderr.strip(), "no message on stderr")

    def test_timeout(self):
        sid = self.create(timeout=60)["id"]
        self.ok("timeout", sid, "600")
        expires = parse_time(self.get(sid)["expires_at"])
        self.assertAlmostEqual((expires - now()).total_seconds(), 600, delta=5)

    def test_run_remote(self):
        live = len(self.daemon.sandboxes("state=" + LIVE))
        total = len(self.daemon.sandboxes())
        r = self.brig("run", "--remote", "-e", "A=1", "--memory", "256M", "--timeout", "60s",
                      "--", "sh", "-c", "echo $A; echo e >&2; exit 4")
        self.assertEqual((r.returncode, r.stdout), (4, "1\n"), r.stderr)
        self.assertTrue(r.stderr.startswith("e\n"), r.stderr)
        self.assertEqual(len(self.daemon.sandboxes("state=" + LIVE)), live, "sandbox not killed")
        self.assertEqual(len(self.daemon.sandboxes()), total + 1)

    def test_url_and_key_flags(self):
        r = brig("--url", self.daemon.url, "--api-key", self.daemon.key, "ls", "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIsInstance(json.loads(r.stdout), list)

    def test_bad_key(self):
        for r in (self.brig("ls", BRIG_API_KEY="wrong"),
                  brig("--url", self.daemon.url, "--api-key", "wrong", "ls"),
                  self.brig("create", BRIG_API_KEY="wrong")):
            self.assertNotEqual(r.returncode, 0)
            self.assertRegex(r.stderr, re.compile(r"401|unauthori[sz]ed", re.I))


class CliDefaultsTest(DaemonTestCase):
    """Without BRIG_URL/BRIG_API_KEY: http://127.0.0.1:7878 and <state dir>/api-key."""

    daemon_port = 7878

    @classmethod
    def setUpClass(cls):
        if not port_is_free(7878):
            raise unittest.SkipTest("127.0.0.1:7878 is in use")
        super().setUpClass()

    def test_defaults(self):
        for r in (brig("--state-dir", self.daemon.state, "ls", "--json"),
                  brig("ls", "--json", env={"BRIG_STATE_DIR": self.daemon.state})):
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(json.loads(r.stdout), [])


if __name__ == "__main__":
    unittest.main()
