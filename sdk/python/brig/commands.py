"""Commands in a sandbox: ``sandbox.commands`` (docs/api.md, "Commands")."""

from __future__ import annotations

import base64
import codecs
import signal as _signal
import threading
import time
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Union, overload)

from ._transport import LineStream, StreamDropped, Transport, path_part
from .exceptions import (ApiConnectionError, CommandExitError, ConflictError,
                         NotFoundError, SandboxLostError, SandboxTimeoutError, ServerError,
                         error_for_status)
from .models import ENDED_STATES, CommandResult, ProcessInfo

if TYPE_CHECKING:  # pragma: no cover
    from typing import Literal

    from .sandbox import Sandbox

OutputHandler = Callable[[str], Any]
DataHandler = Callable[[bytes], Any]
Signal = Union[int, str, "_signal.Signals"]

#: How long a follower keeps trying to re-attach after its stream dropped (seconds).
RECONNECT_BUDGET_S = 30.0


def _chunk(line: Mapping[str, Any]) -> bytes:
    if "data_b64" in line:
        return base64.b64decode(line["data_b64"])
    data = line.get("data", "")
    return data.encode("utf-8") if isinstance(data, str) else b""


def signal_name(sig: Signal) -> Union[int, str]:
    """The API's form of a signal: a number, or a name such as "SIGTERM"."""
    if isinstance(sig, _signal.Signals):
        return sig.name
    if isinstance(sig, int):
        return int(sig)
    name = str(sig).upper()
    return name if name.startswith("SIG") else "SIG" + name


class OutputState:
    """What a command's output stream said so far: the bytes of stdout and stderr, the next
    offset to ask for, the exit line and the error lines. Feeding a line that overlaps what was
    already seen (after a resume) only delivers the new part."""

    def __init__(self, on_stdout: Optional[OutputHandler] = None,
                 on_stderr: Optional[OutputHandler] = None,
                 on_data: Optional[DataHandler] = None) -> None:
        self.pid: Optional[int] = None
        self.offset = 0
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.exit: Optional[Dict[str, Any]] = None
        self.errors: List[Dict[str, Any]] = []
        self.truncated: List[Dict[str, Any]] = []
        self.stdout_handlers: List[OutputHandler] = [on_stdout] if on_stdout else []
        self.stderr_handlers: List[OutputHandler] = [on_stderr] if on_stderr else []
        self.data_handlers: List[DataHandler] = [on_data] if on_data else []
        self._decoders = {
            "stdout": codecs.getincrementaldecoder("utf-8")(errors="replace"),
            "stderr": codecs.getincrementaldecoder("utf-8")(errors="replace"),
        }
        self.lock = threading.Lock()

    def feed(self, line: Mapping[str, Any]) -> None:
        kind = line.get("type")
        if kind == "start":
            self.pid = int(line["pid"])
        elif kind in ("stdout", "stderr"):
            chunk = _chunk(line)
            offset = int(line.get("offset", self.offset))
            if offset < self.offset:  # already seen part of it (a resumed stream)
                chunk = chunk[self.offset - offset:]
                offset = self.offset
            self.offset = offset + len(chunk)
            if not chunk:
                return
            (self.stdout if kind == "stdout" else self.stderr).extend(chunk)
            with self.lock:  # wait() may add or remove handlers from another thread
                data_handlers = list(self.data_handlers)
                handlers = list(self.stdout_handlers if kind == "stdout"
                                else self.stderr_handlers)
            for handler in data_handlers:
                handler(chunk)
            if handlers:
                text = self._decoders[kind].decode(chunk)
                if text:
                    for h in handlers:
                        h(text)
        elif kind == "truncated":
            self.truncated.append(dict(line))
            self.offset = max(self.offset, int(line.get("to", self.offset)))
        elif kind == "exit":
            self.exit = dict(line)
            for stream in ("stdout", "stderr"):
                with self.lock:
                    handlers = list(self.stdout_handlers if stream == "stdout"
                                    else self.stderr_handlers)
                rest = self._decoders[stream].decode(b"", final=True)
                if rest:
                    for h in handlers:
                        h(rest)
        elif kind == "error":
            self.errors.append(dict(line))

    @property
    def exited(self) -> bool:
        return self.exit is not None

    def result(self) -> CommandResult:
        """The result (call once ``exited``)."""
        ex = self.exit or {}
        sig = ex.get("signal")
        if "exit_code" in ex and ex["exit_code"] is not None:
            code = int(ex["exit_code"])
        elif sig is not None:
            code = -int(sig)
        else:
            code = -1
        messages = [str(e.get("message", "")) for e in self.errors if e.get("message")]
        return CommandResult(
            exit_code=code,
            stdout=bytes(self.stdout).decode("utf-8", "replace"),
            stderr=bytes(self.stderr).decode("utf-8", "replace"),
            error="; ".join(messages) or None,
            signal=int(sig) if sig is not None else None,
            timed_out=bool(ex.get("timed_out", False)),
            pid=self.pid,
        )


