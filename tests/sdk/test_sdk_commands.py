"""The SDK's commands: foreground with callbacks, exit errors, background handles, stdin,
signals and kill, re-attaching by pid, resuming a dropped stream, timeouts."""

import time
import unittest

from sdktest import RUN_LIMIT, Collector, SdkTestCase, brig, wait_until


class CommandsTest(SdkTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sb = cls.class_sandbox(envs={"SB": "sandbox", "OVER": "sandbox"})

    def run_fg(self, cmd, **kw):
        kw.setdefault("request_timeout", RUN_LIMIT)
        return self.sb.commands.run(cmd, **kw)

    def running(self, pid):
        return [p for p in self.sb.commands.list() if p.pid == pid and p.running]

    # -- foreground --

    def test_foreground_with_callbacks(self):
        out, err = Collector(), Collector()
        result = self.run_fg("for i in 1 2 3; do echo out-$i; echo err-$i >&2; sleep 0.05; done",
                             on_stdout=out, on_stderr=err)
        self.assertIsInstance(result, brig.CommandResult)
        self.assertEqual(result.exit_code, 0)
        self.assertEqual(result.stdout, "out-1\nout-2\nout-3\n")
        self.assertEqual(result.stderr, "err-1\nerr-2\nerr-3\n")
        self.assertIsNone(result.error)
        self.assertIsNone(result.signal)
        self.assertFalse(result.timed_out)
        self.assertIsInstance(result.pid, int)
        self.assertTrue(all(isinstance(s, str) for s in out.items + err.items))
        self.assertGreaterEqual(len(out.items), 2, "output came in pieces, as it was written")
        self.assertEqual(out.joined(), result.stdout)
        self.assertEqual(err.joined(), result.stderr)

    def test_argv_env_cwd_user(self):
        self.assertEqual(self.run_fg(["printf", "%s|", "a b", "c"]).stdout, "a b|c|")
        self.assertEqual(self.run_fg("echo $SB $OVER $ONLY", envs={"OVER": "cmd", "ONLY": "x"})
                         .stdout, "sandbox cmd x\n")
        self.assertEqual(self.run_fg(["pwd"]).stdout, "/home/user\n")
        self.assertEqual(self.run_fg(["pwd"], cwd="/tmp").stdout, "/tmp\n")
        self.assertEqual(self.run_fg(["id", "-u"]).stdout, "1000\n")
        self.assertEqual(self.run_fg(["id", "-u"], user="root").stdout, "0\n")

    def test_output_that_is_not_utf8_is_replaced(self):
        result = self.run_fg(r"printf 'a\xffb\n'; printf 'caf\xc3\xa9\n' >&2")
        self.assertEqual(result.stdout, "a\ufffdb\n")
        self.assertEqual(result.stderr, "caf\u00e9\n")

    def test_large_output(self):
        result = self.run_fg("head -c 3000000 /dev/zero | tr '\\0' a; echo")
        self.assertEqual(len(result.stdout), 3000001)
        self.assertEqual(result.stdout.count("a"), 3000000)

    def test_non_zero_exit_raises_with_the_result(self):
        with self.assertRaises(brig.CommandExitError) as caught:
            self.run_fg("echo partial; echo oops >&2; exit 3")
        err = caught.exception
        self.assertIsInstance(err, brig.BrigError)
        self.assertEqual(err.exit_code, 3)
        self.assertEqual(err.result.exit_code, 3)
        self.assertEqual((err.stdout, err.stderr), ("partial\n", "oops\n"))
        self.assertIn("3", str(err))
        self.assertIs(brig.CommandExitException, brig.CommandExitError)

    def test_executable_not_found(self):
        with self.assertRaises(brig.CommandExitError) as caught:
            self.run_fg(["/no/such/program"])
        self.assertEqual(caught.exception.exit_code, 127)
        self.assertTrue(caught.exception.error, "the daemon's error message is kept")

    # -- background --

    def test_background_and_wait(self):
        start = time.monotonic()
        h = self.sb.commands.run("sleep 1; echo done; echo e >&2; exit 0", background=True,
                                 tag="bg-tag")
        self.assertLess(time.monotonic() - start, 2.5, "background did not return at once")
        self.assertIsInstance(h, brig.CommandHandle)
        self.assertIsInstance(h.pid, int)
        self.assertEqual(h.tag, "bg-tag")
        procs = [p for p in self.sb.commands.list() if p.pid == h.pid]
        self.assertEqual(len(procs), 1)
        self.assertTrue(procs[0].running)
        self.assertEqual(procs[0].tag, "bg-tag")
        out = Collector()
        result = h.wait(on_stdout=out, timeout=30)
        self.assertEqual((result.exit_code, result.stdout, result.stderr), (0, "done\n", "e\n"))
        self.assertEqual(out.joined(), "done\n")
        self.assertEqual(h.exit_code, 0)
        self.assertEqual(h.wait(timeout=5), result, "a second wait gives the same result")
        procs = [p for p in self.sb.commands.list() if p.pid == h.pid]
        self.assertEqual((procs[0].running, procs[0].exit_code), (False, 0))

    def test_background_failure_raises_on_wait(self):
        h = self.sb.commands.run("echo bad >&2; exit 5", background=True)
        with self.assertRaises(brig.CommandExitError) as caught:
            h.wait(timeout=30)
        self.assertEqual((caught.exception.exit_code, caught.exception.stderr), (5, "bad\n"))

    def test_background_with_callbacks_streams_from_a_thread(self):
        out = Collector()
        h = self.sb.commands.run("for i in 1 2 3; do echo $i; sleep 0.3; done", background=True,
                                 on_stdout=out)
        self.assertTrue(out.wait_for(lambda items: "1\n" in "".join(items), 10),
                        "no output reached the callback before wait()")
        result = h.wait(timeout=30)
        self.assertEqual(result.stdout, "1\n2\n3\n")
        self.assertEqual(out.joined(), "1\n2\n3\n")

    def test_stdin_to_cat(self):
        h = self.sb.commands.run(["cat"], background=True, stdin=True)
        h.send_stdin("hello ")
        h.send_stdin(b"world\n\xff")
        self.sb.commands.send_stdin(h.pid, "via commands\n")
        h.close_stdin()
        result = h.wait(timeout=30)
        self.assertEqual(result.exit_code, 0)
        self.assertEqual(result.stdout, "hello world\n\ufffdvia commands\n")
        with self.assertRaises(brig.ConflictError):
            h.send_stdin("after exit")

    def test_stdin_not_opened_is_a_conflict(self):
        h = self.sb.commands.run(["sleep", "100"], background=True)
        self.addCleanup(h.kill)
        err = self.assertRaisesBrig(brig.ConflictError, h.send_stdin, "x", status=409)
        self.assertNotIsInstance(err, brig.SandboxLostError)

    def test_kill(self):
        h = self.sb.commands.run(["sleep", "1000"], background=True)
        self.assertTrue(self.running(h.pid))
        self.assertTrue(h.kill())
        with self.assertRaises(brig.CommandExitError) as caught:
            h.wait(timeout=30)
        self.assertEqual(caught.exception.signal, 9)
        self.assertEqual(caught.exception.exit_code, -9)
        self.assertFalse(self.running(h.pid))
        self.assertFalse(h.kill(), "killing an exited process is False")
        self.assertFalse(self.sb.commands.kill(999999), "killing an unknown pid is False")
        # By pid, through commands.
        other = self.sb.commands.run(["sleep", "1000"], background=True)
        self.assertTrue(self.sb.commands.kill(other.pid))
        self.assertTrue(wait_until(lambda: not self.running(other.pid), 10))

    def test_signal(self):
        h = self.sb.commands.run(["sleep", "1000"], background=True)
        h.signal("SIGTERM")
        with self.assertRaises(brig.CommandExitError) as caught:
            h.wait(timeout=30)
        self.assertEqual(caught.exception.signal, 15)
        h = self.sb.commands.run(["sleep", "1000"], background=True)
        import signal as sig
        self.sb.commands.signal(h.pid, sig.SIGINT)
        with self.assertRaises(brig.CommandExitError) as caught:
            h.wait(timeout=30)
        self.assertEqual(caught.exception.signal, 2)
        with self.assertRaises(brig.ConflictError):
            h.signal(15)

    def test_connect_by_pid_after_dropping_the_handle(self):
        h = self.sb.commands.run("echo first; sleep 1; echo second", background=True,
                                 tag="reattach")
        pid = h.pid
        del h
        again = self.sb.commands.connect(pid)
        self.assertEqual(again.pid, pid)
        result = again.wait(timeout=30)
        self.assertEqual(result.stdout, "first\nsecond\n", "output replayed from offset 0")
        self.assertEqual(result.pid, pid)
        with self.assertRaises(brig.NotFoundError):
            self.sb.commands.connect(999999)

    def test_wait_resumes_where_it_stopped(self):
        h = self.sb.commands.run("echo a; sleep 2; echo b; sleep 2; echo c", background=True)
        start = time.monotonic()
        with self.assertRaises(brig.SandboxTimeoutError):
            h.wait(timeout=1)
        self.assertLess(time.monotonic() - start, 5)
        self.assertTrue(self.running(h.pid), "a wait that timed out leaves it running")
        self.assertEqual(h.stdout, "a\n")
        self.assertEqual(h.offset, 2)
        result = h.wait(timeout=30)
        self.assertEqual(result.stdout, "a\nb\nc\n", "no byte lost or repeated")

    def test_dropped_stream_resumes(self):
        out = Collector()
        h = self.sb.commands.run("for i in $(seq 1 12); do echo line-$i; sleep 0.1; done",
                                 background=True, on_stdout=out)
        self.assertTrue(out.wait_for(lambda items: "line-2" in "".join(items), 10))
        # Break the connection under the handle's thread: it re-attaches at its offset.
        self.assertTrue(wait_until(lambda: h._stream is not None, 5))
        h._stream.close()
        result = h.wait(timeout=30)
        expected = "".join(f"line-{i}\n" for i in range(1, 13))
        self.assertEqual(result.stdout, expected)
        self.assertEqual(out.joined(), expected, "callbacks saw each byte exactly once")

    def test_disconnect_then_wait(self):
        out = Collector()
        h = self.sb.commands.run("echo one; sleep 1; echo two", background=True, on_stdout=out)
        self.assertTrue(out.wait_for(lambda items: "one" in "".join(items), 10))
        h.disconnect()
        self.assertTrue(self.running(h.pid), "disconnect does not stop the process")
        self.assertEqual(h.wait(timeout=30).stdout, "one\ntwo\n")

    def test_process_list(self):
        h = self.sb.commands.run(["sleep", "77"], background=True, tag="listed")
        procs = {p.pid: p for p in self.sb.commands.list()}
        self.assertIn(h.pid, procs)
        p = procs[h.pid]
        self.assertIsInstance(p, brig.ProcessInfo)
        self.assertEqual((p.argv, p.cmd, p.args, p.tag, p.running),
                         (["sleep", "77"], "sleep", ["77"], "listed", True))
        h.kill()

    # -- timeouts --

    def test_command_timeout_raises(self):
        start = time.monotonic()
        with self.assertRaises(brig.SandboxTimeoutError) as caught:
            self.run_fg("echo before; sleep 30", timeout=1)
        self.assertLess(time.monotonic() - start, 10)
        err = caught.exception
        self.assertIsInstance(err, TimeoutError, "also the builtin TimeoutError")
        self.assertIs(brig.TimeoutException, brig.SandboxTimeoutError)
        self.assertIsNotNone(err.result)
        self.assertTrue(err.result.timed_out)
        self.assertEqual(err.result.signal, 9)
        self.assertEqual(err.result.stdout, "before\n")
        # A background one too.
        h = self.sb.commands.run(["sleep", "30"], background=True, timeout=1)
        with self.assertRaises(brig.SandboxTimeoutError) as caught:
            h.wait(timeout=20)
        self.assertTrue(caught.exception.result.timed_out)

    def test_request_timeout_leaves_the_process_running(self):
        start = time.monotonic()
        with self.assertRaises(brig.SandboxTimeoutError):
            self.sb.commands.run("sleep 3; echo done", request_timeout=1)
        self.assertLess(time.monotonic() - start, 3)
        procs = [p for p in self.sb.commands.list() if p.argv[-1:] == ["sleep 3; echo done"]]
        self.assertTrue(procs and procs[-1].running, procs)
        self.assertEqual(self.sb.commands.connect(procs[-1].pid).wait(timeout=30).stdout,
                         "done\n")


class DaemonRestartTest(SdkTestCase):
    """Sandboxes outlive the daemon; the SDK's streams re-attach at their offsets when it is
    back (docs/api.md, "Durability")."""

    def test_streams_resume_across_a_daemon_restart(self):
        import threading
        sb = self.sandbox()
        opened = []
        real_stream = sb._stream

        def counting_stream(method, path, **kw):
            opened.append(path.rsplit("/", 1)[-1])
            return real_stream(method, path, **kw)

        sb._stream = counting_stream
        script = "for i in $(seq 1 40); do echo line-$i; sleep 0.1; done"
        expected = "".join(f"line-{i}\n" for i in range(1, 41))
        out = Collector()
        h = sb.commands.run(script, background=True, on_stdout=out)
        fg = {}

        def foreground():
            try:
                fg["result"] = sb.commands.run(script, request_timeout=RUN_LIMIT)
            except BaseException as e:  # noqa: BLE001 - examined below
                fg["error"] = e

        thread = threading.Thread(target=foreground, daemon=True)
        thread.start()
        self.assertTrue(out.wait_for(lambda items: "line-3" in "".join(items), 10))
        self.daemon.restart()
        result = h.wait(timeout=40)
        thread.join(40)
        self.assertEqual(result.stdout, expected)
        self.assertEqual(out.joined(), expected, "each byte once, across the restart")
        self.assertNotIn("error", fg, fg.get("error"))
        self.assertEqual(fg["result"].stdout, expected)
        self.assertTrue(sb.is_running(), "the pooled connections to the old daemon were dropped")
        self.assertGreaterEqual(opened.count("output"), 3,
                                f"both streams re-attached after the restart: {opened}")


if __name__ == "__main__":
    unittest.main()
