"""GET /metrics: the Prometheus text format, and values that follow what the daemon did."""

import re
import time
import unittest

from brigtest import DaemonTestCase

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (-?[0-9.e+-]+|\+Inf|NaN)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text):
    """{(name, frozenset(labels)): value}; every line must be a comment or a sample."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        m = SAMPLE.match(line)
        assert m, f"not Prometheus text format: {line!r}"
        labels = frozenset(LABEL.findall(m.group(3) or ""))
        samples[(m.group(1), labels)] = float(m.group(4))
    return samples


class MetricsTest(DaemonTestCase):

    def scrape(self):
        status, body = self.daemon.request("GET", "/metrics", raw=True)
        self.assertEqual(status, 200)
        return parse(body.decode())

    def value(self, samples, name, **labels):
        return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())), 0.0)

    def test_metrics_follow_what_the_daemon_does(self):
        status, _ = self.daemon.request("GET", "/metrics", key=None)
        self.assertEqual(status, 401)
        before = self.scrape()
        running = self.value(before, "brig_sandboxes", state="running")
        creates = self.value(before, "brig_sandbox_create_seconds_count")
        sid = self.create()["id"]
        self.daemon.request("GET", "/v1/sandboxes/nosuchsandbox0000000")
        after = self.scrape()
        self.assertEqual(self.value(after, "brig_sandboxes", state="running"), running + 1)
        self.assertEqual(self.value(after, "brig_sandbox_create_seconds_count"), creates + 1)
        self.assertGreater(self.value(after, "brig_sandbox_create_seconds_sum"), 0)
        self.assertEqual(self.value(after, "brig_sandbox_create_seconds_bucket", le="+Inf"),
                         creates + 1)
        self.assertGreaterEqual(
            self.value(after, "brig_http_requests_total", route="/v1/sandboxes", method="POST",
                       status=201), 1)
        self.assertGreaterEqual(
            self.value(after, "brig_http_requests_total", route="/v1/sandboxes/{id}",
                       method="GET", status=404), 1)
        self.assertGreaterEqual(
            self.value(after, "brig_http_requests_total", route="(unauthenticated)",
                       method="GET", status=401), 1)
        self.kill(sid)
        final = self.scrape()
        self.assertEqual(self.value(final, "brig_sandboxes", state="running"), running)
        self.assertEqual(self.value(final, "brig_sandboxes", state="stopped"),
                         self.value(after, "brig_sandboxes", state="stopped") + 1)


class SandboxMetricsTest(DaemonTestCase):

    def test_samples_show_a_cpu_hog_memory_and_disk(self):
        sid = self.create(memory_mb=256)["id"]
        pid = self.background(sid, cmd="head -c 40000000 /dev/zero > /tmp/blob; "
                                       "while :; do :; done")
        deadline = time.monotonic() + 20
        while True:
            answer = self.api("GET", f"/v1/sandboxes/{sid}/metrics")
            samples = answer["metrics"]
            busy = [s for s in samples if s["cpu_percent"] > 50]
            if busy and busy[-1]["disk_used_bytes"] >= 40000000:
                break
            self.assertLess(time.monotonic(), deadline, f"no busy sample in {samples}")
            time.sleep(1)
        last = busy[-1]
        self.assertLess(last["cpu_percent"], 110)  # one core, about all of it
        self.assertGreaterEqual(last["memory_bytes"], 40000000)  # the tmpfs counts
        self.assertGreaterEqual(last["pids"], 2)
        self.assertEqual(answer["memory_limit_bytes"], 256 << 20)
        timestamps = [s["timestamp"] for s in samples]
        self.assertEqual(timestamps, sorted(timestamps))
        status, body = self.daemon.request("GET", f"/v1/sandboxes/{sid}/metrics?bogus=1")
        self.assertError(status, body, 400, "unknown query parameter")
        self.api("POST", f"/v1/sandboxes/{sid}/commands/{pid}/signal", {"signal": 9}, expect=204)


if __name__ == "__main__":
    unittest.main()