def check_result(result: CommandResult) -> CommandResult:
    """Raises SandboxTimeoutError when its timeout killed it, CommandExitError when it failed."""
    if result.timed_out:
        raise SandboxTimeoutError(
            f"command {result.pid} was killed by its timeout", None, result=result)
    if result.exit_code != 0 or result.signal is not None:
        raise CommandExitError(result)
    return result


class Commands:
    """Run and manage processes in a sandbox: ``sandbox.commands``."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sandbox = sandbox

    @property
    def _transport(self) -> Transport:
        return self._sandbox._transport

    def _path(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{path_part(self._sandbox.sandbox_id)}/commands{suffix}"

    # -- run --

    @overload
    def run(self, cmd: Union[str, Sequence[str]], background: "Literal[False]" = False,
            envs: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
            user: Optional[str] = None, timeout: Optional[float] = None,
            on_stdout: Optional[OutputHandler] = None,
            on_stderr: Optional[OutputHandler] = None, stdin: bool = False,
            tag: Optional[str] = None, request_timeout: Optional[float] = None
            ) -> CommandResult: ...

    @overload
    def run(self, cmd: Union[str, Sequence[str]], background: "Literal[True]",
            envs: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
            user: Optional[str] = None, timeout: Optional[float] = None,
            on_stdout: Optional[OutputHandler] = None,
            on_stderr: Optional[OutputHandler] = None, stdin: bool = False,
            tag: Optional[str] = None, request_timeout: Optional[float] = None
            ) -> "CommandHandle": ...

    def run(self, cmd: Union[str, Sequence[str]], background: bool = False,
            envs: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
            user: Optional[str] = None, timeout: Optional[float] = None,
            on_stdout: Optional[OutputHandler] = None,
            on_stderr: Optional[OutputHandler] = None, stdin: bool = False,
            tag: Optional[str] = None, request_timeout: Optional[float] = None
            ) -> Union[CommandResult, "CommandHandle"]:
        """Runs a command.

        Args:
            cmd: a string, run as ``/bin/bash -l -c <cmd>``; or a list of strings, run directly
                (PATH is searched).
            background: False (default): wait for it and return a :class:`CommandResult`.
                True: return a :class:`CommandHandle` at once.
            envs: environment variables over the sandbox's.
            cwd: absolute working directory (default: the user's home).
            user: ``"user"`` (uid 1000, the default) or ``"root"``.
            timeout: seconds after which its process group is killed (None: no limit).
            on_stdout, on_stderr: called with each piece of output as text while it runs (for a
                background command, from a thread of the handle's).
            stdin: keep its stdin open for :meth:`send_stdin` (otherwise it reads EOF).
            tag: free text shown in :meth:`list`.
            request_timeout: foreground only: seconds to wait for it before raising
                :class:`SandboxTimeoutError` (the process keeps running).

        Returns:
            the result (foreground), or a handle (background).

        Raises:
            CommandExitError: (foreground) it exited with a non-zero code or a signal killed it.
            SandboxTimeoutError: its ``timeout`` killed it, or ``request_timeout`` passed.
            ConflictError: the sandbox is not running (e.g. paused).
            SandboxLostError: the sandbox ended (killed, timed out, out of memory).
        """
        body = self._body(cmd, envs=envs, cwd=cwd, user=user, timeout=timeout, stdin=stdin,
                          tag=tag, background=background)
        if background:
            answer = self._sandbox._call("POST", self._path(), json_body=body)
            return CommandHandle(self._sandbox, int(answer["pid"]), tag=answer.get("tag"),
                                 on_stdout=on_stdout, on_stderr=on_stderr)
        state = OutputState(on_stdout=on_stdout, on_stderr=on_stderr)
        stream = self._sandbox._stream("POST", self._path(), json_body=body,
                                       request_timeout=request_timeout)
        deadline = time.monotonic() + request_timeout if request_timeout else None
        follow(self._sandbox, state, first=stream, deadline=deadline)
        return check_result(state.result())

    @staticmethod
    def _body(cmd: Union[str, Sequence[str]], *, envs: Optional[Mapping[str, str]],
              cwd: Optional[str], user: Optional[str], timeout: Optional[float], stdin: bool,
              tag: Optional[str], background: bool,
              pty: Optional[Mapping[str, int]] = None) -> Dict[str, Any]:
        body: Dict[str, Any] = {}
        if isinstance(cmd, str):
            body["cmd"] = cmd
        elif isinstance(cmd, (bytes, bytearray)):
            raise TypeError("cmd must be a str or a list of str, not bytes")
        else:
            argv = list(cmd)
            if not argv or not all(isinstance(a, str) for a in argv):
                raise TypeError("cmd as a list must be a non-empty list of str")
            body["argv"] = argv
        if envs:
            body["env"] = dict(envs)
        if cwd is not None:
            body["cwd"] = cwd
        if user is not None:
            body["user"] = user
        if timeout:
            body["timeout"] = timeout
        if background:
            body["background"] = True
        if stdin:
            body["stdin"] = True
        if tag is not None:
            body["tag"] = tag
        if pty is not None:
            body["pty"] = dict(pty)
        return body

    # -- manage --

    def list(self) -> List[ProcessInfo]:
        """Running processes and the 64 most recent exited ones."""
        answer = self._sandbox._call("GET", self._path())
        return [ProcessInfo.from_json(p) for p in answer.get("processes", [])]

    def connect(self, pid: int, on_stdout: Optional[OutputHandler] = None,
                on_stderr: Optional[OutputHandler] = None) -> "CommandHandle":
        """A handle on a process started earlier (by pid), e.g. by another client or before a
        handle was dropped. Its ``wait`` replays the held output from the start.

        Raises NotFoundError when the sandbox has no such process."""
        if not any(p.pid == pid for p in self.list()):
            raise NotFoundError(f"no process {pid} in sandbox {self._sandbox.sandbox_id}", 404)
        return CommandHandle(self._sandbox, int(pid), on_stdout=on_stdout, on_stderr=on_stderr)

    def kill(self, pid: int) -> bool:
        """Sends SIGKILL to the process's group. True when sent, False when it had already
        exited or does not exist."""
        try:
            self.signal(pid, "SIGKILL")
            return True
        except (NotFoundError, ConflictError):
            return False

    def signal(self, pid: int, sig: Signal) -> None:
        """Sends a signal (a number, a name like "SIGTERM" or "TERM", or a signal.Signals) to
        the process's group. ConflictError when it has exited."""
        self._sandbox._call("POST", self._path(f"/{int(pid)}/signal"),
                            json_body={"signal": signal_name(sig)})

    def send_stdin(self, pid: int, data: Union[str, bytes]) -> None:
        """Writes to the process's stdin (started with ``stdin=True``, or on a pty). Larger
        data than 1 MiB is sent in several requests."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        step = 1 << 20
        for start in range(0, max(len(raw), 1), step):
            self._sandbox._call("POST", self._path(f"/{int(pid)}/stdin"),
                                body=raw[start:start + step])

    def close_stdin(self, pid: int) -> None:
        """Closes the process's stdin: it reads EOF."""
        self._sandbox._call("POST", self._path(f"/{int(pid)}/stdin/close"))

    def wait_exit(self, pid: int, request_timeout: Optional[float] = None) -> CommandResult:
        """Waits for the process to exit (without its output): a CommandResult with empty
        stdout/stderr. Does not raise for a non-zero exit."""
        answer = self._sandbox._call("GET", self._path(f"/{int(pid)}/wait"),
                                     request_timeout=request_timeout)
        state = OutputState()
        state.pid = int(pid)
        state.exit = dict(answer or {})
        return state.result()


def follow(sandbox: "Sandbox", state: OutputState, first: Optional[LineStream] = None,
           deadline: Optional[float] = None,
           on_stream: Optional[Callable[[Optional[LineStream]], None]] = None,
           stopped: Optional[Callable[[], bool]] = None) -> None:
    """Reads a command's output into ``state`` until its exit line: ``first`` (the foreground
    run's stream) if given, then the output route from ``state.offset``, re-attaching when a
    stream drops. ``deadline`` (time.monotonic()) bounds the wait. ``on_stream`` is told of each
    stream opened (so another thread can close it); ``stopped()`` true means return quietly.

    Raises SandboxTimeoutError (deadline, or a 408 line), SandboxLostError (the sandbox ended),
    and the mapped error of an error line that ends the stream."""
    stream = first
    reconnect_until: Optional[float] = None
    delay = 0.1
    while True:
        if stopped is not None and stopped():
            return
        last_error: Optional[Dict[str, Any]] = None
        dropped: Optional[BaseException] = None
        if stream is None:
            if state.pid is None:
                raise ApiConnectionError("the command's stream broke before it said its pid")
            remaining = None
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SandboxTimeoutError(f"process {state.pid} did not exit in time")
            try:
                stream = sandbox._stream(
                    "GET", f"/v1/sandboxes/{path_part(sandbox.sandbox_id)}/commands/"
                           f"{state.pid}/output",
                    query={"offset": state.offset, "follow": True},
                    request_timeout=max(remaining, 0.001) if remaining is not None else None)
            except ApiConnectionError as e:
                dropped = e
        if stream is not None:
            if on_stream is not None:
                on_stream(stream)
            try:
                with stream:
                    for line in stream:
                        state.feed(line)
                        kind = line.get("type")
                        if kind == "exit":
                            return
                        if kind == "error":
                            last_error = line
                        elif kind in ("stdout", "stderr", "start"):
                            reconnect_until, delay = None, 0.1
            except StreamDropped as e:
                dropped = e
            finally:
                if on_stream is not None:
                    on_stream(None)
                stream = None
        if state.exited:
            return
        if stopped is not None and stopped():
            return
        if last_error is not None and dropped is None:
            _raise_for_error_line(sandbox, state, last_error)
        # No exit line: the connection dropped (or the daemon restarted). Re-attach.
        now = time.monotonic()
        if reconnect_until is None:
            reconnect_until = now + RECONNECT_BUDGET_S
        if now >= reconnect_until or (deadline is not None and now >= deadline):
            if deadline is not None and now >= deadline:
                raise SandboxTimeoutError(f"process {state.pid} did not exit in time")
            raise ApiConnectionError(
                f"lost the output stream of process {state.pid} and could not re-attach"
                + (f": {dropped}" if dropped else ""))
        if state.pid is None:
            raise ApiConnectionError("the command's stream broke before it said its pid"
                                     + (f": {dropped}" if dropped else ""))
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


def _raise_for_error_line(sandbox: "Sandbox", state: OutputState,
                          line: Mapping[str, Any]) -> None:
    code = int(line.get("code") or 500)
    message = str(line.get("message") or "stream error")
    if code == 408:
        raise SandboxTimeoutError(f"process {state.pid}: {message}", 408)
    if code == 503:
        info = sandbox._peek_state()
        if info is not None and info[0] in ENDED_STATES:
            raise SandboxLostError(
                f"sandbox {sandbox.sandbox_id} is {info[0]}"
                + (f" ({info[1]})" if info[1] else "") + f": {message}",
                503, state=info[0], reason=info[1])
        raise ServerError(message, 503)
    raise error_for_status(code, message)


class CommandHandle:
    """A running (background) command: ``commands.run(..., background=True)`` or
    ``commands.connect(pid)``.

    ``wait()`` follows the process's output from offset 0 until it exits, remembering the offset
    so a dropped stream (or a ``wait`` that timed out) resumes where it stopped. When
    ``on_stdout``/``on_stderr`` are given at creation, a thread of the handle's follows the
    output at once and calls them; ``wait()`` then waits for that thread.
    """

    def __init__(self, sandbox: "Sandbox", pid: int, tag: Optional[str] = None,
                 on_stdout: Optional[OutputHandler] = None,
                 on_stderr: Optional[OutputHandler] = None,
                 on_data: Optional[DataHandler] = None) -> None:
        self._sandbox = sandbox
        self.pid = pid
        self.tag = tag
        self._state = OutputState(on_stdout=on_stdout, on_stderr=on_stderr, on_data=on_data)
        self._state.pid = pid
        self._follow_lock = threading.Lock()
        self._stream: Optional[LineStream] = None
        self._stopping = False
        self._thread: Optional[threading.Thread] = None
        self._thread_error: Optional[BaseException] = None
        if on_stdout or on_stderr or on_data:
            self._start_thread()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} pid={self.pid} sandbox={self._sandbox.sandbox_id}>"

    @property
    def sandbox_id(self) -> str:
        return self._sandbox.sandbox_id

    @property
    def stdout(self) -> str:
        """The stdout seen so far (by ``wait`` or the handle's thread)."""
        return bytes(self._state.stdout).decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        """The stderr seen so far."""
        return bytes(self._state.stderr).decode("utf-8", "replace")

    @property
    def exit_code(self) -> Optional[int]:
        """The exit code once seen (``-signal`` when killed), else None."""
        return self._state.result().exit_code if self._state.exited else None

    @property
    def offset(self) -> int:
        """The next output offset this handle will ask for."""
        return self._state.offset

    # -- following --

    def _set_stream(self, stream: Optional[LineStream]) -> None:
        self._stream = stream

    def _follow(self, deadline: Optional[float]) -> None:
        with self._follow_lock:
            if self._state.exited:
                return
            follow(self._sandbox, self._state, deadline=deadline, on_stream=self._set_stream,
                   stopped=lambda: self._stopping)

    def _start_thread(self) -> None:
        def body() -> None:
            try:
                self._follow(None)
            except BaseException as e:  # noqa: BLE001 - handed to wait()
                self._thread_error = e

        self._thread = threading.Thread(target=body, name=f"brig-output-{self.pid}",
                                        daemon=True)
        self._thread.start()

    def wait(self, on_stdout: Optional[OutputHandler] = None,
             on_stderr: Optional[OutputHandler] = None,
             timeout: Optional[float] = None) -> CommandResult:
        """Waits for the process to exit and returns its result.

        Args:
            on_stdout, on_stderr: called with output (text) as it arrives. Output already seen
                by this handle is not replayed to them.
            timeout: seconds to wait (None: until it exits). When it passes,
                :class:`SandboxTimeoutError` is raised and the process keeps running; a later
                ``wait`` resumes.

        Raises:
            CommandExitError: it exited with a non-zero code or a signal killed it.
            SandboxTimeoutError: its own timeout killed it, or ``timeout`` passed.
            SandboxLostError: the sandbox ended meanwhile.
        """
        with self._state.lock:
            if on_stdout:
                self._state.stdout_handlers.append(on_stdout)
            if on_stderr:
                self._state.stderr_handlers.append(on_stderr)
        try:
            deadline = time.monotonic() + timeout if timeout is not None else None
            thread = self._thread
            if thread is not None and thread.is_alive():
                thread.join(timeout)
                if thread.is_alive():
                    raise SandboxTimeoutError(f"process {self.pid} did not exit in {timeout} s")
            if self._thread_error is not None and not self._state.exited:
                error, self._thread_error = self._thread_error, None
                self._thread = None
                raise error
            if not self._state.exited:
                self._stopping = False
                self._follow(deadline)
            return check_result(self._state.result())
        finally:
            with self._state.lock:
                if on_stdout and on_stdout in self._state.stdout_handlers:
                    self._state.stdout_handlers.remove(on_stdout)
                if on_stderr and on_stderr in self._state.stderr_handlers:
                    self._state.stderr_handlers.remove(on_stderr)

    def disconnect(self) -> None:
        """Stops following the output (the handle's thread ends); the process keeps running.
        ``wait`` still works afterwards and resumes from the offset reached."""
        self._stopping = True
        stream = self._stream
        if stream is not None:
            stream.close()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(10)

    # -- acting on the process --

    def kill(self) -> bool:
        """SIGKILL to its process group. True when sent, False when it had already exited."""
        return self._sandbox.commands.kill(self.pid)

    def signal(self, sig: Signal) -> None:
        """Sends a signal (number, name or signal.Signals) to its process group."""
        self._sandbox.commands.signal(self.pid, sig)

    def send_stdin(self, data: Union[str, bytes]) -> None:
        """Writes to its stdin (it must have been started with ``stdin=True``)."""
        self._sandbox.commands.send_stdin(self.pid, data)

    def close_stdin(self) -> None:
        """Closes its stdin (it reads EOF)."""
        self._sandbox.commands.close_stdin(self.pid)


__all__ = ["Commands", "CommandHandle", "OutputState", "check_result", "follow"]
