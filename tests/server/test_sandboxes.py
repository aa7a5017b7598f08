"""Sandboxes through the HTTP API: create, get, list, kill, timeout, pause/resume, names,
bad input, authentication (docs/api.md)."""

import os
import signal
import stat
import threading
import time
import unittest

from brigtest import (ID_RE, DaemonTestCase, cgroup_file, collect, host_cgroups, host_pid1,
                      host_pids, now, parse_time, wait_for)


def token():
    return os.urandom(6).hex()


class SandboxTest(DaemonTestCase):

    def assertLifetime(self, sb, seconds, slack=2):
        """expires_at is `seconds` after the sandbox started running: no earlier than
        created_at + seconds (creating takes a while, longest when it builds the template), and
        about `seconds` from now."""
        expires = parse_time(sb["expires_at"])
        self.assertGreaterEqual((expires - parse_time(sb["created_at"])).total_seconds(), seconds)
        self.assertAlmostEqual((expires - now()).total_seconds(), seconds, delta=slack)

    # -- create / get --

    def test_create_defaults(self):
        sb = self.create()
        self.assertRegex(sb["id"], ID_RE)
        expected = {"name": None, "template": "base", "state": "running", "reason": None,
                    "cpus": 0, "memory_mb": 512, "disk_mb": 1024, "pids": 256, "env": {},
                    "metadata": {}, "ended_at": None}
        self.assertEqual({k: sb.get(k, "<missing>") for k in expected}, expected)
        created = parse_time(sb["created_at"])
        self.assertLess(abs((now() - created).total_seconds()), 60)
        self.assertLifetime(sb, 300)
        self.assertEqual(self.get(sb["id"]), sb)

    def test_create_all_fields(self):
        name = "all-fields." + token()
        fields = {"template": "base", "name": name, "cpus": 0.5, "memory_mb": 256, "disk_mb": 128,
                  "pids": 64, "env": {"FOO": "bar", "_X1": "y z"},
                  "metadata": {"team": "x", "k": "v" * 1024}, "timeout": 120}
        sb = self.create(**fields)
        for key in ("template", "name", "cpus", "memory_mb", "disk_mb", "pids", "env", "metadata"):
            self.assertEqual(sb[key], fields[key], key)
        self.assertEqual(sb["state"], "running")
        self.assertLifetime(sb, 120)
        self.assertEqual(self.get(sb["id"]), sb)

    def test_create_at_the_limits(self):
        fields = {"name": "n" * 64, "cpus": 0.01, "pids": 2, "timeout": 2592000,
                  "metadata": {f"{i:03d}" + "k" * 125: "v" * 1024 for i in range(64)}}
        sb = self.create(**fields)
        for key in ("name", "cpus", "pids", "metadata"):
            self.assertEqual(sb[key], fields[key], key)
        self.assertLifetime(sb, 2592000)

    def test_limits_reach_the_sandbox(self):
        sid = self.create(cpus=0.5, memory_mb=256, disk_mb=300, pids=64)["id"]
        self.assertEqual(cgroup_file(sid, "pids.max"), "64")
        memory = cgroup_file(sid, "memory.max") or cgroup_file(sid, "memory.limit_in_bytes")
        self.assertEqual(memory, str(256 << 20))
        quota = cgroup_file(sid, "cpu.max")
        if quota is None:
            quota = " ".join(str(cgroup_file(sid, f"cpu.cfs_{x}_us")) for x in ("quota", "period"))
        used, period = (int(x) for x in quota.split())
        self.assertAlmostEqual(used / period, 0.5, delta=0.01)
        out = self.run_cmd(sid, cmd="df -Pk / | tail -1")
        size_mb = int(out.stdout.split()[1]) / 1024
        self.assertAlmostEqual(size_mb, 300, delta=30, msg=out.stdout)

    def test_lifetime_from_create(self):
        sid = self.create(timeout=1)["id"]
        sb = self.wait_state(sid, "stopped", timeout=8)
        self.assertEqual(sb["reason"], "timeout")
        self.assertIsNotNone(sb["ended_at"])

    def test_keep_alive(self):
        conn, resp = self.daemon.connect("GET", "/v1/sandboxes?limit=1")
        try:
            for _ in range(3):
                self.assertEqual(resp.status, 200)
                resp.read()
                conn.request("GET", "/v1/sandboxes?limit=1",
                             headers={"Authorization": "Bearer " + self.daemon.key})
                resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            resp.read()
        finally:
            conn.close()

    def test_unknown_template_is_404(self):
        before = len(self.daemon.sandboxes())
        status, body = self.daemon.request("POST", "/v1/sandboxes", {"template": "nope"})
        self.assertError(status, body, 404, "template nope")
        self.assertEqual(len(self.daemon.sandboxes()), before)

    def test_unknown_sandbox_is_404(self):
        for sid in ("a" * 20, "nope"):
            for method, suffix, body in (("GET", "", None), ("DELETE", "", None),
                                         ("POST", "/pause", None), ("POST", "/resume", None),
                                         ("POST", "/timeout", {"timeout": 10}),
                                         ("GET", "/commands", None),
                                         ("POST", "/commands", {"cmd": "true"})):
                status, answer = self.daemon.request(method, f"/v1/sandboxes/{sid}{suffix}", body)
                self.assertError(status, answer, 404, f"{method} {sid}{suffix}")

    # -- list --

    def test_list_order_and_filters(self):
        tag = token()
        ids = [self.create(metadata={"suite": tag, "i": str(i)})["id"] for i in range(3)]
        named = self.create(name="listed-" + tag, metadata={"suite": tag, "i": "named"})["id"]
        ids.append(named)

        def listed(query):
            status, body = self.daemon.request("GET", f"/v1/sandboxes?metadata.suite={tag}&{query}")
            self.assertEqual(status, 200, body)
            self.assertIn("next_cursor", body)
            return [sb["id"] for sb in body["sandboxes"]]

        self.assertEqual(listed(""), ids[::-1], "newest first")
        self.assertEqual(listed("metadata.i=1"), [ids[1]])
        self.assertEqual(listed("metadata.i=1&metadata.nope=1"), [])
        self.assertEqual(listed(f"name=listed-{tag}"), [named])
        self.assertEqual(listed("name=nope"), [])
        self.kill(ids[0])
        self.assertEqual(listed("state=running"), ids[:0:-1])
        self.assertEqual(listed("state=stopped"), [ids[0]])
        self.assertEqual(listed("state=running,stopped"), ids[::-1])
        self.assertEqual(listed("state=paused"), [])

    def test_list_pagination(self):
        tag = token()
        ids = [self.create(metadata={"suite": tag})["id"] for _ in range(5)]
        seen, pages, cursor = [], [], None
        for _ in range(10):
            path = f"/v1/sandboxes?metadata.suite={tag}&limit=2"
            if cursor:
                path += f"&cursor={cursor}"
            body = self.api("GET", path)
            self.assertLessEqual(len(body["sandboxes"]), 2)
            pages.append(len(body["sandboxes"]))
            seen += [sb["id"] for sb in body["sandboxes"]]
            cursor = body["next_cursor"]
            if cursor is None:
                break
            self.assertIsInstance(cursor, str)
        self.assertIsNone(cursor, "pagination does not end")
        self.assertEqual(seen, ids[::-1], f"pages {pages}")
        self.assertEqual(pages[:3], [2, 2, 1])

    def test_list_bad_query(self):
        for query in ("bogus=1", "limit=0", "limit=1001", "limit=abc", "state=bogus",
                      "request_timeout=0", "request_timeout=86401", "request_timeout=x"):
            status, body = self.daemon.request("GET", f"/v1/sandboxes?{query}")
            self.assertError(status, body, 400, query)
        self.api("GET", "/v1/sandboxes?limit=1000&request_timeout=5")
        self.api("GET", "/v1/sandboxes?limit=1")

    # -- kill --

    def test_kill(self):
        sid = self.create()["id"]
        self.assertTrue(wait_for(lambda: host_pids(sid), 5), "no host process in brig-sb-<id>")
        status, body = self.daemon.request("DELETE", f"/v1/sandboxes/{sid}", raw=True)
        self.assertEqual((status, body), (204, b""))
        sb = self.get(sid)
        self.assertEqual((sb["state"], sb["reason"]), ("stopped", "killed"))
        self.assertGreaterEqual(parse_time(sb["ended_at"]), parse_time(sb["created_at"]))
        status, body = self.daemon.request("DELETE", f"/v1/sandboxes/{sid}")
        self.assertError(status, body, 409, "second kill")
        self.assertIn("stopped", body["message"])
        for method, suffix, req in (("POST", "/commands", {"cmd": "true"}),
                                    ("GET", "/commands", None), ("POST", "/pause", None),
                                    ("POST", "/resume", None),
                                    ("POST", "/timeout", {"timeout": 10})):
            status, body = self.daemon.request(method, f"/v1/sandboxes/{sid}{suffix}", req)
            self.assertError(status, body, 409, f"{method} {suffix} on stopped")
        self.assertTrue(wait_for(lambda: not host_pids(sid), 5),
                        f"processes left: {host_pids(sid)}")
        self.assertTrue(wait_for(lambda: not host_cgroups(sid), 5),
                        f"cgroups left: {host_cgroups(sid)}")

    def test_kill_ends_open_streams(self):
        sid = self.create()["id"]
        lines = self.daemon.stream("POST", f"/v1/sandboxes/{sid}/commands",
                                   {"argv": ["sleep", "1000"]}, timeout=15)
        self.assertEqual(next(lines)["type"], "start")
        self.kill(sid)
        out = collect(lines)  # ends, rather than waiting for the socket timeout
        self.assertIn(out.lines[-1]["type"] if out.lines else None, ("exit", "error"), out.lines)

    def test_pid1_death_stops_the_sandbox(self):
        sid = self.create()["id"]
        os.kill(host_pid1(sid), signal.SIGKILL)
        sb = self.wait_state(sid, "stopped", timeout=10)
        self.assertRegex(sb["reason"] or "", r"PID 1.*\b9\b")
        self.assertIsNotNone(sb["ended_at"])
        self.assertTrue(wait_for(lambda: not host_cgroups(sid), 5), host_cgroups(sid))

    def test_out_of_memory_stops_the_sandbox(self):
        sid = self.create(memory_mb=64)["id"]
        collect(self.daemon.stream("POST", f"/v1/sandboxes/{sid}/commands", {
            "argv": ["python3", "-c", "x = bytearray(300 << 20)"]}, timeout=30))
        sb = self.wait_state(sid, "stopped", timeout=10)
        self.assertEqual(sb["reason"], "out of memory")

    # -- timeout --

    def test_timeout_extend(self):
        sid = self.create(timeout=60)["id"]
        sb = self.api("POST", f"/v1/sandboxes/{sid}/timeout", {"timeout": 600})
        self.assertAlmostEqual((parse_time(sb["expires_at"]) - now()).total_seconds(), 600,
                               delta=5)
        self.assertEqual(self.get(sid)["expires_at"], sb["expires_at"])

    def test_timeout_shorten(self):
        sid = self.create()["id"]
        for bad in (0, 2592001, -1, "10", 1.5, None):
            status, body = self.daemon.request("POST", f"/v1/sandboxes/{sid}/timeout",
                                               {"timeout": bad})
            self.assertError(status, body, 400, f"timeout {bad!r}")
        status, body = self.daemon.request("POST", f"/v1/sandboxes/{sid}/timeout", {})
        self.assertError(status, body, 400, "no timeout field")
        self.assertEqual(self.get(sid)["state"], "running")
        start = time.monotonic()
        self.api("POST", f"/v1/sandboxes/{sid}/timeout", {"timeout": 1})
        sb = self.wait_state(sid, "stopped", timeout=8)
        self.assertEqual(sb["reason"], "timeout")
        self.assertGreater(time.monotonic() - start, 0.5)
        self.assertTrue(wait_for(lambda: not host_pids(sid), 5), "processes left after timeout")

    # -- pause / resume --

    def test_pause_resume(self):
        name = "paused-" + token()
        sid = self.create(timeout=300, name=name)["id"]
        sb = self.api("POST", f"/v1/sandboxes/{sid}/resume")  # no-op while running
        self.assertEqual(sb["state"], "running")
        pid = self.background(sid, cmd="while :; do echo x; sleep 0.05; done")
        self.assertTrue(wait_for(lambda: self.output(sid, pid, follow=False).data, 5))
        written = self.output(sid, pid, follow=False).end["offset"]
        sb = self.api("POST", f"/v1/sandboxes/{sid}/pause")
        self.assertEqual(sb["state"], "paused")
        self.assertIsNone(sb["expires_at"])
        remaining = sb["remaining_s"]
        self.assertTrue(0 < remaining <= 300, remaining)
        for method, suffix, req in (("POST", "/commands", {"cmd": "true"}),
                                    ("GET", "/commands", None)):
            status, body = self.daemon.request(method, f"/v1/sandboxes/{sid}{suffix}", req)
            self.assertError(status, body, 409, f"{method} {suffix} while paused")
            self.assertIn("paused", body["message"])
        self.assertEqual(self.api("POST", f"/v1/sandboxes/{sid}/pause")["state"], "paused")
        self.assertEqual(self.create(expect=200, name=name)["id"], sid, "a paused name is live")
        time.sleep(1.5)
        sb = self.get(sid)
        self.assertEqual(sb["state"], "paused")
        self.assertAlmostEqual(sb["remaining_s"], remaining, delta=0.5, msg="clock not stopped")
        sb = self.api("POST", f"/v1/sandboxes/{sid}/resume")
        # 1.5 s at one 2-byte line per 50 ms would be ~60 bytes: the counter was frozen.
        self.assertLess(self.output(sid, pid, follow=False).end["offset"] - written, 20)
        self.assertEqual(sb["state"], "running")
        self.assertIsNone(sb.get("remaining_s"))
        self.assertAlmostEqual((parse_time(sb["expires_at"]) - now()).total_seconds(), remaining,
                               delta=3)
        out = self.run_cmd(sid, argv=["echo", "again"])
        self.assertEqual((out.stdout, out.exit.get("exit_code")), (b"again\n", 0))

    def test_paused_sandbox_does_not_expire(self):
        sid = self.create(timeout=3)["id"]
        self.api("POST", f"/v1/sandboxes/{sid}/pause")
        time.sleep(4)
        self.assertEqual(self.get(sid)["state"], "paused")
        self.api("POST", f"/v1/sandboxes/{sid}/resume")
        sb = self.wait_state(sid, "stopped", timeout=8)
        self.assertEqual(sb["reason"], "timeout")

    def test_kill_paused(self):
        sid = self.create()["id"]
        self.api("POST", f"/v1/sandboxes/{sid}/pause")
        sb = self.api("POST", f"/v1/sandboxes/{sid}/timeout", {"timeout": 100})
        self.assertEqual(sb["state"], "paused")
        self.kill(sid)
        self.assertEqual(self.get(sid)["state"], "stopped")
        self.assertTrue(wait_for(lambda: not host_pids(sid), 5), "processes left")

    # -- names --

    def test_names(self):
        name = "agent-" + token()
        first = self.create(name=name)
        again = self.create(expect=200, name=name, memory_mb=1024, metadata={"x": "y"})
        self.assertEqual(again["id"], first["id"])
        self.assertEqual((again["memory_mb"], again["metadata"]), (512, {}))
        self.assertEqual(len(self.daemon.sandboxes(f"name={name}")), 1)
        self.kill(first["id"])
        fresh = self.create(name=name)
        self.assertNotEqual(fresh["id"], first["id"])
        self.assertEqual(fresh["name"], name)
        self.assertEqual(sorted(sb["state"] for sb in self.daemon.sandboxes(f"name={name}")),
                         ["running", "stopped"])

    def test_concurrent_creates_of_one_name(self):
        name = "race-" + token()
        answers, lock = [], threading.Lock()

        def create():
            answer = self.daemon.request("POST", "/v1/sandboxes", {"name": name}, timeout=120)
            with lock:
                answers.append(answer)

        threads = [threading.Thread(target=create) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(150)
        self.assertEqual(sorted(status for status, _ in answers), [200] * 7 + [201], answers)
        self.assertEqual(len({body["id"] for _, body in answers}), 1, answers)
        self.assertEqual(len(self.daemon.sandboxes(f"name={name}")), 1)

    # -- bad input --

    def test_bad_create_bodies(self):
        before = len(self.daemon.sandboxes())
        cases = [b"{", b"{} x", b"[]", b'"x"', b"null", {"bogus": 1},
                 {"memory_mb": "512"}, {"cpus": "1"}, {"timeout": 1.5}, {"name": 5},
                 {"env": ["A=1"]}, {"env": {"A": 1}}, {"metadata": {"k": 5}},
                 {"template": 1}, {"memory_mb": 15}, {"memory_mb": 1048577},
                 {"cpus": 0.001}, {"cpus": 1025}, {"cpus": -1}, {"disk_mb": 0},
                 {"disk_mb": 1048577}, {"pids": 1}, {"pids": 65537}, {"timeout": 0},
                 {"timeout": 2592001}, {"name": ""}, {"name": "a" * 65}, {"name": "bad name"},
                 {"name": "a/b"}, {"env": {"1A": "x"}}, {"env": {"A-B": "x"}},
                 {"env": {"": "x"}}, {"metadata": {"": "x"}}, {"metadata": {"k" * 129: "x"}},
                 {"metadata": {"k": "v" * 1025}},
                 {"metadata": {f"k{i}": "v" for i in range(65)}}]
        for body in cases:
            status, answer = self.daemon.request("POST", "/v1/sandboxes", body)
            self.assertError(status, answer, 400, f"body {body!r}"[:200])
        huge = {"metadata": {"k": "x" * (1 << 20)}}
        status, answer = self.daemon.request("POST", "/v1/sandboxes", huge)
        self.assertError(status, answer, 413, "body over 1 MiB")
        self.assertEqual(len(self.daemon.sandboxes()), before, "a rejected create made a sandbox")

    def test_content_type_is_not_checked(self):
        sb = self.create()
        status, body = self.daemon.request("POST", f"/v1/sandboxes/{sb['id']}/timeout",
                                           '{"timeout": 100}',
                                           headers={"Content-Type": "text/plain"})
        self.assertEqual(status, 200, body)

    def test_wrong_method_and_unknown_route(self):
        sid = self.create()["id"]
        for method, path in (("DELETE", "/v1/sandboxes"), ("PUT", f"/v1/sandboxes/{sid}"),
                             ("GET", f"/v1/sandboxes/{sid}/pause"),
                             ("POST", "/health")):
            status, body = self.daemon.request(method, path)
            self.assertError(status, body, 405, f"{method} {path}")
        for path in ("/", "/v1", "/v1/nope", "/v2/sandboxes", f"/v1/sandboxes/{sid}/nope"):
            status, body = self.daemon.request("GET", path)
            self.assertError(status, body, 404, path)

    # -- authentication --

    def test_auth(self):
        key = self.daemon.key
        self.assertTrue(key)
        mode = os.stat(os.path.join(self.daemon.state, "api-key")).st_mode
        self.assertEqual(stat.S_IMODE(mode), 0o600)
        status, body = self.daemon.request("GET", "/health", key=None, raw=True)
        self.assertEqual(status, 200, body)
        before = len(self.daemon.sandboxes())
        for k, headers in ((None, None), ("wrong", None), (key + "x", None),
                           (None, {"X-API-Key": "wrong"}), (None, {"Authorization": key})):
            for method, path in (("GET", "/v1/sandboxes"), ("POST", "/v1/sandboxes"),
                                 ("GET", "/v1/sandboxes/" + "a" * 20),
                                 ("DELETE", "/v1/sandboxes/" + "a" * 20),
                                 ("POST", f"/v1/sandboxes/{'a' * 20}/commands")):
                status, body = self.daemon.request(method, path, {} if method == "POST" else None,
                                                   key=k, headers=headers)
                self.assertError(status, body, 401, f"{method} {path} key={k} {headers}")
        self.assertEqual(len(self.daemon.sandboxes()), before)
        self.assertEqual(self.daemon.request("GET", "/v1/sandboxes", key=None,
                                             headers={"X-API-Key": key})[0], 200)
        self.assertEqual(self.daemon.request("GET", "/v1/sandboxes", key=None,
                                             headers={"Authorization": "Bearer " + key})[0], 200)

    def test_key_is_stored_hashed(self):
        key = self.daemon.key.encode()
        self.create()  # so the database has been written
        for root, _, files in os.walk(self.daemon.state):
            if "/templates" in root or "/mnt" in root:
                continue
            for name in files:
                path = os.path.join(root, name)
                if path == os.path.join(self.daemon.state, "api-key") or not os.path.isfile(path):
                    continue
                with open(path, "rb") as f:
                    self.assertNotIn(key, f.read(64 << 20), f"the API key is in {path}")


if __name__ == "__main__":
    unittest.main()
