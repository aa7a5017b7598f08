"""The SDK's code interpreter: run_code (state, results, display, logs, errors, timeouts,
callbacks) and code contexts (create, list, restart, remove); numpy/pandas/matplotlib results
(DataFrames, charts, PNGs) in a class of their own, skipped where those are not installed."""

import base64
import subprocess
import time
import unittest

from sdktest import SdkTestCase, brig, wait_until

RICH = '''
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
'''


def have_data_libraries():
    """numpy, pandas and matplotlib importable by the system Python (the sandbox's)."""
    try:
        return subprocess.run(["/usr/bin/python3", "-c", "import numpy, pandas, matplotlib"],
                              capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class CodeTest(SdkTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sb = cls.class_sandbox(envs={"SB": "sandbox"})

    def context(self, **kw):
        ctx = self.sb.create_code_context(**kw)
        self.addCleanup(self._remove, ctx)
        return ctx

    def wait_ended(self, pid):
        self.assertTrue(wait_until(lambda: not any(p.pid == pid and p.running
                                                   for p in self.sb.commands.list())),
                        f"process {pid} still runs")

    def _remove(self, ctx):
        try:
            self.sb.remove_code_context(ctx)
        except brig.NotFoundError:
            pass

    # -- executions --

    def test_state_persists_and_the_last_expression_is_the_main_result(self):
        ctx = self.context()
        first = self.sb.run_code("counter = 40\ndef bump():\n    global counter\n"
                                 "    counter += 1\n    return counter\nprint('set')",
                                 context=ctx)
        self.assertIsInstance(first, brig.Execution)
        self.assertEqual((first.results, first.error, first.text), ([], None, None))
        self.assertEqual(first.logs.stdout, ["set\n"])
        self.assertEqual(first.execution_count, 1)
        second = self.sb.run_code("bump()\nbump()", context=ctx)
        self.assertEqual(second.text, "42")
        self.assertEqual(len(second.results), 1)
        self.assertIsInstance(second.results[0], brig.Result)
        self.assertTrue(second.results[0].is_main_result)
        self.assertEqual(second.execution_count, 2)
        self.assertEqual(self.sb.run_code("counter", context=ctx.id).text, "42")
        # A statement last: no main result.
        self.assertIsNone(self.sb.run_code("y = counter", context=ctx).text)

    def test_the_default_context(self):
        self.sb.run_code("in_default = 'yes'")
        self.assertEqual(self.sb.run_code("in_default", language="python").text, "'yes'")
        self.assertIn("default-python", [c.id for c in self.sb.list_code_contexts()])

    def test_display_results_expose_the_bundle(self):
        ex = self.sb.run_code(RICH + "display(Rich(), 'second')\nRich()")
        self.assertIsNone(ex.error)
        self.assertEqual([(r.text, r.is_main_result) for r in ex.results],
                         [("Rich()", False), ("'second'", False), ("Rich()", True)])
        rich = ex.results[0]
        self.assertEqual((rich.html, rich.markdown, rich.svg, rich.latex),
                         ("<b>bold</b>", "**bold**", "<svg></svg>", "$x^2$"))
        self.assertEqual(base64.b64decode(rich.png), b"\x89PNG fake")
        self.assertEqual(base64.b64decode(rich.jpeg), b"\xff\xd8 fake")
        self.assertEqual(base64.b64decode(rich.pdf), b"%PDF-1.4 fake")
        self.assertEqual(rich.json, {"a": [1, 2]})
        self.assertIsNone(rich.data)
        self.assertIsNone(rich.chart)
        self.assertEqual(set(rich.formats()),
                         {"html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json"})
        self.assertEqual(rich.raw["text/html"], "<b>bold</b>")
        self.assertEqual((rich["text/plain"], rich["html"]), ("Rich()", "<b>bold</b>"))
        self.assertEqual(str(rich), "Rich()")
        plain = ex.results[1]
        self.assertEqual((plain.formats(), plain.raw), ([], {"text/plain": "'second'"}))
        self.assertIsNone(plain.html)
        self.assertEqual(ex.text, "Rich()")

    def test_logs(self):
        ex = self.sb.run_code("import sys\nprint('out')\nprint('err', file=sys.stderr)\n"
                              "print('more')")
        self.assertEqual(ex.logs.stdout, ["out\n", "more\n"])
        self.assertEqual(ex.logs.stderr, ["err\n"])
        self.assertTrue(all(isinstance(s, str) for s in ex.logs.stdout + ex.logs.stderr))

    def test_envs_apply_to_one_execution_and_contexts_take_cwd_and_envs(self):
        ex = self.sb.run_code("import os\nos.environ['ONLY']", envs={"ONLY": "this-time"})
        self.assertEqual(ex.text, "'this-time'")
        self.assertEqual(self.sb.run_code("os.environ.get('ONLY')").text, None)
        ctx = self.context(cwd="/tmp", envs={"CTX": "mine"})
        code = "import os\nos.getcwd(), os.environ['CTX'], os.environ['SB']"
        self.assertEqual(self.sb.run_code(code, context=ctx).text, "('/tmp', 'mine', 'sandbox')")
        ex = self.sb.run_code("import os\nos.environ['CTX']", context=ctx, envs={"CTX": "once"})
        self.assertEqual(ex.text, "'once'")
        self.assertEqual(self.sb.run_code("os.environ['CTX']", context=ctx).text, "'mine'")

    def test_errors_carry_name_value_and_traceback(self):
        ex = self.sb.run_code("print('before')\ndef f():\n    raise ValueError('bad value')\nf()")
        self.assertIsInstance(ex.error, brig.ExecutionError)
        self.assertEqual((ex.error.name, ex.error.value), ("ValueError", "bad value"))
        self.assertIsInstance(ex.error.traceback, str)
        self.assertIn('File "<cell>", line 3, in f', ex.error.traceback)
        self.assertTrue(ex.error.traceback.rstrip().endswith("ValueError: bad value"),
                        ex.error.traceback)
        self.assertEqual(str(ex.error), "ValueError: bad value")
        self.assertEqual(ex.logs.stdout, ["before\n"])
        self.assertEqual((ex.results, ex.text), ([], None))
        self.assertIsInstance(ex.execution_count, int)
        syntax = self.sb.run_code("def broken(:\n  pass")
        self.assertEqual(syntax.error.name, "SyntaxError")

    def test_a_timeout_interrupts_and_the_context_lives_on(self):
        ctx = self.context()
        self.sb.run_code("kept = 'still here'", context=ctx)
        start = time.monotonic()
        ex = self.sb.run_code("import time\nprint('started', flush=True)\ntime.sleep(300)",
                              context=ctx, timeout=1)
        self.assertLess(time.monotonic() - start, 10)
        self.assertEqual(ex.error.name, "KeyboardInterrupt")
        self.assertIn('File "<cell>", line 3', ex.error.traceback)
        self.assertEqual(ex.logs.stdout, ["started\n"])
        self.assertEqual(self.sb.run_code("kept", context=ctx).text, "'still here'")

    def test_a_quiet_timed_out_execution(self):
        # Nothing is printed: the daemon's first line is the error, after the interrupt.
        ex = self.sb.run_code("import time\ntime.sleep(300)", timeout=0.5)
        self.assertEqual(ex.error.name, "KeyboardInterrupt")
        self.assertEqual(self.sb.run_code("1 + 1").text, "2")

    def test_callbacks_receive_everything_in_order(self):
        events = []
        code = ("print('one')\ndisplay('shown')\nimport sys\nprint('two', file=sys.stderr)\n"
                "print('three')\n'last'")
        ex = self.sb.run_code(code,
                              on_stdout=lambda s: events.append(("stdout", s)),
                              on_stderr=lambda s: events.append(("stderr", s)),
                              on_result=lambda r: events.append(("result", r.text)),
                              on_error=lambda e: events.append(("error", e.name)))
        self.assertEqual(events, [("stdout", "one\n"), ("result", "'shown'"),
                                  ("stderr", "two\n"), ("stdout", "three\n"),
                                  ("result", "'last'")])
        self.assertEqual(ex.logs.stdout, ["one\n", "three\n"])
        self.assertEqual([r.text for r in ex.results], ["'shown'", "'last'"])
        errors = []
        ex = self.sb.run_code("print('x')\nraise KeyError('k')", on_error=errors.append)
        self.assertEqual(errors, [ex.error])
        self.assertEqual(errors[0].name, "KeyError")

    # -- contexts --

    def test_contexts_are_independent_and_can_restart_and_go(self):
        a, b = self.context(), self.context()
        self.assertIsInstance(a, brig.Context)
        self.assertEqual((a.language, a.running), ("python", True))
        self.assertIsInstance(a.pid, int)
        self.assertNotEqual(a.id, b.id)
        self.sb.run_code("who = 'a'", context=a)
        self.sb.run_code("who = 'b'", context=b.id)
        self.assertEqual(self.sb.run_code("who", context=a.id).text, "'a'")
        self.assertEqual(self.sb.run_code("who", context=b).text, "'b'")
        listed = {c.id: c for c in self.sb.list_code_contexts()}
        self.assertLessEqual({a.id, b.id}, set(listed))
        self.assertTrue(listed[a.id].running)
        self.assertEqual(listed[a.id].pid, a.pid)

        restarted = self.sb.restart_code_context(a)
        self.assertEqual((restarted.id, restarted.running), (a.id, True))
        self.assertNotEqual(restarted.pid, a.pid)
        # The daemon answers once the old process has exited.
        self.assertEqual(self.sb.run_code("who", context=a).error.name, "NameError")
        self.assertEqual(self.sb.run_code("who", context=b).text, "'b'", "b is untouched")

        self.assertIsNone(self.sb.remove_code_context(b.id))
        self.assertFalse({c.id: c for c in self.sb.list_code_contexts()}[b.id].running,
                         "a removed context is listed as ended at once")
        self.assertRaisesBrig(brig.NotFoundError, self.sb.run_code, "who", context=b, status=404)
        self.assertRaisesBrig(brig.NotFoundError, self.sb.remove_code_context, b, status=404)
        # A restart brings back one that ended.
        self.sb.restart_code_context(b)
        self.assertEqual(self.sb.run_code("1 + 1", context=b).text, "2")

    def test_fork_copies_a_context(self):
        original = self.context()
        self.sb.run_code("rows = [1, 2, 3]; tag = 'original'", context=original)
        copy = self.sb.fork_code_context(original)
        self.assertNotEqual(copy.id, original.id)
        self.assertEqual(self.sb.run_code("tag = 'copy'; (sum(rows), tag)", context=copy).text,
                         "(6, 'copy')")
        self.assertEqual(self.sb.run_code("tag", context=original).text, "'original'")

    def test_a_context_whose_process_ended(self):
        ctx = self.context()
        ex = self.sb.run_code("import os\nos._exit(3)", context=ctx)
        self.assertEqual(ex.error.name, "ContextDied")
        self.assertIsNone(ex.execution_count)
        self.sb.restart_code_context(ctx)
        self.assertEqual(self.sb.run_code("'back'", context=ctx).text, "'back'")

    def test_bad_arguments(self):
        self.assertRaisesBrig(brig.InvalidArgumentError, self.sb.create_code_context,
                              language="cobol", status=400)
        self.assertRaisesBrig(brig.InvalidArgumentError, self.sb.run_code, "1",
                              language="cobol", status=400)
        for call in (lambda: self.sb.run_code("1", context="nope"),
                     lambda: self.sb.restart_code_context("nope"),
                     lambda: self.sb.remove_code_context("nope")):
            self.assertRaisesBrig(brig.NotFoundError, call, status=404)
        with self.assertRaises(TypeError):
            self.sb.run_code("1", context=42)
        with self.assertRaises(TypeError):
            self.sb.run_code(b"1")


class CodeStateTest(SdkTestCase):
    """Code routes need a running sandbox."""

    def test_a_paused_sandbox_conflicts_and_an_ended_one_is_lost(self):
        sb = self.sandbox()
        sb.pause()
        self.assertRaisesBrig(brig.ConflictError, sb.run_code, "1", status=409)
        self.assertRaisesBrig(brig.ConflictError, sb.create_code_context, status=409)
        sb.resume()
        self.assertEqual(sb.run_code("1").text, "1")
        sb.kill()
        self.assertRaisesBrig(brig.SandboxLostError, sb.run_code, "1")
        self.assertRaisesBrig(brig.SandboxLostError, sb.list_code_contexts)


@unittest.skipUnless(have_data_libraries(),
                     "numpy, pandas and matplotlib are not installed (python3-numpy, "
                     "python3-pandas, python3-matplotlib)")
class DataTest(SdkTestCase):
    """DataFrames and matplotlib figures as results."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sb = cls.class_sandbox(memory_mb=1024)

    def test_dataframe_data(self):
        ex = self.sb.run_code("import pandas as pd\n"
                              "pd.DataFrame({'a': [1, 2], 'b': ['x', 'y']})")
        self.assertIsNone(ex.error)
        result = ex.results[0]
        self.assertTrue(result.is_main_result)
        self.assertIn("<table", result.html)
        self.assertEqual(result.data["columns"], ["a", "b"])
        self.assertEqual(result.data["data"], [[1, "x"], [2, "y"]])
        self.assertEqual(result.data["index"], [0, 1])
        self.assertEqual(result.data["dtypes"], {"a": "int64", "b": "object"})
        self.assertIn("data", result.formats())
        self.assertIn("html", result.formats())

    def test_bar_chart_png_and_elements(self):
        code = '''import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.bar(["apples", "pears", "plums"], [3, 7, 5], label="fruit")
ax.set_title("Fruit"); ax.set_xlabel("kind"); ax.set_ylabel("count")
plt.show()'''
        charts = []
        ex = self.sb.run_code(code, on_result=charts.append)
        self.assertIsNone(ex.error)
        self.assertEqual(len(ex.results), 1)
        figure = ex.results[0]
        self.assertEqual(charts, [figure])
        self.assertFalse(figure.is_main_result)
        self.assertTrue(base64.b64decode(figure.png).startswith(b"\x89PNG"))
        self.assertIn("Figure", figure.text)
        self.assertEqual(set(figure.formats()), {"png", "chart"})
        chart = figure.chart
        self.assertEqual((chart["type"], chart["title"], chart["x_label"], chart["y_label"]),
                         ("bar", "Fruit", "kind", "count"))
        self.assertEqual([(e["label"], e["group"], e["value"]) for e in chart["elements"]],
                         [("apples", "fruit", 3.0), ("pears", "fruit", 7.0),
                          ("plums", "fruit", 5.0)])

    def test_line_chart_and_numpy(self):
        ex = self.sb.run_code("import numpy as np\nimport matplotlib.pyplot as plt\n"
                              "plt.plot(np.arange(1, 4), np.arange(1, 4) ** 2, label='sq')\n"
                              "int(np.arange(10).sum())")
        self.assertEqual(ex.text, "45")
        figure = [r for r in ex.results if r.chart][0]
        self.assertEqual(figure.chart["type"], "line")
        self.assertEqual(figure.chart["elements"],
                         [{"label": "sq", "points": [[1.0, 1.0], [2.0, 4.0], [3.0, 9.0]]}])


if __name__ == "__main__":
    unittest.main()
