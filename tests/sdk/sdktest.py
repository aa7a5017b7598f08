"""Shared helpers for the Python SDK's tests (sdk/python; docs/api.md is the daemon's contract).

Each test class gets its own `brig serve` (tests/server/brigtest.py's Daemon: a fresh state
directory under /tmp, a free port on 127.0.0.1) and points the SDK at it with api_url/api_key.
Sandboxes a test creates are killed when it ends; the daemon's cleanup kills whatever is left,
stops it and removes its directory.

Run (as root):  /usr/bin/python3 -m unittest discover -v -s tests/sdk -p "test_*.py"
BRIG_BINARY names the brig executable (default: build/brig in this checkout).
"""

import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SDK_DIR = os.path.join(ROOT, "sdk", "python")
EXAMPLES_DIR = os.path.join(ROOT, "examples")
# Appended, not prepended: tests/server has modules named like ours (test_files, ...).
sys.path.append(os.path.join(ROOT, "tests", "server"))
if SDK_DIR not in sys.path:
    sys.path.insert(0, SDK_DIR)

import brig  # noqa: E402

if os.path.dirname(os.path.dirname(os.path.abspath(brig.__file__))) != SDK_DIR:
    raise ImportError(f"testing {brig.__file__}, not this checkout's SDK in {SDK_DIR}")
from brigtest import DaemonTestCase, free_port, wait_for  # noqa: E402,F401

# Every wait in these tests is bounded: streams by request_timeout, handles by wait(timeout=).
RUN_LIMIT = 60


class SdkTestCase(DaemonTestCase):
    """A daemon per class (self.daemon) and helpers that track the sandboxes made."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.kw = {"api_url": cls.daemon.url, "api_key": cls.daemon.key}

    def sandbox(self, **fields):
        """Sandbox.create(...) against this class's daemon, killed when the test ends."""
        fields.setdefault("timeout", 600)
        sb = brig.Sandbox.create(**fields, **self.kw)
        self.daemon.seen_ids.add(sb.sandbox_id)
        self.addCleanup(self._dispose, sb)
        return sb

    @staticmethod
    def _dispose(sb):
        try:
            sb.kill()
        finally:
            sb.close()

    @classmethod
    def class_sandbox(cls, **fields):
        """One sandbox for the whole class (killed with the daemon's cleanup)."""
        fields.setdefault("timeout", 900)
        sb = brig.Sandbox.create(**fields, **cls.kw)
        cls.daemon.seen_ids.add(sb.sandbox_id)
        cls.addClassCleanup(cls._dispose, sb)
        return sb

    def state_of(self, sandbox_id):
        return self.get(sandbox_id)["state"]

    def assertRaisesBrig(self, exc_type, func, *args, status=None, **kwargs):
        """func(...) raises exc_type, a BrigError with a non-empty message (and `status`)."""
        with self.assertRaises(exc_type) as caught:
            func(*args, **kwargs)
        err = caught.exception
        self.assertIsInstance(err, brig.BrigError)
        self.assertIsInstance(err.message, str)
        self.assertTrue(err.message, f"{err!r} has an empty message")
        if status is not None:
            self.assertEqual(err.status, status, repr(err))
        return err


def wait_until(predicate, timeout=15.0, interval=0.05):
    """wait_for, but the last value is returned whether truthy or not."""
    return wait_for(predicate, timeout, interval)


class Collector:
    """A thread-safe list for callbacks, with a bounded wait for a condition."""

    def __init__(self):
        self.items = []
        self._cond = threading.Condition()

    def __call__(self, item):
        with self._cond:
            self.items.append(item)
            self._cond.notify_all()

    def joined(self):
        with self._cond:
            if not self.items:
                return ""
            first = self.items[0]
            return (b"" if isinstance(first, bytes) else "").join(self.items)

    def wait_for(self, predicate, timeout=20.0):
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.items):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True
