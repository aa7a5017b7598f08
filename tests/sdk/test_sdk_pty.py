"""The SDK's pseudo-terminals: an interactive shell, its size, resizing, exiting."""

import re
import unittest

from sdktest import Collector, SdkTestCase, brig


class PtyTest(SdkTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sb = cls.class_sandbox()

    def test_interactive_shell(self):
        data = Collector()
        term = self.sb.pty.create(rows=24, cols=80, cmd=["/bin/bash", "--norc", "-i"],
                                  on_data=data)
        self.assertIsInstance(term, brig.PtyHandle)
        self.assertIsInstance(term.pid, int)
        self.addCleanup(term.kill)

        def shown(needle):
            return lambda items: needle in b"".join(items)

        term.send_input("stty size; tty\n")
        self.assertTrue(data.wait_for(shown(b"24 80"), 20),
                        f"'24 80' never shown: {data.joined()!r}")
        self.assertTrue(data.wait_for(lambda items: re.search(rb"/dev/pts/\d+\r?\n",
                                                               b"".join(items)), 20),
                        f"tty never shown: {data.joined()!r}")
        self.assertTrue(all(isinstance(b, bytes) for b in data.items), "on_data gets bytes")
        term.resize(40, 132)
        term.send_input(b"stty size\n")
        self.assertTrue(data.wait_for(shown(b"40 132"), 20),
                        f"'40 132' never shown: {data.joined()!r}")
        # Through sandbox.pty by pid, too.
        self.sb.pty.resize(term.pid, 30, 100)
        self.sb.pty.send_input(term.pid, "stty size\n")
        self.assertTrue(data.wait_for(shown(b"30 100"), 20))
        term.send_input("exit\n")
        result = term.wait(timeout=20)
        self.assertEqual(result.exit_code, 0)
        self.assertIn("40 132", result.stdout)
        self.assertEqual(term.output, data.joined())

    def test_default_shell_and_exit_code(self):
        term = self.sb.pty.create()  # /bin/bash, 24x80, no on_data: wait() follows
        self.addCleanup(term.kill)
        term.send_input("echo TERM=$TERM; exit 4\n")
        with self.assertRaises(brig.CommandExitError) as caught:
            term.wait(timeout=20)
        self.assertEqual(caught.exception.exit_code, 4)
        self.assertIn("TERM=xterm-256color", caught.exception.stdout)

    def test_kill(self):
        term = self.sb.pty.create(cmd=["sleep", "1000"])
        self.assertTrue(self.sb.pty.kill(term.pid))
        with self.assertRaises(brig.CommandExitError) as caught:
            term.wait(timeout=20)
        self.assertEqual(caught.exception.signal, 9)
        self.assertFalse(term.kill())

    def test_resize_without_a_terminal(self):
        h = self.sb.commands.run(["sleep", "1000"], background=True)
        self.addCleanup(h.kill)
        with self.assertRaises(brig.InvalidArgumentError):
            self.sb.pty.resize(h.pid, 10, 10)


if __name__ == "__main__":
    unittest.main()
