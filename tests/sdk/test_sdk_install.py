"""The SDK installs with pip from the repository path (no index, no build isolation: this
machine reaches no Python package index) and imports from where pip put it."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from sdktest import SDK_DIR


class InstallTest(unittest.TestCase):

    def test_pip_installs_the_package(self):
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "src")
            shutil.copytree(SDK_DIR, source)  # pip's build files stay out of the checkout
            target = os.path.join(tmp, "site")
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation",
                            "--no-index", "--target", target, source], check=True,
                           capture_output=True)
            self.assertTrue(os.path.exists(os.path.join(target, "brig", "py.typed")))
            probe = subprocess.run(
                [sys.executable, "-c", "import brig, os; print(os.path.dirname(brig.__file__));"
                 "print(brig.Sandbox.create.__doc__ is not None)"],
                env={"PYTHONPATH": target, "PATH": os.environ.get("PATH", "")}, cwd=tmp,
                capture_output=True, text=True, check=True)
            where, documented = probe.stdout.split()
            self.assertEqual(where, os.path.join(target, "brig"))
            self.assertEqual(documented, "True")


if __name__ == "__main__":
    unittest.main()
