"""Durability: sandboxes outlive the daemon; a restarted daemon takes them over, re-attaches
output produced meanwhile, marks the dead ones `lost` and ends the expired ones
(docs/api.md, "Durability")."""

import os
import signal
import time
import unittest

from brigtest import DaemonTestCase, Output, host_pid1, host_pids, pid_alive, wait_for

COUNTER = "i=0; while :; do echo $i; i=$((i+1)); sleep 0.05; done"


class RestartTest(DaemonTestCase):

    def read_counter(self, sid, pid, offset, until, timeout=15):
        """Follows the counter's output from `offset` until `until(numbers)` holds; checks
        that every line is the previous plus one. Returns (numbers, next offset)."""
        out, numbers = Output(), []
        lines = self.daemon.stream("GET", f"/v1/sandboxes/{sid}/commands/{pid}/output"
                                   f"?offset={offset}", timeout=timeout)
        deadline = time.monotonic() + timeout
        try:
            for line in lines:
                out.add(line)
                if out.first_offset is not None:
                    self.assertEqual(out.first_offset, offset)
                complete = out.data[:out.data.rfind(b"\n") + 1]
                numbers = [int(n) for n in complete.split()]
                if numbers and until(numbers) and out.data.endswith(b"\n"):
                    break
                self.assertLess(time.monotonic(), deadline, "counter output too slow")
        finally:
            lines.close()
        self.assertIsNone(out.exit, out.lines[-3:])
        self.assertTrue(numbers, out.lines)
        self.assertEqual(numbers, list(range(numbers[0], numbers[0] + len(numbers))),
                         "gap or duplicate in the counter")
        return numbers, out.next_offset

    def test_sandboxes_survive_kill_9(self):
        # A: a counter that keeps writing while the daemon is down.
        a = self.create(timeout=600)["id"]
        pid = self.background(a, cmd=COUNTER, tag="counter")
        before, offset = self.read_counter(a, pid, 0, lambda n: len(n) >= 10)
        self.assertEqual(before[0], 0)
        ends = self.background(a, cmd="sleep 1; exit 5")  # exits while the daemon is down
        # B: its PID 1 dies while the daemon is down. C: its lifetime passes meanwhile. D: paused.
        b = self.create(timeout=600)["id"]
        c = self.create(timeout=600)["id"]
        d = self.create(timeout=600)["id"]
        remaining = self.api("POST", f"/v1/sandboxes/{d}/pause")["remaining_s"]
        b_pid1, c_pid1 = host_pid1(b), host_pid1(c)
        self.assertIsNotNone(b_pid1)
        self.assertIsNotNone(c_pid1)
        self.api("POST", f"/v1/sandboxes/{c}/timeout", {"timeout": 2})
        self.daemon.kill9()
        down = time.monotonic()
        os.kill(b_pid1, signal.SIGKILL)
        self.assertTrue(wait_for(lambda: not pid_alive(b_pid1), 5))
        time.sleep(max(0.0, down + 3.0 - time.monotonic()))
        self.assertTrue(pid_alive(host_pid1(a) or -1), "A died with the daemon")
        self.assertTrue(pid_alive(c_pid1), "C died with the daemon")
        self.daemon.start()

        sb = self.get(a)
        self.assertEqual(sb["state"], "running", sb)
        proc = self.process(a, pid)
        self.assertTrue(proc["running"], proc)
        self.assertEqual(proc["tag"], "counter")
        # ~3 s down at 20 lines/s: at least 40 lines were written meanwhile; then some live.
        after, _ = self.read_counter(a, pid, offset, lambda n: len(n) >= 70)
        self.assertEqual(after[0], before[-1] + 1, "the counter does not continue")
        out = self.run_cmd(a, argv=["echo", "alive"])
        self.assertEqual(out.stdout, b"alive\n")
        self.assertEqual(self.wait_exit(a, ends), {"exit_code": 5})

        sb = self.get(d)
        self.assertEqual(sb["state"], "paused")
        self.assertAlmostEqual(sb["remaining_s"], remaining, delta=1)
        self.assertEqual(self.api("POST", f"/v1/sandboxes/{d}/resume")["state"], "running")
        self.assertEqual(self.run_cmd(d, argv=["echo", "thawed"]).stdout, b"thawed\n")

        sb = self.wait_state(b, "lost", timeout=10)
        self.assertIsInstance(sb["reason"], str)
        self.assertTrue(sb["reason"].strip(), sb)
        for method, suffix, body in (("POST", "/commands", {"cmd": "true"}), ("DELETE", "", None)):
            status, answer = self.daemon.request(method, f"/v1/sandboxes/{b}{suffix}", body)
            self.assertError(status, answer, 409, f"{method} {suffix} on lost")

        sb = self.wait_state(c, "stopped", timeout=10)
        self.assertEqual(sb["reason"], "timeout")
        self.assertTrue(wait_for(lambda: not host_pids(c), 5), "C's processes survive")

    def test_sandboxes_survive_sigterm(self):
        key = self.daemon.key
        sid = self.create(timeout=600)["id"]
        pid1 = host_pid1(sid)
        self.daemon.stop()
        self.assertTrue(pid_alive(pid1), "a stopped daemon took its sandbox along")
        self.daemon.start()
        self.assertEqual(self.daemon.key, key, "the API key changed on restart")
        self.assertEqual(self.get(sid)["state"], "running")
        self.assertEqual(host_pid1(sid), pid1)
        self.assertEqual(self.run_cmd(sid, argv=["echo", "ok"]).stdout, b"ok\n")


if __name__ == "__main__":
    unittest.main()
