"""Commands through the HTTP API: foreground streams, background processes, stdin, signals,
timeouts, re-attaching, encodings, errors (docs/api.md, "Commands")."""

import json
import time
import unittest

from brigtest import DaemonTestCase, Output, WebSocketClient, chunk_bytes, collect, wait_for

COUNT_SCRIPT = "for i in $(seq 1 40); do echo line-$i; sleep 0.05; done"
COUNT_OUTPUT = b"".join(b"line-%d\n" % i for i in range(1, 41))


class CommandTest(DaemonTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        status, sb = cls.daemon.request("POST", "/v1/sandboxes", {
            "timeout": 900, "env": {"SB": "sandbox", "OVER": "sandbox"}}, timeout=120)
        if status != 201:
            raise AssertionError(f"create: {status} {sb}")
        cls.sid = sb["id"]

    def path(self, suffix=""):
        return f"/v1/sandboxes/{self.sid}/commands{suffix}"

    def signal(self, pid, sig, expect=204):
        return self.api("POST", self.path(f"/{pid}/signal"), {"signal": sig}, expect=expect)

    def assertExit(self, out, code):
        self.assertIsNotNone(out.exit, f"no exit line: {out.lines}")
        self.assertEqual(out.exit.get("exit_code"), code, out.lines)
        self.assertNotIn("signal", out.exit)
        self.assertEqual(out.lines[-1]["type"], "exit", out.lines)

    def pgrep(self, pattern):
        """pgrep's exit code inside the sandbox: 0 found, 1 none."""
        return self.run_cmd(self.sid, argv=["pgrep", "-f", pattern]).exit.get("exit_code")

    # -- foreground --

    def test_foreground_cmd(self):
        out = self.run_cmd(self.sid, cmd="echo hi; echo err >&2; exit 3")
        self.assertEqual(out.lines[0]["type"], "start", out.lines)
        self.assertIsInstance(out.pid, int)
        self.assertGreater(out.pid, 1)
        self.assertEqual((out.stdout, out.stderr), (b"hi\n", b"err\n"))
        self.assertEqual(out.first_offset, 0)
        self.assertEqual(out.errors, [])
        self.assertExit(out, 3)

    def test_stream_is_chunked_ndjson(self):
        conn, resp = self.daemon.connect("POST", self.path(), {"argv": ["true"]})
        try:
            self.assertEqual(resp.status, 200)
            self.assertTrue(resp.getheader("Content-Type", "").startswith("application/x-ndjson"),
                            resp.getheaders())
            self.assertEqual(resp.getheader("Transfer-Encoding", "").lower(), "chunked",
                             resp.getheaders())
            resp.read()
        finally:
            conn.close()

    def test_argv(self):
        out = self.run_cmd(self.sid, argv=["printf", "%s|", "a b", "c"])
        self.assertEqual(out.stdout, b"a b|c|")
        self.assertExit(out, 0)

    def test_env(self):
        out = self.run_cmd(self.sid, argv=["sh", "-c", "echo $SB $OVER $CMDONLY"],
                           env={"OVER": "command", "CMDONLY": "x"})
        self.assertEqual(out.stdout, b"sandbox command x\n")
        out = self.run_cmd(self.sid, cmd="echo $SB $OVER $CMDONLY.")
        self.assertEqual(out.stdout, b"sandbox sandbox .\n")

    def test_cwd_and_user(self):
        self.assertEqual(self.run_cmd(self.sid, argv=["pwd"]).stdout, b"/home/user\n")
        self.assertEqual(self.run_cmd(self.sid, argv=["pwd"], cwd="/tmp").stdout, b"/tmp\n")
        self.assertEqual(self.run_cmd(self.sid, argv=["id", "-u"]).stdout, b"1000\n")
        self.assertEqual(self.run_cmd(self.sid, argv=["id", "-u"], user="user").stdout, b"1000\n")
        self.assertEqual(self.run_cmd(self.sid, argv=["id", "-u"], user="root").stdout, b"0\n")

    def test_closing_the_stream_keeps_the_process(self):
        lines = self.daemon.stream("POST", self.path(), {"cmd": "sleep 1; echo done"})
        first = next(lines)
        lines.close()
        self.assertEqual(first["type"], "start")
        self.assertEqual(self.wait_exit(self.sid, first["pid"]).get("exit_code"), 0)
        self.assertEqual(self.output(self.sid, first["pid"]).stdout, b"done\n")

    # -- background --

    def test_background(self):
        start = time.monotonic()
        answer = self.api("POST", self.path(), {"cmd": "sleep 3; exit 7", "background": True,
                                                "tag": "bg-tag"})
        self.assertLess(time.monotonic() - start, 2.5, "background did not answer at once")
        self.assertEqual(set(answer), {"pid", "tag"}, answer)
        self.assertEqual(answer["tag"], "bg-tag")
        pid = answer["pid"]
        proc = self.process(self.sid, pid)
        self.assertTrue(proc["running"], proc)
        self.assertEqual(proc["tag"], "bg-tag")
        self.assertNotIn("exit_code", proc)
        self.assertNotIn("signal", proc)
        self.assertIsInstance(proc["argv"], list)
        self.assertEqual(proc["argv"][-1], "sleep 3; exit 7")
        result = self.wait_exit(self.sid, pid)
        self.assertEqual(result.get("exit_code"), 7, result)
        self.assertNotIn("signal", result)
        self.assertFalse(result.get("timed_out", False))
        proc = self.process(self.sid, pid)
        self.assertEqual((proc["running"], proc.get("exit_code"), proc.get("timed_out")),
                         (False, 7, False), proc)

    def test_stdin(self):
        data = b"hello\x00world\n\xff\xfe end"
        pid = self.background(self.sid, argv=["cat"], stdin=True)
        status, body = self.daemon.request("POST", self.path(f"/{pid}/stdin"), data, raw=True)
        self.assertEqual((status, body), (204, b""))
        status, body = self.daemon.request("POST", self.path(f"/{pid}/stdin"),
                                           b"x" * ((1 << 20) + 1))
        self.assertError(status, body, 413, "stdin over 1 MiB")
        self.api("POST", self.path(f"/{pid}/stdin/close"), expect=204)
        self.assertEqual(self.wait_exit(self.sid, pid).get("exit_code"), 0)
        out = self.output(self.sid, pid)
        self.assertEqual(out.stdout, data)
        self.assertExit(out, 0)
        status, body = self.daemon.request("POST", self.path(f"/{pid}/stdin"), b"more")
        self.assertError(status, body, 409, "stdin after it exited")

    def follow_until(self, pid, needle, offset=0, timeout=20):
        """Follows a process's output from `offset` until `needle` appears; returns the bytes
        and the next offset."""
        seen, next_offset = b"", offset
        lines = self.daemon.stream("GET", self.path(f"/{pid}/output?offset={offset}"),
                                   timeout=timeout)
        try:
            for line in lines:
                if line.get("type") in ("stdout", "stderr"):
                    seen += chunk_bytes(line)
                    next_offset = line["offset"] + len(chunk_bytes(line))
                    if needle in seen:
                        return seen, next_offset
                self.assertNotEqual(line.get("type"), "exit", seen)
        finally:
            lines.close()
        self.fail(f"{needle!r} never appeared in {seen!r}")

    def test_terminal_runs_an_interactive_shell_and_resizes(self):
        pid = self.background(self.sid, argv=["/bin/bash", "--norc", "-i"],
                              pty={"rows": 24, "cols": 80})
        stdin = self.path(f"/{pid}/stdin")
        self.assertEqual(self.daemon.request("POST", stdin, b"stty size; tty\n", raw=True)[0], 204)
        seen, offset = self.follow_until(pid, b"/dev/pts/")
        self.assertIn(b"24 80", seen)
        self.api("POST", self.path(f"/{pid}/resize"), {"rows": 40, "cols": 132}, expect=204)
        self.daemon.request("POST", stdin, b"stty size\n", raw=True)
        self.follow_until(pid, b"40 132", offset)
        for bad in ({"rows": 0, "cols": 80}, {"rows": 24}, {"rows": 24, "cols": 80, "x": 1}):
            status, body = self.daemon.request("POST", self.path(f"/{pid}/resize"), bad)
            self.assertError(status, body, 400, f"resize {bad}")
        self.daemon.request("POST", stdin, b"exit 3\n", raw=True)
        self.assertEqual(self.wait_exit(self.sid, pid).get("exit_code"), 3)
        # A process without a terminal cannot be resized.
        plain = self.background(self.sid, argv=["sleep", "1000"])
        status, body = self.daemon.request("POST", self.path(f"/{plain}/resize"),
                                           {"rows": 10, "cols": 10})
        self.assertError(status, body, 400, "resize without a pty")
        self.signal(plain, "SIGKILL")

    def test_terminal_runs_python_interactively(self):
        pid = self.background(self.sid, argv=["python3", "-i", "-q"], pty={"rows": 24, "cols": 80})
        stdin = self.path(f"/{pid}/stdin")
        self.daemon.request("POST", stdin, b"import os, subprocess; os.get_terminal_size()\n",
                            raw=True)
        _, offset = self.follow_until(pid, b"columns=80, lines=24")
        self.api("POST", self.path(f"/{pid}/resize"), {"rows": 50, "cols": 120}, expect=204)
        self.daemon.request("POST", stdin, b"subprocess.run(['stty', 'size'])\n", raw=True)
        self.follow_until(pid, b"50 120", offset)
        self.daemon.request("POST", stdin, b"exit(5)\n", raw=True)
        self.assertEqual(self.wait_exit(self.sid, pid).get("exit_code"), 5)

    def test_terminal_over_a_websocket(self):
        pid = self.background(self.sid, argv=["/bin/bash", "--norc", "-i"],
                              pty={"rows": 24, "cols": 80})
        route = self.path(f"/{pid}/ws")
        # Browsers cannot send headers on a WebSocket: the key may come as ?api_key=.
        refused = WebSocketClient(self.daemon.port, route)
        self.assertEqual(refused.status, 401)
        refused.close()
        status, body = self.daemon.request("GET", route)
        self.assertError(status, body, 400, "the WebSocket route without an upgrade")
        ws = WebSocketClient(self.daemon.port, f"{route}?api_key={self.daemon.key}")
        self.assertEqual(ws.status, 101)
        seen = b""

        def until(needle):
            nonlocal seen
            while needle not in seen:
                opcode, data = ws.recv()
                self.assertEqual(opcode, 2, data)
                seen += data

        try:
            ws.send(b"stty size\n")
            until(b"24 80")
            ws.send('{"type": "resize", "rows": 50, "cols": 120}', binary=False)
            ws.send(b"stty size\n")
            until(b"50 120")
            ws.send(b"exit 4\n")
            while True:
                opcode, data = ws.recv()
                if opcode == 1:
                    break
            self.assertEqual(json.loads(data), {"type": "exit", "exit_code": 4})
            self.assertEqual(ws.recv()[0], 8, "a close frame after the exit")
        finally:
            ws.close()

    def test_stdin_not_opened(self):
        pid = self.background(self.sid, argv=["sleep", "1000"])
        status, body = self.daemon.request("POST", self.path(f"/{pid}/stdin"), b"x")
        self.assertError(status, body, 409, "stdin without stdin: true")
        self.signal(pid, "SIGKILL")
        out = self.run_cmd(self.sid, argv=["cat"])  # stdin at EOF: does not hang
        self.assertExit(out, 0)

    def test_signal(self):
        pid = self.background(self.sid, argv=["sleep", "1000"])
        for bad in ("SIGFOO", 1000, None):
            status, body = self.daemon.request("POST", self.path(f"/{pid}/signal"), {"signal": bad})
            self.assertError(status, body, 400, f"signal {bad!r}")
        self.signal(pid, "SIGTERM")
        result = self.wait_exit(self.sid, pid)
        self.assertEqual(result.get("signal"), 15, result)
        self.assertNotIn("exit_code", result)
        proc = self.process(self.sid, pid)
        self.assertEqual((proc["running"], proc.get("signal")), (False, 15), proc)
        status, body = self.daemon.request("POST", self.path(f"/{pid}/signal"), {"signal": 15})
        self.assertError(status, body, 409, "signal after exit")
        pid = self.background(self.sid, argv=["sleep", "1000"])
        self.signal(pid, 9)
        self.assertEqual(self.wait_exit(self.sid, pid).get("signal"), 9)

    def test_signal_reaches_the_process_group(self):
        pid = self.background(self.sid, cmd="sleep 1001 & sleep 1002")
        self.assertTrue(wait_for(lambda: self.pgrep("sleep 1001") == 0, 5))
        self.signal(pid, "SIGTERM")
        self.wait_exit(self.sid, pid)
        self.assertTrue(wait_for(lambda: self.pgrep("sleep 100[12]") == 1, 5),
                        "the signal missed part of the process group")

    # -- timeouts --

    def test_command_timeout(self):
        start = time.monotonic()
        out = self.run_cmd(self.sid, cmd="sleep 30", timeout=1)
        self.assertLess(time.monotonic() - start, 10)
        self.assertEqual((out.exit.get("signal"), out.exit.get("timed_out")), (9, True), out.lines)
        self.assertNotIn("exit_code", out.exit)
        proc = self.process(self.sid, out.pid)
        self.assertEqual((proc.get("signal"), proc.get("timed_out")), (9, True), proc)
        result = self.wait_exit(self.sid, out.pid)
        self.assertEqual((result.get("signal"), result.get("timed_out")), (9, True), result)

    def test_command_timeout_kills_the_process_group(self):
        control = self.background(self.sid, argv=["sleep", "299"])
        self.assertEqual(self.pgrep("sleep 299"), 0, "pgrep does not find a running process")
        self.signal(control, "SIGKILL")
        out = self.run_cmd(self.sid, cmd="sleep 300 & sleep 301", timeout=1)
        self.assertEqual((out.exit.get("signal"), out.exit.get("timed_out")), (9, True), out.lines)
        self.assertTrue(wait_for(lambda: self.pgrep("sleep 30[01]") == 1, 5),
                        "a child of the timed-out command survived")

    def test_request_timeout_on_a_stream(self):
        start = time.monotonic()
        out = self.run_cmd(self.sid, "?request_timeout=1", cmd="sleep 4; echo done")
        self.assertLess(time.monotonic() - start, 3.5)
        self.assertIsNone(out.exit, out.lines)
        self.assertEqual([e.get("code") for e in out.errors], [408], out.lines)
        self.assertEqual(out.lines[-1]["type"], "error")
        self.assertIsNotNone(out.pid, out.lines)
        pid = out.pid
        self.assertTrue(self.process(self.sid, pid)["running"])
        self.assertEqual(self.wait_exit(self.sid, pid).get("exit_code"), 0)
        out = self.output(self.sid, pid)
        self.assertEqual(out.stdout, b"done\n")
        self.assertExit(out, 0)
        pid = self.background(self.sid, argv=["sleep", "1000"])
        start = time.monotonic()
        out = collect(self.daemon.stream(
            "GET", self.path(f"/{pid}/output?request_timeout=1"), timeout=30))
        self.assertLess(time.monotonic() - start, 3.5)
        self.assertEqual([e.get("code") for e in out.errors], [408], out.lines)
        self.assertTrue(self.process(self.sid, pid)["running"])
        self.signal(pid, "SIGKILL")

    def test_request_timeout_on_wait(self):
        pid = self.background(self.sid, argv=["sleep", "1000"])
        start = time.monotonic()
        status, body = self.daemon.request("GET", self.path(f"/{pid}/wait?request_timeout=1"))
        self.assertError(status, body, 408, "wait")
        self.assertLess(time.monotonic() - start, 4)
        self.assertTrue(self.process(self.sid, pid)["running"])
        self.signal(pid, "SIGKILL")

    # -- output --

    def test_reattach(self):
        pid = self.background(self.sid, cmd=COUNT_SCRIPT)
        lines = self.daemon.stream("GET", self.path(f"/{pid}/output"))
        first = Output()
        for line in lines:
            first.add(line)
            if len(first.data) >= 30:
                break
        lines.close()
        self.assertIsNone(first.exit, "the stream ended early")
        rest = self.output(self.sid, pid, offset=first.next_offset)
        self.assertEqual(rest.first_offset, first.next_offset)
        self.assertEqual(first.data + rest.data, COUNT_OUTPUT)
        self.assertExit(rest, 0)
        part = self.output(self.sid, pid, offset=5, follow=False)
        self.assertEqual(part.data, COUNT_OUTPUT[5:])
        self.assertExit(part, 0)

    def test_follow_false(self):
        pid = self.background(self.sid, cmd="echo a; sleep 1000")
        self.assertTrue(wait_for(lambda: self.output(self.sid, pid, follow=False).data, 5))
        start = time.monotonic()
        out = self.output(self.sid, pid, follow=False)
        self.assertLess(time.monotonic() - start, 3)
        self.assertEqual(out.data, b"a\n")
        self.assertEqual(out.lines[-1], {"type": "end", "offset": 2})
        self.assertIsNone(out.exit)
        self.signal(pid, "SIGKILL")
        self.wait_exit(self.sid, pid)
        out = self.output(self.sid, pid, follow=False)
        self.assertEqual(out.data, b"a\n")
        self.assertEqual(out.lines[-1].get("type"), "exit", out.lines)
        self.assertEqual(out.exit.get("signal"), 9)
        self.assertIsNone(out.end)

    def test_output_ring_keeps_the_latest_4_mib(self):
        total = 5 << 20
        pid = self.background(self.sid, cmd=f"head -c {total} /dev/zero | tr '\\0' a")
        self.assertEqual(self.wait_exit(self.sid, pid).get("exit_code"), 0)
        out = self.output(self.sid, pid, follow=False)
        self.assertEqual(out.lines[0]["type"], "truncated", out.lines[:2])
        self.assertEqual(out.lines[0]["from"], 0)
        self.assertEqual(out.lines[0]["to"] + len(out.data), total)
        self.assertTrue((4 << 20) - (256 << 10) <= len(out.data) <= 4 << 20, len(out.data))
        self.assertEqual(out.data.count(b"a"), len(out.data))
        self.assertExit(out, 0)

    def test_large_output_in_order(self):
        out = self.run_cmd(self.sid, argv=["seq", "1", "300000"])
        self.assertEqual(out.stdout, b"".join(b"%d\n" % i for i in range(1, 300001)))
        self.assertExit(out, 0)

    def test_non_utf8_output(self):
        out = self.run_cmd(self.sid, cmd=r"printf '\xff\xfe'")
        self.assertEqual(out.stdout, b"\xff\xfe")
        self.assertTrue(all("data_b64" in l for l in out.lines if l["type"] == "stdout"), out.lines)

    def test_split_utf8_character(self):
        out = self.run_cmd(self.sid, cmd=r"printf '\xc3'; sleep 0.5; printf '\xa9\n'")
        self.assertEqual([l for l in out.lines if l["type"] == "stdout"],
                         [{"type": "stdout", "offset": 0, "data": "\u00e9\n"}])

    # -- errors --

    def test_executable_not_found(self):
        for argv in (["/nonexistent/program"], ["no-such-command-xyz"]):
            out = self.run_cmd(self.sid, argv=argv)
            self.assertEqual([e.get("code") for e in out.errors], [404], out.lines)
            self.assertExit(out, 127)
            kinds = [l["type"] for l in out.lines]
            self.assertLess(kinds.index("error"), kinds.index("exit"))

    def test_unknown_pid(self):
        for method, suffix, body in (("GET", "/wait", None), ("GET", "/output", None),
                                     ("POST", "/signal", {"signal": 15}),
                                     ("POST", "/stdin", b"x"), ("POST", "/stdin/close", None)):
            status, answer = self.daemon.request(method, self.path(f"/99999{suffix}"), body)
            self.assertError(status, answer, 404, f"{method} {suffix}")

    def test_bad_query_parameters(self):
        pid = self.background(self.sid, argv=["true"])
        self.wait_exit(self.sid, pid)
        before = len(self.processes(self.sid))
        for method, path in (("GET", f"/v1/sandboxes/{self.sid}?bogus=1"),
                             ("POST", self.path("?bogus=1")),
                             ("POST", self.path("?request_timeout=0")),
                             ("GET", self.path(f"/{pid}/output?offset=-1")),
                             ("GET", self.path(f"/{pid}/output?offset=x")),
                             ("GET", self.path(f"/{pid}/output?follow=maybe")),
                             ("GET", self.path(f"/{pid}/wait?request_timeout=86401")),
                             ("GET", self.path(f"/{pid}/wait?bogus=1"))):
            status, body = self.daemon.request(method, path,
                                               {"argv": ["true"]} if method == "POST" else None)
            self.assertError(status, body, 400, f"{method} {path}")
        self.assertEqual(len(self.processes(self.sid)), before, "a rejected command ran")

    def test_bad_command_bodies(self):
        before = len(self.processes(self.sid))
        for body in ({}, {"cmd": "true", "argv": ["true"]}, {"argv": []}, {"argv": [1]},
                     {"argv": "true"}, {"cmd": 5}, {"cmd": "true", "cwd": "tmp"},
                     {"cmd": "true", "user": "admin"}, {"cmd": "true", "timeout": -1},
                     {"cmd": "true", "timeout": "1"}, {"cmd": "true", "background": "yes"},
                     {"cmd": "true", "stdin": 1}, {"cmd": "true", "env": {"A": 1}},
                     {"cmd": "true", "env": {"1A": "x"}}, {"cmd": "true", "bogus": 1},
                     {"cmd": "true", "tag": 5}, b"{", b"[]"):
            status, answer = self.daemon.request("POST", self.path(), body)
            self.assertError(status, answer, 400, f"body {body!r}")
        self.assertEqual(len(self.processes(self.sid)), before, "a rejected command ran")


if __name__ == "__main__":
    unittest.main()
