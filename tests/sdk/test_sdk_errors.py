"""The SDK's typed errors: each carries the daemon's status and message."""

import threading
import unittest

from sdktest import RUN_LIMIT, SdkTestCase, brig, free_port, wait_until


class ErrorsTest(SdkTestCase):

    def test_wrong_key_is_authentication_error(self):
        bad = {"api_url": self.daemon.url, "api_key": "not-the-key"}
        err = self.assertRaisesBrig(brig.AuthenticationError, brig.Sandbox.create, status=401,
                                    **bad)
        self.assertIn("API key", err.message)
        self.assertRaisesBrig(brig.AuthenticationError, brig.Sandbox.list, status=401, **bad)
        sb = self.sandbox()
        self.assertRaisesBrig(brig.AuthenticationError, brig.Sandbox.connect, sb.sandbox_id,
                              status=401, **bad)
        intruder = brig.Sandbox(sb.sandbox_id, **bad)
        self.addCleanup(intruder.close)
        self.assertRaisesBrig(brig.AuthenticationError, intruder.kill, status=401)
        self.assertRaisesBrig(brig.AuthenticationError, intruder.commands.run, "true",
                              status=401)
        self.assertTrue(sb.is_running(), "nothing happened with the wrong key")
        # No key at all: the message says how to give one.
        err = self.assertRaisesBrig(brig.AuthenticationError, brig.Sandbox.list,
                                    api_url=self.daemon.url, api_key="", status=401)
        self.assertIn("BRIG_API_KEY", err.message)
        self.assertIs(brig.AuthenticationException, brig.AuthenticationError)

    def test_unknown_sandbox_is_not_found(self):
        missing = "a" * 20
        err = self.assertRaisesBrig(brig.NotFoundError, brig.Sandbox.connect, missing,
                                    status=404, **self.kw)
        self.assertIn(missing, err.message)
        ghost = brig.Sandbox(missing, **self.kw)
        self.addCleanup(ghost.close)
        self.assertRaisesBrig(brig.NotFoundError, ghost.get_info, status=404)
        self.assertRaisesBrig(brig.NotFoundError, ghost.commands.run, "true", status=404)
        self.assertRaisesBrig(brig.NotFoundError, ghost.set_timeout, 10, status=404)
        self.assertFalse(ghost.is_running())
        self.assertFalse(ghost.kill())
        self.assertRaisesBrig(brig.NotFoundError, brig.Sandbox.create, template="no-such",
                              status=404, **self.kw)

    def test_command_on_a_paused_sandbox_is_a_conflict(self):
        sb = self.sandbox()
        sb.pause()
        err = self.assertRaisesBrig(brig.ConflictError, sb.commands.run, "true", status=409)
        self.assertIn("paused", err.message)
        self.assertNotIsInstance(err, brig.SandboxLostError)
        self.assertRaisesBrig(brig.ConflictError, sb.commands.run, "true", background=True,
                              status=409)
        self.assertRaisesBrig(brig.ConflictError, sb.commands.list, status=409)
        sb.resume()
        self.assertEqual(sb.commands.run("echo ok", request_timeout=RUN_LIMIT).stdout, "ok\n")

    def test_invalid_arguments(self):
        err = self.assertRaisesBrig(brig.InvalidArgumentError, brig.Sandbox.create,
                                    memory_mb=1, status=400, **self.kw)
        self.assertIn("memory_mb", err.message)
        self.assertRaisesBrig(brig.InvalidArgumentError, brig.Sandbox.create, timeout=0,
                              status=400, **self.kw)
        sb = self.sandbox()
        self.assertRaisesBrig(brig.InvalidArgumentError, sb.commands.run, "true",
                              cwd="relative", status=400)
        self.assertRaisesBrig(brig.InvalidArgumentError, sb.commands.signal, 1, "SIGNOPE",
                              status=400)
        with self.assertRaises(TypeError):
            sb.commands.run([])

    def test_ended_sandbox_is_lost(self):
        sb = self.sandbox()
        sb.kill()
        err = self.assertRaisesBrig(brig.SandboxLostError, sb.commands.run, "true")
        self.assertEqual(err.state, "stopped")
        self.assertRaisesBrig(brig.SandboxLostError, sb.pause)

    def test_sandbox_killed_during_a_command(self):
        sb = self.sandbox()
        caught = {}

        def run():
            try:
                sb.commands.run("echo started; sleep 60", request_timeout=RUN_LIMIT)
            except BaseException as e:  # noqa: BLE001 - examined below
                caught["error"] = e

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.assertTrue(wait_until(lambda: any(p.running and p.argv[-1:] ==
                                               ["echo started; sleep 60"]
                                               for p in sb.commands.list()), 10))
        sb.kill()
        thread.join(30)
        self.assertFalse(thread.is_alive(), "the foreground run did not end with the sandbox")
        self.assertIsInstance(caught.get("error"), brig.SandboxLostError, caught)
        self.assertEqual(caught["error"].state, "stopped")
        self.assertIn("killed", str(caught["error"]))

    def test_unreachable_daemon(self):
        url = f"http://127.0.0.1:{free_port()}"
        err = self.assertRaisesBrig(brig.ApiConnectionError, brig.Sandbox.list, api_url=url,
                                    api_key="k")
        self.assertIsNone(err.status)
        self.assertIn("127.0.0.1", err.message)

    def test_exception_hierarchy(self):
        for cls in (brig.AuthenticationError, brig.NotFoundError, brig.InvalidArgumentError,
                    brig.SandboxTimeoutError, brig.ConflictError, brig.SandboxLostError,
                    brig.ServerError, brig.NotEnoughSpaceError, brig.ApiConnectionError,
                    brig.CommandExitError):
            self.assertTrue(issubclass(cls, brig.BrigError), cls)
        self.assertTrue(issubclass(brig.SandboxTimeoutError, TimeoutError))
        err = brig.exceptions.error_for_status(503, "shutting down")
        self.assertIsInstance(err, brig.ServerError)
        self.assertEqual((err.status, err.message), (503, "shutting down"))
        self.assertIsInstance(brig.exceptions.error_for_status(413, "big"),
                              brig.InvalidArgumentError)
        self.assertIsInstance(brig.exceptions.error_for_status(408, "late"),
                              brig.SandboxTimeoutError)
        lost = brig.exceptions.error_for_status(409, "cannot pause sandbox x: it is lost")
        self.assertIsInstance(lost, brig.SandboxLostError)
        self.assertEqual(lost.state, "lost")


if __name__ == "__main__":
    unittest.main()
