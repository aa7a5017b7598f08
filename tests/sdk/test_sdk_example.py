"""examples/csv_report.py runs against a live daemon (as a user would run it, with
BRIG_URL and BRIG_API_KEY set) and prints the right report."""

import importlib.util
import json
import os
import subprocess
import sys
import unittest

from sdktest import EXAMPLES_DIR, SDK_DIR, SdkTestCase, brig

EXAMPLE = os.path.join(EXAMPLES_DIR, "csv_report.py")


def load_example():
    spec = importlib.util.spec_from_file_location("csv_report_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CsvReportExampleTest(SdkTestCase):

    def test_csv_report(self):
        rows, seed = 3000, 11
        env = dict(os.environ, BRIG_URL=self.daemon.url, BRIG_API_KEY=self.daemon.key,
                   PYTHONPATH=SDK_DIR, PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run([sys.executable, EXAMPLE, "--rows", str(rows), "--seed", str(seed)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=180, text=True)
        self.assertEqual(proc.returncode, 0,
                         f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
        out = proc.stdout
        self.assertIn("[sandbox] read 1000 rows", out, "the script's output was streamed")
        self.assertIn("== report.json ==", out)
        report_text = out.split("== report.json ==\n", 1)[1].split("== by region ==", 1)[0]
        report = json.loads(report_text)
        expected = load_example().expected_report(rows, seed)
        self.assertEqual(report, expected)
        self.assertEqual(sum(r["rows"] for r in report["regions"].values()), rows)
        # The example killed its sandbox.
        made = brig.Sandbox.list(metadata={"example": "csv_report"}, **self.kw)
        self.assertEqual(len(made), 1, made)
        self.assertEqual((made[0].state, made[0].reason), ("stopped", "killed"))

    def test_without_configuration_it_fails_cleanly(self):
        env = dict(os.environ, BRIG_URL=self.daemon.url, BRIG_API_KEY="wrong",
                   PYTHONPATH=SDK_DIR, PYTHONDONTWRITEBYTECODE="1")
        proc = subprocess.run([sys.executable, EXAMPLE, "--rows", "10"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                              text=True)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("AuthenticationError", proc.stderr)


if __name__ == "__main__":
    unittest.main()
