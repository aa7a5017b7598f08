"""The SDK's Sandbox: create, info, list (pagination), timeout, pause/resume, connect, kill,
the context manager, configuration from the environment."""

import os
import socket
import unittest
import uuid
from datetime import datetime, timedelta, timezone
from unittest import mock

from sdktest import RUN_LIMIT, SdkTestCase, brig, wait_until


def tag():
    return uuid.uuid4().hex[:12]


class SandboxLifecycleTest(SdkTestCase):

    def test_create_and_info(self):
        t = tag()
        sb = self.sandbox(timeout=600, envs={"GREETING": "hello"}, metadata={"t": t},
                          cpus=0.5, memory_mb=256, disk_mb=512)
        self.assertRegex(sb.sandbox_id, r"^[a-z0-9]{20}$")
        info = sb.get_info()
        self.assertIsInstance(info, brig.SandboxInfo)
        self.assertEqual(info.id, sb.sandbox_id)
        self.assertEqual(info.sandbox_id, sb.sandbox_id)
        self.assertEqual(info.state, "running")
        self.assertEqual(info.state, brig.SandboxState.RUNNING)
        self.assertEqual(info.template, "base")
        self.assertEqual((info.cpus, info.memory_mb, info.disk_mb), (0.5, 256, 512))
        self.assertEqual(info.env, {"GREETING": "hello"})
        self.assertEqual(info.metadata, {"t": t})
        self.assertIsNone(info.name)
        self.assertIsNone(info.reason)
        self.assertIsNone(info.ended_at)
        self.assertIsInstance(info.created_at, datetime)
        self.assertIsNotNone(info.created_at.tzinfo)
        left = info.expires_at - datetime.now(timezone.utc)
        self.assertTrue(timedelta(seconds=540) < left <= timedelta(seconds=601), left)
        self.assertTrue(sb.is_running())
        # The raw JSON agrees with what the daemon says directly.
        self.assertEqual(info.raw["id"], self.get(sb.sandbox_id)["id"])
        # The environment reaches commands.
        self.assertEqual(sb.commands.run("echo $GREETING", request_timeout=RUN_LIMIT).stdout,
                         "hello\n")

    def test_named_create_returns_the_live_one(self):
        name = "sdk-" + tag()
        first = self.sandbox(name=name)
        second = self.sandbox(name=name, memory_mb=128)
        self.assertEqual(second.sandbox_id, first.sandbox_id)
        self.assertEqual(first.get_info().name, name)
        found = brig.Sandbox.list(name=name, **self.kw)
        self.assertEqual([s.id for s in found], [first.sandbox_id])

    def test_list_filters(self):
        t = tag()
        a = self.sandbox(metadata={"t": t, "role": "a"})
        b = self.sandbox(metadata={"t": t, "role": "b"})
        ids = [s.id for s in brig.Sandbox.list(metadata={"t": t}, **self.kw)]
        self.assertEqual(ids, [b.sandbox_id, a.sandbox_id], "newest first")
        only_a = brig.Sandbox.list(metadata={"t": t, "role": "a"}, **self.kw)
        self.assertEqual([s.id for s in only_a], [a.sandbox_id])
        self.assertTrue(all(isinstance(s, brig.SandboxInfo) for s in only_a))
        running = brig.Sandbox.list(state="running", metadata={"t": t}, **self.kw)
        self.assertEqual(len(running), 2)
        b.kill()
        running = brig.Sandbox.list(state=["running", "paused"], metadata={"t": t}, **self.kw)
        self.assertEqual([s.id for s in running], [a.sandbox_id])
        stopped = brig.Sandbox.list(state="stopped", metadata={"t": t}, **self.kw)
        self.assertEqual([(s.id, s.reason) for s in stopped], [(b.sandbox_id, "killed")])

    def test_list_follows_pagination(self):
        t = tag()
        made = [self.sandbox(metadata={"t": t}).sandbox_id for _ in range(5)]
        pages = []
        real = brig.sandbox.Transport.request

        def spy(transport, method, path, **kw):
            if path == "/v1/sandboxes" and method == "GET":
                pages.append(dict(kw.get("query") or {}))
            return real(transport, method, path, **kw)

        with mock.patch.object(brig.sandbox, "_LIST_PAGE", 2), \
                mock.patch.object(brig.sandbox.Transport, "request", spy):
            found = brig.Sandbox.list(metadata={"t": t}, **self.kw)
        self.assertEqual([s.id for s in found], list(reversed(made)))
        self.assertEqual(len(pages), 3, pages)
        self.assertNotIn("cursor", pages[0])
        self.assertTrue(all("cursor" in p for p in pages[1:]), pages)
        # limit: at most that many, still across pages.
        with mock.patch.object(brig.sandbox, "_LIST_PAGE", 2):
            limited = brig.Sandbox.list(metadata={"t": t}, limit=3, **self.kw)
        self.assertEqual([s.id for s in limited], list(reversed(made))[:3])
        self.assertEqual(len(brig.Sandbox.list(metadata={"t": t}, limit=1, **self.kw)), 1)

    def test_set_timeout(self):
        sb = self.sandbox(timeout=600)
        info = sb.set_timeout(1200)
        self.assertIsInstance(info, brig.SandboxInfo)
        left = info.expires_at - datetime.now(timezone.utc)
        self.assertTrue(timedelta(seconds=1140) < left <= timedelta(seconds=1201), left)
        sb.set_timeout(2)
        self.assertTrue(wait_until(lambda: self.state_of(sb.sandbox_id) == "stopped", 20),
                        self.get(sb.sandbox_id))
        info = sb.get_info()
        self.assertEqual((info.state, info.reason), ("stopped", "timeout"))
        self.assertFalse(sb.is_running())
        err = self.assertRaisesBrig(brig.SandboxLostError, sb.commands.run, "true")
        self.assertEqual(err.state, "stopped")
        self.assertFalse(sb.kill(), "kill of an ended sandbox is False")

    def test_pause_resume(self):
        sb = self.sandbox(timeout=600)
        h = sb.commands.run("for i in $(seq 1 1000); do echo $i; sleep 0.1; done",
                            background=True)
        info = sb.pause()
        self.assertEqual(info.state, "paused")
        self.assertIsNone(info.expires_at)
        self.assertIsNotNone(info.remaining_s)
        self.assertTrue(0 < info.remaining_s <= 600, info.remaining_s)
        self.assertFalse(sb.is_running())
        self.assertEqual(sb.pause().state, "paused", "pause when paused is a no-op")
        info = sb.resume()
        self.assertEqual(info.state, "running")
        self.assertIsNotNone(info.expires_at)
        self.assertTrue(sb.is_running())
        self.assertEqual(sb.resume().state, "running", "resume when running is a no-op")
        # The background process survived the pause.
        self.assertTrue([p for p in sb.commands.list() if p.pid == h.pid and p.running])
        h.kill()

    def test_connect_resumes_a_paused_sandbox(self):
        sb = self.sandbox(timeout=600)
        sb.commands.run("echo kept > /tmp/mark", request_timeout=RUN_LIMIT)
        sb.pause()
        other = brig.Sandbox.connect(sb.sandbox_id, **self.kw)
        try:
            self.assertEqual(other.sandbox_id, sb.sandbox_id)
            self.assertEqual(self.state_of(sb.sandbox_id), "running")
            self.assertEqual(other.commands.run("cat /tmp/mark", request_timeout=RUN_LIMIT)
                             .stdout, "kept\n")
            # Connecting to a running one changes nothing.
            again = brig.Sandbox.connect(sb.sandbox_id, **self.kw)
            self.assertTrue(again.is_running())
            again.close()
        finally:
            other.close()
        sb.kill()
        err = self.assertRaisesBrig(brig.SandboxLostError, brig.Sandbox.connect,
                                    sb.sandbox_id, **self.kw)
        self.assertEqual((err.state, err.reason), ("stopped", "killed"))

    def test_kill(self):
        sb = self.sandbox()
        h = sb.commands.run(["sleep", "1000"], background=True)
        self.assertTrue(sb.kill())
        info = sb.get_info()
        self.assertEqual((info.state, info.reason), ("stopped", "killed"))
        self.assertIsNotNone(info.ended_at)
        self.assertFalse(sb.is_running())
        self.assertFalse(sb.kill(), "a second kill is False")
        with self.assertRaises(brig.SandboxLostError):
            h.wait(timeout=10)

    def test_context_manager_kills(self):
        with brig.Sandbox.create(timeout=600, **self.kw) as sb:
            self.daemon.seen_ids.add(sb.sandbox_id)
            self.assertEqual(self.state_of(sb.sandbox_id), "running")
            sid = sb.sandbox_id
        self.assertEqual(self.get(sid)["state"], "stopped")
        self.assertEqual(self.get(sid)["reason"], "killed")
        # Also when the block raises; the exception goes through.
        with self.assertRaises(ZeroDivisionError):
            with brig.Sandbox.create(timeout=600, **self.kw) as sb:
                self.daemon.seen_ids.add(sb.sandbox_id)
                sid = sb.sandbox_id
                1 / 0
        self.assertEqual(self.get(sid)["state"], "stopped")
        # A sandbox killed inside the block does not make the exit fail.
        with brig.Sandbox.create(timeout=600, **self.kw) as sb:
            self.daemon.seen_ids.add(sb.sandbox_id)
            sb.kill()

    def test_configuration_from_the_environment(self):
        env = {"BRIG_URL": self.daemon.url, "BRIG_API_KEY": self.daemon.key}
        with mock.patch.dict(os.environ, env):
            sb = brig.Sandbox.create(timeout=600)
            self.daemon.seen_ids.add(sb.sandbox_id)
            self.addCleanup(self._dispose, sb)
            self.assertEqual(sb.api_url, self.daemon.url)
            self.assertIn(sb.sandbox_id, [s.id for s in brig.Sandbox.list(state="running")])
        # Arguments win over the environment.
        with mock.patch.dict(os.environ, {"BRIG_URL": "http://127.0.0.1:9",
                                          "BRIG_API_KEY": "wrong"}):
            again = brig.Sandbox.connect(sb.sandbox_id, **self.kw)
            self.addCleanup(again.close)
            self.assertTrue(again.is_running())
            with self.assertRaises(brig.AuthenticationError):
                brig.Sandbox.connect(sb.sandbox_id, api_url=self.daemon.url)

    def test_keep_alive_survives_the_daemon_closing_idle_connections(self):
        sb = self.sandbox()
        for _ in range(20):
            self.assertEqual(sb.get_info().state, "running")
        # A pooled connection the daemon has closed meanwhile is replaced, not an error.
        idle = list(sb._transport._idle)
        self.assertTrue(idle, "no keep-alive connection was pooled")
        for conn in idle:
            conn.sock.shutdown(socket.SHUT_RDWR)
        self.assertEqual(sb.get_info().state, "running")
        self.assertEqual(sb.set_timeout(600).state, "running")



class MetricsTest(SdkTestCase):

    def test_get_metrics_sees_a_cpu_hog(self):
        import time
        with self.sandbox() as sb:
            sb.commands.run("while :; do :; done", background=True)
            deadline = time.monotonic() + 20
            while True:
                samples = sb.get_metrics()
                if samples and samples[-1].cpu_percent > 50:
                    break
                self.assertLess(time.monotonic(), deadline, f"no busy sample: {samples}")
                time.sleep(1)
            self.assertIsInstance(samples[-1], brig.SandboxMetrics)
            self.assertGreater(samples[-1].memory_bytes, 0)
            self.assertIsNotNone(samples[-1].timestamp)


if __name__ == "__main__":
    unittest.main()
