"""The SDK's files: read/write (text, bytes, streams, file objects, gzip), list, stat, exists,
make_dir, rename, remove, watch_dir, errors (docs/api.md, "Files")."""

import hashlib
import io
import os
import queue
import stat
import time
import unittest

from sdktest import RUN_LIMIT, SdkTestCase, brig


class CountingReader(io.RawIOBase):
    """A binary file object of `size` pseudo-random bytes that records how much each read
    asked for (to prove the SDK streams instead of reading it whole)."""

    def __init__(self, size, seed=b"brig"):
        self.size, self.pos, self.requests = size, 0, []
        self.digest = hashlib.sha256()
        self._block = hashlib.sha256(seed).digest() * 2048  # 64 KiB pattern
        for start in range(0, size, len(self._block)):
            self.digest.update(self._block[:min(len(self._block), size - start)])

    def readable(self):
        return True

    def read(self, n=-1):
        self.requests.append(n)
        if n is None or n < 0:
            n = self.size - self.pos
        n = min(n, self.size - self.pos)
        out = bytearray()
        while len(out) < n:
            at = (self.pos + len(out)) % len(self._block)
            out += self._block[at:at + n - len(out)]
        self.pos += n
        return bytes(out)


class FilesTest(SdkTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sb = cls.class_sandbox()

    def sh(self, cmd, **kw):
        kw.setdefault("request_timeout", RUN_LIMIT)
        return self.sb.commands.run(cmd, **kw).stdout

    # -- read and write --

    def test_text_and_bytes(self):
        entry = self.sb.files.write("/home/user/hello.txt", "héllo\n")
        self.assertIsInstance(entry, brig.EntryInfo)
        self.assertEqual((entry.path, entry.name, entry.type, entry.size),
                         ("/home/user/hello.txt", "hello.txt", brig.FileType.FILE, 7))
        self.assertEqual(self.sb.files.read("/home/user/hello.txt"), "héllo\n")
        self.assertEqual(self.sh("cat /home/user/hello.txt"), "héllo\n")
        data = bytes(range(256)) * 3
        self.sb.files.write("bin.dat", data)  # relative: the user's home
        self.assertEqual(self.sb.files.read("/home/user/bin.dat", format="bytes"), data)
        self.assertEqual(self.sb.files.read("bin.dat", format="bytes"), data)
        self.assertEqual(self.sh("sha256sum < bin.dat").split()[0],
                         hashlib.sha256(data).hexdigest())
        text = self.sb.files.read("bin.dat")
        self.assertIsInstance(text, str)
        self.assertIn("\ufffd", text, "invalid UTF-8 is replaced in text mode")
        # Replacing a file; an empty file.
        self.sb.files.write("hello.txt", b"v2")
        self.assertEqual(self.sb.files.read("hello.txt"), "v2")
        self.sb.files.write("empty", b"")
        self.assertEqual(self.sb.files.read("empty", format="bytes"), b"")
        self.assertEqual(self.sb.files.stat("empty").size, 0)

    def test_nested_paths_and_owner(self):
        entry = self.sb.files.write("/home/user/a/b/c/deep.txt", "deep")
        self.assertEqual(entry.path, "/home/user/a/b/c/deep.txt")
        self.assertEqual(self.sb.files.read("a/b/c/deep.txt"), "deep")
        self.assertEqual(self.sh("stat -c %U /home/user/a/b /home/user/a/b/c/deep.txt"),
                         "user\nuser\n")
        root_entry = self.sb.files.write("/root/secret/x.txt", "r", user="root")
        self.assertEqual(root_entry.owner, "root")
        self.assertEqual(self.sb.files.read("/root/secret/x.txt", user="root"), "r")
        with self.assertRaises(brig.BrigError):  # the user may not read root's home
            self.sb.files.read("/root/secret/x.txt")

    def test_write_mode(self):
        entry = self.sb.files.write("run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
        self.assertEqual(entry.mode, 0o755)
        self.assertEqual(entry.permissions, "-rwxr-xr-x")
        self.assertEqual(self.sh("./run.sh"), "ran\n")

    def test_write_streams_a_file_object(self):
        size = 5 * 1024 * 1024 + 123
        source = CountingReader(size)
        entry = self.sb.files.write("/home/user/big/blob.bin", source)
        self.assertEqual(entry.size, size)
        self.assertEqual(source.pos, size)
        biggest = max(source.requests)
        self.assertTrue(all(n is not None and 0 < n <= 1024 * 1024 for n in source.requests),
                        f"the file object was not read in bounded chunks: {source.requests[:5]}")
        self.assertGreater(len(source.requests), 4, "read in several chunks")
        self.assertLessEqual(biggest, 1024 * 1024)
        self.assertEqual(self.sh("sha256sum < big/blob.bin").split()[0],
                         source.digest.hexdigest())
        # A real file on disk, and a text file object.
        path = os.path.join(self.daemon.root, "upload.txt")
        with open(path, "wb") as f:
            f.write(b"line\n" * 100000)
        with open(path, "rb") as f:
            self.assertEqual(self.sb.files.write("from_disk.txt", f).size, 500000)
        self.assertEqual(self.sb.files.read("from_disk.txt"), "line\n" * 100000)
        self.sb.files.write("from_text.txt", io.StringIO("ünï\n" * 1000))
        self.assertEqual(self.sb.files.read("from_text.txt"), "ünï\n" * 1000)

    def test_read_as_stream(self):
        data = os.urandom(3 * 1024 * 1024)
        self.sb.files.write("stream.bin", data)
        with self.sb.files.read("stream.bin", format="stream") as stream:
            self.assertIsInstance(stream, brig.ReadStream)
            chunks = list(stream)
        self.assertGreater(len(chunks), 1)
        self.assertEqual(b"".join(chunks), data)
        # Closed early: no error.
        stream = self.sb.files.read("stream.bin", format="stream")
        first = stream.read_chunk()
        self.assertTrue(first)
        stream.close()

    def test_gzip_both_ways(self):
        text = "compressible line\n" * 50000
        entry = self.sb.files.write("gz/up.txt", text, gzip=True)
        self.assertEqual(entry.size, len(text), "the daemon stored the decompressed bytes")
        self.assertEqual(self.sh("wc -c < gz/up.txt").strip(), str(len(text)))
        self.assertEqual(self.sb.files.read("gz/up.txt", gzip=True), text)
        with self.sb.files.read("gz/up.txt", format="stream", gzip=True) as stream:
            self.assertEqual(stream.content_encoding, "gzip", "the transfer was compressed")
            self.assertEqual(stream.read(), text.encode())
        with self.sb.files.read("gz/up.txt", format="stream") as stream:
            self.assertIn(stream.content_encoding, (None, "identity"))
            self.assertEqual(stream.read(), text.encode())
        # A file object, compressed on the fly.
        source = CountingReader(2 * 1024 * 1024 + 7, seed=b"gz")
        entry = self.sb.files.write("gz/stream.bin", source, gzip=True)
        self.assertEqual(entry.size, source.size)
        self.assertEqual(self.sh("sha256sum < gz/stream.bin").split()[0],
                         source.digest.hexdigest())
        self.assertEqual(hashlib.sha256(self.sb.files.read("gz/stream.bin", format="bytes",
                                                           gzip=True)).hexdigest(),
                         source.digest.hexdigest())

    def test_write_files(self):
        entries = self.sb.files.write_files([("multi/a.txt", "A"), ("multi/b/b.txt", b"B"),
                                             {"path": "multi/c.txt", "data": "C"}])
        self.assertEqual([e.path for e in entries], ["/home/user/multi/a.txt",
                                                     "/home/user/multi/b/b.txt",
                                                     "/home/user/multi/c.txt"])
        self.assertEqual(self.sh("cat multi/a.txt multi/b/b.txt multi/c.txt"), "ABC")

    # -- metadata and directory operations --

    def test_list_with_depth(self):
        self.sb.files.write("tree/top.txt", "t")
        self.sb.files.write("tree/sub/mid.txt", "m")
        self.sb.files.write("tree/sub/deeper/low.txt", "l")
        shallow = self.sb.files.list("tree")
        self.assertEqual([e.path for e in shallow],
                         ["/home/user/tree/sub", "/home/user/tree/top.txt"])
        self.assertEqual([e.type for e in shallow], [brig.FileType.DIR, brig.FileType.FILE])
        two = self.sb.files.list("/home/user/tree", depth=2)
        self.assertEqual([e.path for e in two],
                         ["/home/user/tree/sub", "/home/user/tree/sub/deeper",
                          "/home/user/tree/sub/mid.txt", "/home/user/tree/top.txt"])
        everything = self.sb.files.list("tree", depth=16)
        self.assertIn("/home/user/tree/sub/deeper/low.txt", [e.path for e in everything])
        with self.assertRaises(brig.NotFoundError):
            self.sb.files.list("no-such-dir")
        with self.assertRaises(brig.InvalidArgumentError):
            self.sb.files.list("tree/top.txt")
        with self.assertRaises(brig.InvalidArgumentError):
            self.sb.files.list("tree", depth=0)

    def test_stat_and_exists(self):
        self.sb.files.write("st/file.txt", "12345")
        self.sh("ln -sf file.txt st/link")
        entry = self.sb.files.stat("st/file.txt")
        self.assertEqual((entry.name, entry.path, entry.type, entry.size, entry.owner,
                          entry.group),
                         ("file.txt", "/home/user/st/file.txt", "file", 5, "user", "user"))
        self.assertTrue(entry.is_file)
        self.assertIsNone(entry.symlink_target)
        self.assertIsNotNone(entry.modified_at)
        self.assertLess(abs(entry.modified_at.timestamp() - time.time()), 120)
        self.assertEqual(entry.permissions, "-" + stat.filemode(entry.mode)[1:],
                         "permissions and mode agree")
        link = self.sb.files.stat("st/link")
        self.assertEqual((link.type, link.symlink_target), ("symlink", "file.txt"))
        d = self.sb.files.stat("st")
        self.assertTrue(d.is_dir)
        self.assertTrue(self.sb.files.exists("st/file.txt"))
        self.assertTrue(self.sb.files.exists("/home/user/st"))
        self.assertFalse(self.sb.files.exists("st/missing"))
        with self.assertRaises(brig.NotFoundError):
            self.sb.files.stat("st/missing")

    def test_make_dir_rename_remove(self):
        entry = self.sb.files.make_dir("md/x/y")
        self.assertEqual((entry.path, entry.type), ("/home/user/md/x/y", brig.FileType.DIR))
        self.assertEqual(self.sb.files.make_dir("md/x/y").type, "dir", "existing is fine")
        self.sb.files.write("md/x/y/f.txt", "f")
        moved = self.sb.files.rename("md/x/y/f.txt", "md/elsewhere/g.txt")
        self.assertEqual(moved.path, "/home/user/md/elsewhere/g.txt")
        self.assertFalse(self.sb.files.exists("md/x/y/f.txt"))
        self.assertEqual(self.sb.files.read("md/elsewhere/g.txt"), "f")
        self.sb.files.rename("md/x", "md/renamed-dir")
        self.assertTrue(self.sb.files.stat("md/renamed-dir/y").is_dir)
        self.sb.files.remove("md/elsewhere/g.txt")
        self.assertFalse(self.sb.files.exists("md/elsewhere/g.txt"))
        self.sb.files.remove("md")  # recursive
        self.assertFalse(self.sb.files.exists("md"))
        with self.assertRaises(brig.NotFoundError):
            self.sb.files.remove("md")
        with self.assertRaises(brig.NotFoundError):
            self.sb.files.rename("md/none", "md/other")

    def test_read_errors(self):
        with self.assertRaises(brig.NotFoundError) as caught:
            self.sb.files.read("does/not/exist.txt")
        self.assertEqual(caught.exception.status, 404)
        self.assertTrue(caught.exception.message)
        self.sb.files.make_dir("adir")
        with self.assertRaises(brig.InvalidArgumentError):
            self.sb.files.read("adir")

    # -- watch --

    def test_watch_dir_recursive_sees_a_nested_write(self):
        self.sb.files.make_dir("watched/a/b")
        events = queue.Queue()
        handle = self.sb.files.watch_dir("watched", events.put, recursive=True)
        self.assertIsInstance(handle, brig.WatchHandle)
        try:
            self.assertTrue(handle.running)
            self.sb.files.write("watched/a/b/new.txt", "x")
            seen = []
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                try:
                    event = events.get(timeout=0.5)
                except queue.Empty:
                    continue
                self.assertIsInstance(event, brig.FilesystemEvent)
                seen.append((str(event.type), event.path, event.is_dir))
                if event.path == "a/b/new.txt" and event.type in ("create", "write",
                                                                    "rename"):
                    break
            else:
                self.fail(f"no event for a/b/new.txt within 15 s: {seen}")
        finally:
            handle.stop()
        self.assertFalse(handle.running, "stop() ends the thread")
        self.assertIsNone(handle.error)

    def test_watch_dir_without_callback_queues_events(self):
        self.sb.files.make_dir("watched2")
        with self.sb.files.watch_dir("watched2") as handle:
            self.sb.files.write("watched2/top.txt", "x")
            self.sb.files.make_dir("watched2/newdir")
            found = []
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not (
                    {"top.txt", "newdir"} <= {e.path for e in found}):
                found += handle.get_new_events()
                time.sleep(0.1)
        paths = {e.path: e for e in found}
        self.assertIn("top.txt", paths, found)
        self.assertIn("newdir", paths, found)
        self.assertTrue(paths["newdir"].is_dir)
        self.assertFalse(handle.running)

    def test_watch_dir_errors(self):
        with self.assertRaises(brig.NotFoundError):
            self.sb.files.watch_dir("no-such-watch-dir", lambda e: None)
        self.sb.files.write("plain-file", "x")
        with self.assertRaises(brig.InvalidArgumentError):
            self.sb.files.watch_dir("plain-file", lambda e: None)


class DiskFullTest(SdkTestCase):

    def test_write_that_does_not_fit(self):
        sb = self.sandbox(disk_mb=8)
        sb.files.write("keep.txt", "old")
        with self.assertRaises(brig.NotEnoughSpaceError) as caught:
            sb.files.write("keep.txt", CountingReader(32 * 1024 * 1024))
        self.assertEqual(caught.exception.status, 507)
        self.assertIsInstance(caught.exception, brig.ServerError)
        self.assertEqual(sb.files.read("keep.txt"), "old", "the old file is kept")


if __name__ == "__main__":
    unittest.main()
