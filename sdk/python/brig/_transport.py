"""HTTP transport: configuration, a small keep-alive connection pool, error mapping, NDJSON
streams. Standard library only (http.client)."""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import threading
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union
from urllib.parse import quote, urlencode, urlsplit

from .exceptions import (ApiConnectionError, AuthenticationError, BrigError,
                         SandboxTimeoutError, error_for_status)

DEFAULT_API_URL = "http://127.0.0.1:7878"
#: Seconds the daemon gives a plain request by default (docs/api.md, "Request timeout").
DEFAULT_REQUEST_TIMEOUT = 60.0
#: Extra seconds the client waits for an answer beyond the request timeout the daemon applies.
_SOCKET_GRACE = 15.0
_MAX_IDLE = 4
#: ``header_timeout``'s default: derive the wait for the answer's headers from the request timeout.
_DERIVED = -1.0

QueryValue = Union[str, int, float, bool, None]
Body = Union[bytes, Iterable[bytes], None]


class StreamDropped(ApiConnectionError):
    """A stream ended before its last line (connection reset, EOF mid-stream). Internal: the
    SDK resumes where it can and raises ApiConnectionError where it cannot."""


def _encode_query(query: Optional[Mapping[str, QueryValue]]) -> str:
    if not query:
        return ""
    pairs: List[Tuple[str, str]] = []
    for key, value in query.items():
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float) and value.is_integer():
            text = str(int(value))
        else:
            text = str(value)
        pairs.append((key, text))
    return ("?" + urlencode(pairs, quote_via=quote)) if pairs else ""


