"""Files in a sandbox: ``sandbox.files`` (docs/api.md, "Files").

Paths are resolved inside the sandbox as ``user`` (``"user"`` by default, or ``"root"``); a
relative path is relative to that user's home.
"""

from __future__ import annotations

import gzip as _gzip
import io
import json
import threading
import zlib
from typing import (IO, TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, List, Mapping,
                    Optional, Sequence, Tuple, Union, overload)

from ._transport import ByteStream, LineStream, StreamDropped, path_part
from .exceptions import BrigError, NotFoundError, error_for_status
from .models import EntryInfo, FilesystemEvent

if TYPE_CHECKING:  # pragma: no cover
    from typing import Literal

    from .sandbox import Sandbox

#: What ``write`` accepts: text (UTF-8 encoded), bytes, a binary or text file object (read in
#: chunks and streamed), or an iterable of bytes chunks.
WriteData = Union[str, bytes, bytearray, memoryview, IO[bytes], IO[str], Iterable[bytes]]

#: Bytes read from a file object per upload chunk.
UPLOAD_CHUNK = 256 * 1024
#: Seconds without progress after which a transfer fails (the socket's timeout).
TRANSFER_IDLE_TIMEOUT = 75.0
#: Seconds ``watch_dir`` waits for the daemon to confirm the watch.
WATCH_START_TIMEOUT = 30.0


class ReadStream:
    """A file being downloaded: iterate for bytes chunks (decompressed when the transfer was
    gzip-encoded), or ``read()``. Close it (or use ``with``) when done early."""

    def __init__(self, stream: ByteStream, gzipped: bool) -> None:
        self._stream = stream
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if gzipped else None
        self._done = False

    @property
    def content_encoding(self) -> Optional[str]:
        """The transfer's ``Content-Encoding`` (``"gzip"`` when compressed), else None."""
        return self._stream.response.getheader("Content-Encoding")

    def __iter__(self) -> Iterator[bytes]:
        while True:
            chunk = self.read_chunk()
            if not chunk:
                return
            yield chunk

    def read_chunk(self) -> bytes:
        """The next piece of the file (b"" at its end)."""
        while not self._done:
            raw = self._stream.read_chunk()
            if not raw:
                self._done = True
                self._stream.close()
                if self._inflate is not None:
                    tail = self._inflate.flush()
                    if not self._inflate.eof:
                        raise StreamDropped("the gzip-encoded download ended early")
                    return tail
                return b""
            if self._inflate is None:
                return raw
            data = self._inflate.decompress(raw)
            if data:
                return data
        return b""

    def read(self) -> bytes:
        """The rest of the file."""
        out = io.BytesIO()
        for chunk in self:
            out.write(chunk)
        return out.getvalue()

    def close(self) -> None:
        self._done = True
        self._stream.close()

    def __enter__(self) -> "ReadStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _file_chunks(source: Any, compress: bool) -> Iterator[bytes]:
    """A file object's or iterable's bytes, in chunks, gzip-compressed when asked. Never holds
    more than one chunk."""
    deflate = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS) if compress else None

    def pieces() -> Iterator[bytes]:
        if hasattr(source, "read"):
            while True:
                block = source.read(UPLOAD_CHUNK)
                if not block:
                    return
                yield block.encode("utf-8") if isinstance(block, str) else bytes(block)
        else:
            for block in source:
                if block:
                    yield block.encode("utf-8") if isinstance(block, str) else bytes(block)

    for piece in pieces():
        out = deflate.compress(piece) if deflate is not None else piece
        if out:
            yield out
    if deflate is not None:
        tail = deflate.flush()
        if tail:
            yield tail


