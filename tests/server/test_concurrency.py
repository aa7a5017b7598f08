"""Many clients at once: 50 threads each create a sandbox, run a command in it and kill it."""

import os
import unittest
from concurrent.futures import ThreadPoolExecutor

from brigtest import LIVE, DaemonTestCase, collect, host_cgroups, host_pids, wait_for

CLIENTS = 50


class ConcurrencyTest(DaemonTestCase):

    def test_fifty_clients(self):
        tag = os.urandom(6).hex()
        daemon = self.daemon

        def client(n):
            try:
                status, sb = daemon.request("POST", "/v1/sandboxes", {
                    "metadata": {"suite": tag}, "memory_mb": 128, "timeout": 300}, timeout=180)
            except Exception as e:  # noqa: BLE001 - reported below
                return f"client {n}: create failed: {e!r}"
            if status != 201:
                return f"client {n}: create -> {status} {sb}"
            sid, problem = sb["id"], None
            try:
                out = collect(daemon.stream("POST", f"/v1/sandboxes/{sid}/commands", {
                    "argv": ["sh", "-c", "echo $N"], "env": {"N": str(n)}}, timeout=180))
                if out.stdout != b"%d\n" % n or (out.exit or {}).get("exit_code") != 0:
                    problem = f"client {n}: output {out.lines}"
            except Exception as e:  # noqa: BLE001 - reported below
                problem = f"client {n}: command failed: {e!r}"
            status, body = daemon.request("DELETE", f"/v1/sandboxes/{sid}", timeout=180)
            if status != 204:
                problem = f"{problem}; client {n}: kill -> {status} {body}"
            return problem

        with ThreadPoolExecutor(CLIENTS) as pool:
            failures = [f for f in pool.map(client, range(CLIENTS)) if f]
        self.assertEqual(failures, [])
        self.assertEqual(daemon.sandboxes(f"metadata.suite={tag}&state={LIVE},stopping"), [])
        stopped = daemon.sandboxes(f"metadata.suite={tag}")
        self.assertEqual(len(stopped), CLIENTS)
        self.assertEqual({(sb["state"], sb["reason"]) for sb in stopped}, {("stopped", "killed")})
        ids = [sb["id"] for sb in stopped]
        self.assertTrue(wait_for(lambda: not any(host_pids(i) or host_cgroups(i) for i in ids), 10),
                        "processes or cgroups left on the host")

    def test_parallel_commands_in_one_sandbox(self):
        sid = self.create(timeout=300)["id"]

        def command(n):
            out = collect(self.daemon.stream("POST", f"/v1/sandboxes/{sid}/commands", {
                "cmd": f"for i in $(seq 1 2000); do echo {n}-$i; done"}, timeout=180))
            expected = b"".join(b"%d-%d\n" % (n, i) for i in range(1, 2001))
            if out.stdout != expected or (out.exit or {}).get("exit_code") != 0:
                return f"command {n}: {len(out.stdout)} bytes, exit {out.exit}"
            return None

        with ThreadPoolExecutor(20) as pool:
            failures = [f for f in pool.map(command, range(20)) if f]
        self.assertEqual(failures, [])


if __name__ == "__main__":
    unittest.main()