def _is_stale(conn: http.client.HTTPConnection) -> bool:
    """True when an idle keep-alive connection cannot be used: the daemon closed it (its socket
    reads EOF) or sent something unasked."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def path_part(value: Union[str, int]) -> str:
    """One path segment, percent-encoded."""
    return quote(str(value), safe="")


class Transport:
    """Talks to one daemon: ``api_url`` (default ``$BRIG_URL`` or http://127.0.0.1:7878),
    ``api_key`` (default ``$BRIG_API_KEY``). Thread-safe: plain requests share a small pool of
    keep-alive connections; each stream gets a connection of its own."""

    def __init__(self, api_url: Optional[str] = None, api_key: Optional[str] = None,
                 request_timeout: Optional[float] = None) -> None:
        url = api_url or os.environ.get("BRIG_URL") or DEFAULT_API_URL
        if "://" not in url:
            url = "http://" + url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"api_url must be http:// or https://, not {url!r}")
        if not parts.hostname:
            raise ValueError(f"api_url has no host: {url!r}")
        self.api_url = url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("BRIG_API_KEY")
        self.request_timeout = request_timeout
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._prefix = parts.path.rstrip("/")
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    # -- connections --

    def _new_connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _take(self, timeout: Optional[float]) -> Tuple[http.client.HTTPConnection, bool]:
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._new_connection(timeout), False
            if _is_stale(conn):
                conn.close()
                continue
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            return conn, True

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Closes the idle keep-alive connections (streams in progress are not touched)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- requests --

    def url(self, path: str, query: Optional[Mapping[str, QueryValue]] = None) -> str:
        return self._prefix + path + _encode_query(query)

    def _headers(self, extra: Optional[Mapping[str, str]]) -> Dict[str, str]:
        headers = {"User-Agent": "brig-python-sdk", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        if extra:
            headers.update(extra)
        return headers

    def _with_timeout(self, query: Optional[Mapping[str, QueryValue]],
                      request_timeout: Optional[float], stream: bool) -> Dict[str, QueryValue]:
        """The query with ``request_timeout``: the explicit one, else (plain routes only) the
        client's default. Streams have no limit unless asked."""
        merged: Dict[str, QueryValue] = dict(query or {})
        rt = request_timeout
        if rt is None and not stream:
            rt = self.request_timeout
        if rt is not None and "request_timeout" not in merged:
            merged["request_timeout"] = rt
        return merged

    def send(self, method: str, path: str, *, query: Optional[Mapping[str, QueryValue]] = None,
             json_body: Any = None, body: Body = None,
             headers: Optional[Mapping[str, str]] = None,
             request_timeout: Optional[float] = None,
             stream: bool = False,
             read_timeout: Optional[float] = None,
             header_timeout: Optional[float] = _DERIVED
             ) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Sends one request and returns (connection, response) with the body unread; raises the
        mapped :class:`BrigError` for an error status (its body read). A plain request's
        connection goes back to the pool through :meth:`finish`; a stream's is its own.
        ``header_timeout`` (seconds, None: no limit) overrides the wait for the answer's headers,
        for a stream whose first line (and so its headers) may come late."""
        query = self._with_timeout(query, request_timeout, stream)
        rt = query.get("request_timeout")
        base = float(rt) if isinstance(rt, (int, float)) else DEFAULT_REQUEST_TIMEOUT
        # Until the answer's headers: the request timeout plus some grace. A stream's body may
        # then be silent for long (a quiet process): read_timeout (None: no limit) from there.
        socket_timeout: Optional[float] = base + _SOCKET_GRACE
        if header_timeout is None or header_timeout != _DERIVED:
            socket_timeout = header_timeout
        hdrs = self._headers(headers)
        data: Any = body
        if json_body is not None:
            data = json.dumps(json_body).encode("utf-8")
            hdrs.setdefault("Content-Type", "application/json")
        elif method in ("POST", "PUT") and body is None:
            data = b""
        # A request that failed on a reused keep-alive connection is sent again on a new one
        # when that cannot do anything twice: its body is at hand and it is idempotent (a POST
        # that failed before its whole request was sent counts too: the daemon acts on a
        # request only once it has read it).
        replayable = data is None or isinstance(data, (bytes, bytearray))
        idempotent = method in ("GET", "HEAD", "PUT", "DELETE")
        target = self.url(path, query)
        for attempt in (0, 1):
            if stream:
                conn, reused = self._new_connection(socket_timeout), False
            else:
                conn, reused = self._take(socket_timeout)
            try:
                try:
                    conn.request(method, target, body=data, headers=hdrs)
                except (BrokenPipeError, ConnectionResetError):
                    # The daemon may answer (401, 404, 413) before reading a whole body.
                    if reused and attempt == 0 and replayable:
                        conn.close()
                        continue
                resp = conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                conn.close()
                if reused and attempt == 0 and replayable and idempotent:
                    continue  # a keep-alive connection the daemon had closed meanwhile
                raise ApiConnectionError(f"{method} {path}: connection to {self.api_url} "
                                         f"failed: {e!r}") from e
            except socket.timeout as e:
                conn.close()
                raise SandboxTimeoutError(f"{method} {path}: no answer from {self.api_url} "
                                          f"within {socket_timeout} s") from e
            except OSError as e:
                conn.close()
                raise ApiConnectionError(f"{method} {path}: cannot reach {self.api_url}: "
                                         f"{e}") from e
            except http.client.HTTPException as e:
                conn.close()
                raise ApiConnectionError(f"{method} {path}: bad answer from {self.api_url}: "
                                         f"{e!r}") from e
            if resp.status >= 400:
                try:
                    raw = resp.read()
                except (OSError, http.client.HTTPException):
                    raw = b""
                if stream or resp.will_close:
                    conn.close()
                else:
                    self._give_back(conn)
                raise self._error(resp.status, raw, method, path)
            if stream and conn.sock is not None:
                conn.sock.settimeout(read_timeout)
            return conn, resp
        raise ApiConnectionError(f"{method} {path}: connection to {self.api_url} failed")

    def _error(self, status: int, raw: bytes, method: str, path: str) -> BrigError:
        message = ""
        try:
            parsed = json.loads(raw) if raw else None
            if isinstance(parsed, dict) and isinstance(parsed.get("message"), str):
                message = parsed["message"]
        except ValueError:
            pass
        if not message:
            message = raw.decode("utf-8", "replace").strip() or f"HTTP {status} for {method} {path}"
        if status == 401 and not self.api_key:
            message += " (no API key given: set BRIG_API_KEY or pass api_key=)"
        err = error_for_status(status, message)
        if status == 401 and not isinstance(err, AuthenticationError):  # pragma: no cover
            err = AuthenticationError(message, status)
        return err

    def finish(self, conn: http.client.HTTPConnection,
               resp: http.client.HTTPResponse) -> bytes:
        """Reads a plain answer's body and returns the connection to the pool."""
        try:
            data = resp.read()
        except socket.timeout as e:
            conn.close()
            raise SandboxTimeoutError(f"no answer from {self.api_url} in time") from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise ApiConnectionError(f"reading the answer from {self.api_url} failed: "
                                     f"{e!r}") from e
        if resp.will_close:
            conn.close()
        else:
            self._give_back(conn)
        return data

    def request(self, method: str, path: str, *,
                query: Optional[Mapping[str, QueryValue]] = None, json_body: Any = None,
                body: Body = None, headers: Optional[Mapping[str, str]] = None,
                request_timeout: Optional[float] = None) -> Any:
        """One plain request: the parsed JSON answer, or None for an empty one (204)."""
        conn, resp = self.send(method, path, query=query, json_body=json_body, body=body,
                               headers=headers, request_timeout=request_timeout)
        data = self.finish(conn, resp)
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError as e:
            raise BrigError(f"{method} {path}: answer is not JSON: {data[:200]!r}",
                            resp.status) from e

    def stream(self, method: str, path: str, *,
               query: Optional[Mapping[str, QueryValue]] = None, json_body: Any = None,
               request_timeout: Optional[float] = None,
               read_timeout: Optional[float] = None,
               header_timeout: Optional[float] = _DERIVED) -> "LineStream":
        """Opens an NDJSON stream on a connection of its own."""
        conn, resp = self.send(method, path, query=query, json_body=json_body,
                               request_timeout=request_timeout, stream=True,
                               read_timeout=read_timeout, header_timeout=header_timeout)
        return LineStream(conn, resp)


class _Closed(Exception):
    """A read on a stream that was closed meanwhile."""


class ByteStream:
    """A streamed answer's body (its own connection). Closing it, from any thread, ends it."""

    def __init__(self, conn: http.client.HTTPConnection,
                 resp: http.client.HTTPResponse) -> None:
        self._conn = conn
        self.response = resp
        self._closed = False
        sock = conn.sock
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            except OSError:
                pass

    @property
    def closed(self) -> bool:
        return self._closed

    def read_chunk(self, size: int = 1 << 16) -> bytes:
        """Up to ``size`` bytes (b"" at the end). Raises StreamDropped when the stream broke."""
        if self._closed:
            return b""
        try:
            return self.response.read1(size)
        except Exception as e:  # noqa: BLE001 - see _broken
            err = self._broken(e)
            if isinstance(err, _Closed):
                return b""
            raise err from e

    def _broken(self, error: Exception) -> Exception:
        """What a failed read means: _Closed when this stream was closed (from any thread:
        http.client then fails in various ways, AttributeError included), StreamDropped for a
        broken connection, else the error itself."""
        if self._closed:
            return _Closed()
        if isinstance(error, (OSError, http.client.HTTPException, ValueError)):
            return StreamDropped(f"the stream broke: {error!r}")
        return error

    def close(self) -> None:
        """Ends the stream; safe to call from another thread (it wakes a blocked reader)."""
        if self._closed:
            return
        self._closed = True
        sock = self._conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._conn.close()

    def __enter__(self) -> "ByteStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LineStream(ByteStream):
    """An NDJSON stream: iterate for one parsed object per line."""

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        while True:
            if self._closed:
                return
            try:
                line = self.response.readline()
            except Exception as e:  # noqa: BLE001 - see _broken
                err = self._broken(e)
                if isinstance(err, _Closed):
                    return
                raise err from e
            if not line:
                return
            if not line.endswith(b"\n"):
                if self._closed:
                    return
                raise StreamDropped("the stream ended in the middle of a line")
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise BrigError(f"bad stream line {line[:200]!r}") from e
            if isinstance(obj, dict):
                yield obj
