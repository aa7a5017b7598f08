"""The code interpreter (docs/interpreter.md): stateful Python contexts with rich results."""

import base64
import json
import threading
import time
import unittest

from brigtest import DaemonTestCase


class InterpreterTestCase(DaemonTestCase):
    """One daemon and one sandbox per class."""
    SANDBOX = {"timeout": 600}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        status, sb = cls.daemon.request("POST", "/v1/sandboxes", cls.SANDBOX)
        assert status == 201, sb
        cls.sid = sb["id"]

    def run_code(self, code, **fields):
        """The whole stream of one execution: (lines, stdout text, results, error, end)."""
        lines = list(self.daemon.stream("POST", f"/v1/sandboxes/{self.sid}/code",
                                        dict(fields, code=code), timeout=120))
        stdout = "".join(l["text"] for l in lines if l["type"] == "stdout")
        results = [l for l in lines if l["type"] == "result"]
        errors = [l for l in lines if l["type"] == "error"]
        self.assertEqual(lines[-1]["type"], "end", lines)
        return lines, stdout, results, errors[0] if errors else None

    def context(self, **fields):
        return self.api("POST", f"/v1/sandboxes/{self.sid}/contexts", fields, expect=201)


class CodeTest(InterpreterTestCase):

    def test_state_persists_and_the_last_expression_is_the_result(self):
        _, out, results, error = self.run_code("counter = 40\ndef bump():\n    global counter\n"
                                               "    counter += 1\n    return counter\nprint('set')")
        self.assertEqual((out, results, error), ("set\n", [], None))
        _, _, results, _ = self.run_code("bump()\nbump()")
        self.assertEqual(len(results), 1)
        self.assertEqual(results[0]["data"]["text/plain"], "42")
        self.assertTrue(results[0]["main"])
        lines, _, _, _ = self.run_code("import json\ncounter")
        self.assertGreater(lines[-1]["execution_count"], 1)

    def test_errors_carry_name_value_and_traceback(self):
        _, _, _, error = self.run_code("def f():\n    raise ValueError('bad value')\nf()")
        self.assertEqual((error["name"], error["value"]), ("ValueError", "bad value"))
        text = "".join(error["traceback"])
        self.assertIn('File "<cell>", line 2, in f', text)
        self.assertNotIn("kernel.py", text)
        _, _, _, error = self.run_code("def broken(:\n  pass")
        self.assertEqual(error["name"], "SyntaxError")

    def test_rich_results_from_repr_methods_and_display(self):
        code = '''
class Rich:
    def _repr_html_(self): return "<b>bold</b>"
    def _repr_markdown_(self): return "**bold**"
    def _repr_svg_(self): return "<svg></svg>"
    def _repr_png_(self): return b"\\x89PNG fake"
    def _repr_jpeg_(self): return b"\\xff\\xd8 fake"
    def _repr_json_(self): return {"a": [1, 2]}
    def _repr_latex_(self): return "$x^2$"
    def _repr_pdf_(self): return b"%PDF-1.4 fake"
    def __repr__(self): return "Rich()"
display(Rich(), "second")
Rich()'''
        _, _, results, error = self.run_code(code)
        self.assertIsNone(error)
        self.assertEqual(len(results), 3)
        data = results[2]["data"]
        self.assertTrue(results[2]["main"])
        self.assertFalse(results[0]["main"])
        self.assertEqual(data["text/html"], "<b>bold</b>")
        self.assertEqual(data["text/markdown"], "**bold**")
        self.assertEqual(data["image/svg+xml"], "<svg></svg>")
        self.assertEqual(base64.b64decode(data["image/png"]), b"\x89PNG fake")
        self.assertEqual(base64.b64decode(data["image/jpeg"]), b"\xff\xd8 fake")
        self.assertEqual(base64.b64decode(data["application/pdf"]), b"%PDF-1.4 fake")
        self.assertEqual(data["application/json"], {"a": [1, 2]})
        self.assertEqual(data["text/latex"], "$x^2$")
        self.assertEqual(data["text/plain"], "Rich()")
        self.assertEqual(results[1]["data"], {"text/plain": "'second'"})

    def test_output_of_subprocesses_and_per_execution_env(self):
        _, out, _, _ = self.run_code("import os, subprocess\nsubprocess.run(['echo', os.environ['ONLY']])",
                                     env={"ONLY": "this-time"})
        self.assertIn("this-time\n", out)
        _, _, _, error = self.run_code("import os\nos.environ['ONLY']")
        self.assertEqual(error["name"], "KeyError")

    def test_a_timeout_interrupts_and_the_context_lives_on(self):
        ctx = self.context()["id"]
        self.run_code("kept = 'still here'", context=ctx)
        start = time.monotonic()
        _, _, _, error = self.run_code("import time\ntime.sleep(300)", context=ctx, timeout=1)
        self.assertLess(time.monotonic() - start, 10)
        self.assertEqual(error["name"], "KeyboardInterrupt")
        _, _, results, _ = self.run_code("kept", context=ctx)
        self.assertEqual(results[0]["data"]["text/plain"], "'still here'")

    def test_contexts_are_independent_and_can_restart_and_go(self):
        a, b = self.context()["id"], self.context()["id"]
        self.run_code("who = 'a'", context=a)
        self.run_code("who = 'b'", context=b)
        self.assertEqual(self.run_code("who", context=a)[2][0]["data"]["text/plain"], "'a'")
        self.assertEqual(self.run_code("who", context=b)[2][0]["data"]["text/plain"], "'b'")
        ids = {c["id"] for c in self.api("GET", f"/v1/sandboxes/{self.sid}/contexts")["contexts"]}
        self.assertLessEqual({a, b}, ids)
        restarted = self.api("POST", f"/v1/sandboxes/{self.sid}/contexts/{a}/restart")
        self.assertEqual(restarted["id"], a)
        self.assertEqual(self.run_code("who", context=a)[3]["name"], "NameError")
        self.api("DELETE", f"/v1/sandboxes/{self.sid}/contexts/{b}", expect=204)
        status, body = self.daemon.stream_status("POST", f"/v1/sandboxes/{self.sid}/code",
                                                 {"code": "1", "context": b})
        self.assertEqual(status, 404, body)

    def test_fork_copies_the_whole_state_without_disturbing_the_original(self):
        original = self.context()["id"]
        self.run_code("data = list(range(100000)); tag = 'original'", context=original)
        copy = self.api("POST", f"/v1/sandboxes/{self.sid}/contexts/{original}/fork", expect=201)
        self.assertEqual(copy["forked_from"], original)
        self.assertNotEqual(copy["id"], original)
        _, _, results, _ = self.run_code("tag = 'copy'\n(len(data), tag)", context=copy["id"])
        self.assertEqual(results[0]["data"]["text/plain"], "(100000, 'copy')")
        _, _, results, _ = self.run_code("(len(data), tag)", context=original)
        self.assertEqual(results[0]["data"]["text/plain"], "(100000, 'original')")
        # The copy is a context like any: interruptible, and forkable in turn.
        _, _, _, error = self.run_code("import time\ntime.sleep(60)", context=copy["id"], timeout=1)
        self.assertEqual(error["name"], "KeyboardInterrupt")
        again = self.api("POST", f"/v1/sandboxes/{self.sid}/contexts/{copy['id']}/fork",
                         expect=201)
        self.assertEqual(self.run_code("tag", context=again["id"])[2][0]["data"]["text/plain"],
                         "'copy'")
        bash = self.context(language="bash")["id"]
        status, body = self.daemon.request("POST",
                                           f"/v1/sandboxes/{self.sid}/contexts/{bash}/fork")
        self.assertError(status, body, 400, "forking a bash context")

    def test_twenty_contexts_in_parallel(self):
        ids = [self.context()["id"] for _ in range(20)]
        outputs, failures = {}, []

        def work(i, ctx):
            try:
                _, _, results, error = self.run_code(f"import time\ntime.sleep(0.5)\n{i} * {i}",
                                                     context=ctx)
                outputs[i] = results[0]["data"]["text/plain"] if results else error
            except Exception as e:  # reported below
                failures.append(e)

        threads = [threading.Thread(target=work, args=(i, c)) for i, c in enumerate(ids)]
        start = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(failures, [])
        self.assertEqual(outputs, {i: str(i * i) for i in range(20)})
        self.assertLess(time.monotonic() - start, 8, "the contexts did not run in parallel")

    def test_bash_context_keeps_its_shell_state(self):
        ctx = self.context(language="bash")["id"]
        _, out, _, error = self.run_code("X=5; cd /tmp; f() { echo \"f:$1\"; }; echo hi $X",
                                         context=ctx)
        self.assertEqual((out, error), ("hi 5\n", None))
        _, out, _, _ = self.run_code("f $X; pwd", context=ctx)
        self.assertEqual(out, "f:5\n/tmp\n")
        _, _, _, error = self.run_code("false", context=ctx)
        self.assertEqual((error["name"], error["value"]), ("ExitCode", "1"))
        _, _, _, error = self.run_code("sleep 300", context=ctx, timeout=1)
        self.assertEqual(error["name"], "KeyboardInterrupt")
        _, out, _, error = self.run_code("echo still $X", context=ctx)
        self.assertEqual((out, error), ("still 5\n", None))

    def test_javascript_context(self):
        ctx = self.context(language="javascript")["id"]
        _, out, results, error = self.run_code(
            "let n = 20; console.log('hi', n); await new Promise(r => setTimeout(r, 10)); n * 2",
            context=ctx)
        self.assertEqual((out, error), ("hi 20\n", None))
        self.assertEqual(results[0]["data"]["text/plain"], "40")
        _, _, results, _ = self.run_code("const os = await import('node:os'); ({n, t: typeof os.cpus})",
                                         context=ctx)
        self.assertEqual(results[0]["data"]["application/json"], {"n": 20, "t": "function"})
        _, _, _, error = self.run_code("throw new TypeError('bad')", context=ctx)
        self.assertEqual((error["name"], error["value"]), ("TypeError", "bad"))
        _, _, _, error = self.run_code("await Promise.reject(new RangeError('later'))", context=ctx)
        self.assertEqual(error["name"], "RangeError")
        self.assertEqual(self.run_code("n + 1", context=ctx)[2][0]["data"]["text/plain"], "21")
        _, _, _, error = self.run_code("while (true) {}", context=ctx, timeout=1)
        self.assertEqual(error["name"], "KeyboardInterrupt")
        self.assertEqual(self.run_code("1 + 1", context=ctx)[2][0]["data"]["text/plain"], "2")

    def test_binary_output(self):
        _, out, results, _ = self.run_code("import sys\nsys.stdout.buffer.write(b'\\xff ok\\n')\nNone")
        self.assertEqual(out, "\ufffd ok\n")

    def test_huge_output_is_bounded_with_a_marker(self):
        _, out, _, _ = self.run_code("import sys\nsys.stdout.write('x' * (3 << 20))")
        self.assertLess(len(out), (1 << 20) + 200)
        self.assertIn("characters cut", out)

    def test_bad_requests(self):
        for body, expect in (({}, 400), ({"code": 1}, 400), ({"code": "1", "language": "cobol"}, 400),
                             ({"code": "1", "bogus": True}, 400),
                             ({"code": "1", "context": "nope"}, 404)):
            status, answer = self.daemon.request("POST", f"/v1/sandboxes/{self.sid}/code", body)
            self.assertError(status, answer, expect, str(body))

    def test_contexts_of_another_sandbox_are_invisible(self):
        ctx = self.context()["id"]
        other = self.create()["id"]
        status, body = self.daemon.request("POST", f"/v1/sandboxes/{other}/code",
                                           {"code": "1", "context": ctx})
        self.assertError(status, body, 404, "a context of another sandbox")
        self.kill(other)