class WatchHandle:
    """A watch on a directory (``files.watch_dir``): a thread reads the daemon's stream of
    changes and calls ``on_event`` with each :class:`~brig.FilesystemEvent` (or queues them for
    :meth:`get_new_events` when there is no ``on_event``). :meth:`stop` ends it."""

    def __init__(self, stream: LineStream, on_event: Optional[Callable[[FilesystemEvent], Any]],
                 on_exit: Optional[Callable[[Optional[BaseException]], Any]] = None) -> None:
        self._stream = stream
        self._on_event = on_event
        self._on_exit = on_exit
        self._events: List[FilesystemEvent] = []
        self._lock = threading.Lock()
        self._stopped = False
        self.error: Optional[BaseException] = None
        """Why the watch ended by itself (the stream broke, an error line), else None."""
        self._thread = threading.Thread(target=self._run, name="brig-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        error: Optional[BaseException] = None
        try:
            for line in self._stream:
                kind = line.get("type")
                if kind == "watching":
                    continue
                if kind == "error":
                    error = error_for_status(int(line.get("code") or 500),
                                             str(line.get("message") or "watch error"))
                    break
                event = FilesystemEvent.from_json(line)
                if self._on_event is not None:
                    self._on_event(event)
                else:
                    with self._lock:
                        self._events.append(event)
            else:
                if not self._stopped:
                    error = StreamDropped("the watch stream ended")
        except BaseException as e:  # noqa: BLE001 - reported through .error / on_exit
            if not self._stopped:
                error = e
        finally:
            self._stream.close()
            self.error = error
            if self._on_exit is not None:
                try:
                    self._on_exit(error)
                except Exception:  # noqa: BLE001 - a callback's failure ends nothing more
                    pass

    @property
    def running(self) -> bool:
        """True until stopped or ended."""
        return self._thread.is_alive()

    def get_new_events(self) -> List[FilesystemEvent]:
        """The events queued since the last call (only when watching without ``on_event``)."""
        with self._lock:
            events, self._events = self._events, []
        return events

    def stop(self, timeout: float = 10.0) -> None:
        """Ends the watch and waits (up to ``timeout`` s) for its thread."""
        self._stopped = True
        self._stream.close()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def __enter__(self) -> "WatchHandle":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class Files:
    """Read, write and manage files in a sandbox: ``sandbox.files``."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sandbox = sandbox

    def _path(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{path_part(self._sandbox.sandbox_id)}/files{suffix}"

    @staticmethod
    def _query(path: str, user: Optional[str], **more: Any) -> Dict[str, Any]:
        query: Dict[str, Any] = {"path": path}
        if user is not None:
            query["user"] = user
        query.update({k: v for k, v in more.items() if v is not None})
        return query

    # -- read --

    @overload
    def read(self, path: str, format: "Literal['text']" = "text", user: Optional[str] = None,
             gzip: bool = False, request_timeout: Optional[float] = None) -> str: ...

    @overload
    def read(self, path: str, format: "Literal['bytes']", user: Optional[str] = None,
             gzip: bool = False, request_timeout: Optional[float] = None) -> bytes: ...

    @overload
    def read(self, path: str, format: "Literal['stream']", user: Optional[str] = None,
             gzip: bool = False, request_timeout: Optional[float] = None) -> ReadStream: ...

    def read(self, path: str, format: str = "text", user: Optional[str] = None,
             gzip: bool = False, request_timeout: Optional[float] = None
             ) -> Union[str, bytes, ReadStream]:
        """Downloads a file.

        Args:
            path: the file (relative: to the user's home).
            format: ``"text"`` (str, UTF-8; invalid bytes replaced), ``"bytes"``, or
                ``"stream"`` (a :class:`ReadStream` of bytes chunks, for large files).
            user: ``"user"`` (default) or ``"root"``.
            gzip: ask for a gzip-compressed transfer (decompressed here).

        Raises:
            NotFoundError: no such file. InvalidArgumentError: it is a directory.
        """
        if format not in ("text", "bytes", "stream"):
            raise ValueError(f"format must be 'text', 'bytes' or 'stream', not {format!r}")
        headers = {"Accept": "application/octet-stream",
                   "Accept-Encoding": "gzip" if gzip else "identity"}
        conn, resp = self._sandbox._transport.send(
            "GET", self._path(), query=self._query(path, user), headers=headers,
            request_timeout=request_timeout, stream=True, read_timeout=TRANSFER_IDLE_TIMEOUT)
        gzipped = (resp.getheader("Content-Encoding") or "").strip().lower() == "gzip"
        reader = ReadStream(ByteStream(conn, resp), gzipped)
        if format == "stream":
            return reader
        with reader:
            data = reader.read()
        return data.decode("utf-8", "replace") if format == "text" else data

    # -- write --

    def write(self, path: str, data: WriteData, user: Optional[str] = None, gzip: bool = False,
              mode: Union[int, str, None] = None,
              request_timeout: Optional[float] = None) -> EntryInfo:
        """Uploads a file, replacing it atomically; parent directories are created.

        Args:
            path: the file (relative: to the user's home).
            data: str (written as UTF-8), bytes, a file object (binary or text; read and sent in
                chunks with chunked transfer encoding, never whole), or an iterable of bytes.
            user: ``"user"`` (default) or ``"root"``: the file belongs to that user.
            gzip: compress the transfer (the daemon decompresses it).
            mode: permission bits, e.g. ``0o755`` or ``"0755"`` (default: the daemon's).

        Returns:
            the new file's :class:`EntryInfo`.

        Raises:
            NotEnoughSpaceError: it does not fit in the sandbox's disk (the old file is kept).
        """
        headers = {"Content-Type": "application/octet-stream"}
        body: Any
        if isinstance(data, str):
            body = data.encode("utf-8")
        elif isinstance(data, (bytes, bytearray, memoryview)):
            body = bytes(data)
        elif hasattr(data, "read") or hasattr(data, "__iter__"):
            body = _file_chunks(data, gzip)
        else:
            raise TypeError(f"cannot write {type(data).__name__}: give str, bytes, a file "
                            "object or an iterable of bytes")
        if gzip:
            headers["Content-Encoding"] = "gzip"
            if isinstance(body, bytes):
                body = _gzip.compress(body, compresslevel=6)
        query = self._query(path, user, mode=_mode_text(mode))
        transport = self._sandbox._transport
        if isinstance(body, bytes):
            answer = transport.request("PUT", self._path(), query=query, body=body,
                                       headers=headers, request_timeout=request_timeout)
        else:
            conn, resp = transport.send("PUT", self._path(), query=query, body=body,
                                        headers=headers, request_timeout=request_timeout,
                                        stream=True, read_timeout=TRANSFER_IDLE_TIMEOUT)
            try:
                raw = resp.read()
            finally:
                conn.close()
            answer = _json(raw)
        return EntryInfo.from_json(answer or {})

    def write_files(self, files: Sequence[Union[Tuple[str, WriteData], Mapping[str, Any]]],
                    user: Optional[str] = None, gzip: bool = False) -> List[EntryInfo]:
        """Writes several files, one after the other: ``[(path, data), ...]`` or
        ``[{"path": ..., "data": ...}, ...]``. Returns their entries, in order."""
        written: List[EntryInfo] = []
        for item in files:
            if isinstance(item, Mapping):
                path, data = item["path"], item["data"]
            else:
                path, data = item
            written.append(self.write(path, data, user=user, gzip=gzip))
        return written

    # -- metadata --

    def stat(self, path: str, user: Optional[str] = None) -> EntryInfo:
        """The entry at ``path`` (symlinks are not followed). NotFoundError when missing."""
        answer = self._sandbox._call("GET", self._path("/stat"), query=self._query(path, user))
        return EntryInfo.from_json(answer)

    get_info = stat

    def exists(self, path: str, user: Optional[str] = None) -> bool:
        """True when something (file, directory, symlink...) is at ``path``."""
        try:
            self.stat(path, user)
            return True
        except NotFoundError:
            return False

    def list(self, path: str, depth: int = 1, user: Optional[str] = None) -> List[EntryInfo]:
        """A directory's entries, and their children down to ``depth`` levels (1–16), sorted by
        path. NotFoundError when missing, InvalidArgumentError when not a directory."""
        answer = self._sandbox._call("GET", self._path("/list"),
                                     query=self._query(path, user, depth=int(depth)))
        return [EntryInfo.from_json(e) for e in (answer or {}).get("entries", [])]

    def make_dir(self, path: str, user: Optional[str] = None) -> EntryInfo:
        """``mkdir -p``: the directory's entry (also when it existed)."""
        body: Dict[str, Any] = {"path": path}
        if user is not None:
            body["user"] = user
        return EntryInfo.from_json(self._sandbox._call("POST", self._path("/mkdir"),
                                                       json_body=body))

    def rename(self, old_path: str, new_path: str, user: Optional[str] = None) -> EntryInfo:
        """Moves ``old_path`` to ``new_path`` (parents created): the new entry."""
        body: Dict[str, Any] = {"from": old_path, "to": new_path}
        if user is not None:
            body["user"] = user
        return EntryInfo.from_json(self._sandbox._call("POST", self._path("/move"),
                                                       json_body=body))

    move = rename

    def remove(self, path: str, user: Optional[str] = None) -> None:
        """Removes a file, or a directory recursively. NotFoundError when missing."""
        self._sandbox._call("DELETE", self._path(), query=self._query(path, user))

    # -- watch --

    def watch_dir(self, path: str,
                  on_event: Optional[Callable[[FilesystemEvent], Any]] = None,
                  recursive: bool = False, user: Optional[str] = None,
                  on_exit: Optional[Callable[[Optional[BaseException]], Any]] = None,
                  request_timeout: Optional[float] = None) -> WatchHandle:
        """Watches a directory for changes. Returns once the daemon watches (changes made after
        this returns are reported); ``on_event`` is then called from a thread of the handle's
        with each :class:`FilesystemEvent` (path relative to ``path``). Without ``on_event``,
        collect them with :meth:`WatchHandle.get_new_events`. ``on_exit(error)`` is called when
        the watch ends. Stop it with :meth:`WatchHandle.stop`.

        Raises NotFoundError (missing) or InvalidArgumentError (not a directory).
        """
        query = self._query(path, user, recursive=bool(recursive))
        stream = self._sandbox._transport.stream(
            "GET", self._path("/watch"), query=query, request_timeout=request_timeout,
            read_timeout=WATCH_START_TIMEOUT)
        try:
            first = next(iter(stream), None)
            if first is None:
                raise StreamDropped("the watch stream ended before it started")
            if first.get("type") == "error":
                raise error_for_status(int(first.get("code") or 500),
                                       str(first.get("message") or "watch error"))
            if first.get("type") != "watching":
                raise BrigError(f"unexpected first watch line: {first}")
            sock = stream._conn.sock
            if sock is not None:
                sock.settimeout(None)
        except BaseException:
            stream.close()
            raise
        return WatchHandle(stream, on_event, on_exit)


def _mode_text(mode: Union[int, str, None]) -> Optional[str]:
    if mode is None:
        return None
    if isinstance(mode, int):
        return format(mode, "04o")
    return str(mode)


def _json(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as e:
        raise BrigError(f"answer is not JSON: {raw[:200]!r}") from e