class DataTest(InterpreterTestCase):
    """numpy, pandas and matplotlib, preloaded in the zygote (Debian's python3-* packages)."""
    SANDBOX = {"timeout": 600, "memory_mb": 1024}

    def test_bar_chart_as_png_and_data(self):
        code = '''import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.bar(["apples", "pears", "plums"], [3, 7, 5], label="fruit")
ax.set_title("Fruit"); ax.set_xlabel("kind"); ax.set_ylabel("count")
plt.show()'''
        _, _, results, error = self.run_code(code)
        self.assertIsNone(error)
        self.assertEqual(len(results), 1)
        data = results[0]["data"]
        self.assertTrue(base64.b64decode(data["image/png"]).startswith(b"\x89PNG"))
        chart = data["application/vnd.brig.chart+json"]
        self.assertEqual((chart["type"], chart["title"], chart["x_label"], chart["y_label"]),
                         ("bar", "Fruit", "kind", "count"))
        self.assertEqual([(e["label"], e["value"], e["group"]) for e in chart["elements"]],
                         [("apples", 3.0, "fruit"), ("pears", 7.0, "fruit"), ("plums", 5.0, "fruit")])

    def test_line_chart_data(self):
        _, _, results, _ = self.run_code("import matplotlib.pyplot as plt\n"
                                         "plt.plot([1, 2, 3], [1, 4, 9], label='squares')\n"
                                         "plt.yscale('log')")
        chart = results[-1]["data"]["application/vnd.brig.chart+json"]
        self.assertEqual((chart["type"], chart["y_scale"]), ("line", "log"))
        self.assertEqual(chart["elements"], [{"label": "squares",
                                              "points": [[1.0, 1.0], [2.0, 4.0], [3.0, 9.0]]}])

    def test_dataframe_as_html_and_data(self):
        _, _, results, error = self.run_code(
            "import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
        self.assertIsNone(error)
        data = results[0]["data"]
        self.assertIn("<table", data["text/html"])
        table = data["application/vnd.dataframe+json"]
        self.assertEqual((table["columns"], table["data"]), (["a", "b"], [[1, "x"], [2, "y"]]))

    def test_numpy_is_ready(self):
        _, _, results, _ = self.run_code("import numpy as np\nint(np.arange(10).sum())")
        self.assertEqual(results[0]["data"]["text/plain"], "45")


if __name__ == "__main__":
    unittest.main()
