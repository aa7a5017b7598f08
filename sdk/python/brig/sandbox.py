"""``Sandbox``: create, find, connect to and manage brig sandboxes (docs/api.md,
"Sandboxes")."""

from __future__ import annotations

from datetime import datetime
from types import TracebackType
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union

from ._transport import LineStream, QueryValue, Transport, path_part
from .code import (Context, ContextLike, ErrorHandler, Execution, OutputHandler, ResultHandler,
                   contexts_path, iter_contexts, run_code)
from .commands import Commands
from .exceptions import BrigError, ConflictError, NotFoundError, SandboxLostError
from .files import Files
from .models import ENDED_STATES, SandboxInfo, SandboxMetrics
from .pty import Pty

_LIST_PAGE = 1000


class Sandbox:
    """A brig sandbox: an isolated Linux environment kept by ``brig serve``.

    Make one with :meth:`create` or attach to an existing one with :meth:`connect`. Used as a
    context manager, it is killed on exit::

        with Sandbox.create() as sb:
            print(sb.commands.run("echo hello").stdout)

    Configuration: ``api_url`` (default ``$BRIG_URL``, else http://127.0.0.1:7878) and
    ``api_key`` (default ``$BRIG_API_KEY``); ``request_timeout`` (seconds) bounds each plain
    request on the daemon's side (its default is 60).

    Attributes:
        commands: run and manage processes (:class:`~brig.commands.Commands`).
        files: read and write files (:class:`~brig.files.Files`).
        pty: interactive terminals (:class:`~brig.pty.Pty`).

    The code interpreter is on the sandbox itself: :meth:`run_code` and the code contexts
    (:meth:`create_code_context`, ...).
    """

    commands: Commands
    files: Files
    pty: Pty

    def __init__(self, sandbox_id: str, *, api_url: Optional[str] = None,
                 api_key: Optional[str] = None, request_timeout: Optional[float] = None,
                 info: Optional[SandboxInfo] = None,
                 _transport: Optional[Transport] = None) -> None:
        """Attaches to sandbox ``sandbox_id`` without asking the daemon anything; prefer
        :meth:`create` or :meth:`connect`."""
        self._sandbox_id = sandbox_id
        self._transport = _transport or Transport(api_url, api_key, request_timeout)
        self._info = info
        self.commands = Commands(self)
        self.files = Files(self)
        self.pty = Pty(self)

    def __repr__(self) -> str:
        return f"<Sandbox {self._sandbox_id} at {self._transport.api_url}>"

    # -- properties --

    @property
    def sandbox_id(self) -> str:
        """The sandbox's id (20 characters of ``[a-z0-9]``)."""
        return self._sandbox_id

    @property
    def id(self) -> str:
        """Same as :attr:`sandbox_id`."""
        return self._sandbox_id

    @property
    def api_url(self) -> str:
        """The daemon this sandbox is reached through."""
        return self._transport.api_url

    @property
    def info(self) -> Optional[SandboxInfo]:
        """The last :class:`SandboxInfo` the daemon sent (no request; see :meth:`get_info`)."""
        return self._info

    # -- class-level: create, connect, list --

    @classmethod
    def create(cls, template: str = "base", timeout: int = 300,
               envs: Optional[Mapping[str, str]] = None,
               metadata: Optional[Mapping[str, str]] = None, name: Optional[str] = None,
               cpus: Optional[float] = None, memory_mb: Optional[int] = None,
               disk_mb: Optional[int] = None, pids: Optional[int] = None,
               api_url: Optional[str] = None, api_key: Optional[str] = None,
               request_timeout: Optional[float] = None) -> "Sandbox":
        """Creates a sandbox and returns it once it is running.

        Args:
            template: only ``"base"`` exists.
            timeout: seconds of life (1–2592000); see :meth:`set_timeout`.
            envs: environment variables for every command.
            metadata: string key/values to find it by (:meth:`list`).
            name: makes it persistent: when a live sandbox of that name exists, that one is
                returned and nothing is created (the other arguments are ignored).
            cpus: CPU limit (0: none); memory_mb, disk_mb, pids: its limits.

        Raises:
            InvalidArgumentError: a value out of range. NotFoundError: unknown template.
            AuthenticationError: wrong API key.
        """
        body: Dict[str, Any] = {"template": template, "timeout": int(timeout)}
        if envs:
            body["env"] = dict(envs)
        if metadata:
            body["metadata"] = dict(metadata)
        if name is not None:
            body["name"] = name
        if cpus is not None:
            body["cpus"] = cpus
        if memory_mb is not None:
            body["memory_mb"] = int(memory_mb)
        if disk_mb is not None:
            body["disk_mb"] = int(disk_mb)
        if pids is not None:
            body["pids"] = int(pids)
        transport = Transport(api_url, api_key, request_timeout)
        try:
            answer = transport.request("POST", "/v1/sandboxes", json_body=body)
        except BaseException:
            transport.close()
            raise
        info = SandboxInfo.from_json(answer)
        return cls(info.id, info=info, _transport=transport)

    @classmethod
    def connect(cls, sandbox_id: str, api_url: Optional[str] = None,
                api_key: Optional[str] = None,
                request_timeout: Optional[float] = None) -> "Sandbox":
        """Attaches to an existing sandbox, resuming it when it is paused.

        Raises:
            NotFoundError: no such sandbox.
            SandboxLostError: it has ended (stopped or lost).
        """
        sandbox = cls(sandbox_id, api_url=api_url, api_key=api_key,
                      request_timeout=request_timeout)
        try:
            info = sandbox.get_info()
            if info.state in ENDED_STATES:
                raise SandboxLostError(
                    f"sandbox {sandbox_id} is {info.state}"
                    + (f" ({info.reason})" if info.reason else ""),
                    None, state=info.state, reason=info.reason)
            if info.state == "paused":
                sandbox.resume()
        except BaseException:
            sandbox.close()
            raise
        return sandbox

    @staticmethod
    def list(state: Union[str, Sequence[str], None] = None,
             metadata: Optional[Mapping[str, str]] = None, limit: Optional[int] = None,
             name: Optional[str] = None, api_url: Optional[str] = None,
             api_key: Optional[str] = None) -> List[SandboxInfo]:
        """Sandboxes known to the daemon, newest first, following pagination.

        Args:
            state: one state or several (e.g. ``["running", "paused"]``); None: all.
            metadata: only those whose metadata has all these key/values.
            limit: at most this many (None: all).
            name: only the one(s) of that name.
        """
        transport = Transport(api_url, api_key)
        found: List[SandboxInfo] = []
        cursor: Optional[str] = None
        try:
            while limit is None or len(found) < limit:
                query: Dict[str, QueryValue] = {}
                if state:
                    query["state"] = state if isinstance(state, str) else ",".join(state)
                if name is not None:
                    query["name"] = name
                for key, value in (metadata or {}).items():
                    query[f"metadata.{key}"] = value
                page = _LIST_PAGE if limit is None else min(_LIST_PAGE, limit - len(found))
                query["limit"] = page
                if cursor:
                    query["cursor"] = cursor
                answer = transport.request("GET", "/v1/sandboxes", query=query)
                found.extend(SandboxInfo.from_json(s) for s in answer.get("sandboxes", []))
                cursor = answer.get("next_cursor")
                if not cursor:
                    break
        finally:
            transport.close()
        return found if limit is None else found[:limit]

    # -- this sandbox --

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._transport.request(method, path, **kwargs)

    def _stream(self, method: str, path: str, **kwargs: Any) -> LineStream:
        return self._transport.stream(method, path, **kwargs)

    def _path(self, suffix: str = "") -> str:
        return f"/v1/sandboxes/{path_part(self._sandbox_id)}{suffix}"

    def _peek_state(self) -> Optional[Tuple[str, Optional[str]]]:
        """(state, reason), or None when the daemon cannot say."""
        try:
            info = self.get_info()
        except BrigError:
            return None
        return info.state, info.reason

    def _update(self, answer: Any) -> SandboxInfo:
        info = SandboxInfo.from_json(answer)
        self._info = info
        return info

    def get_info(self) -> SandboxInfo:
        """The sandbox as the daemon describes it now."""
        return self._update(self._call("GET", self._path()))

    def set_timeout(self, timeout: int) -> SandboxInfo:
        """The sandbox now ends ``timeout`` seconds from now (extends or shortens its life).
        Allowed while running or paused."""
        return self._update(self._call("POST", self._path("/timeout"),
                                       json_body={"timeout": int(timeout)}))

    def get_metrics(self, start: Optional[datetime] = None,
                    end: Optional[datetime] = None) -> List[SandboxMetrics]:
        """Its resource samples (taken every 5 s while it runs; the last hour is kept), oldest
        first, between ``start`` and ``end`` (default: the last hour)."""
        query: Dict[str, QueryValue] = {}
        if start is not None:
            query["start"] = int(start.timestamp() * 1000)
        if end is not None:
            query["end"] = int(end.timestamp() * 1000)
        answer = self._call("GET", self._path("/metrics"), query=query)
        return [SandboxMetrics.from_json(m) for m in answer.get("metrics", [])]

    def pause(self) -> SandboxInfo:
        """Freezes every process (memory, pids and open files are kept); its lifetime clock
        stops. A no-op when already paused."""
        return self._update(self._call("POST", self._path("/pause")))

    def resume(self) -> SandboxInfo:
        """Thaws a paused sandbox; its lifetime clock restarts. A no-op when running."""
        return self._update(self._call("POST", self._path("/resume")))

    def kill(self) -> bool:
        """Kills every process and removes the sandbox's writable layer. True when killed;
        False when it had already ended or is unknown."""
        try:
            self._call("DELETE", self._path())
        except (NotFoundError, SandboxLostError):
            return False
        except ConflictError:
            return False
        return True

    # -- code interpreter --

    def run_code(self, code: str, language: Optional[str] = None,
                 context: Optional[ContextLike] = None,
                 envs: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                 on_stdout: Optional[OutputHandler] = None,
                 on_stderr: Optional[OutputHandler] = None,
                 on_result: Optional[ResultHandler] = None,
                 on_error: Optional[ErrorHandler] = None,
                 request_timeout: Optional[float] = None) -> Execution:
        """Runs code in a stateful code context and returns its :class:`~brig.Execution`.

        The last expression's value is the main result (``execution.text``); ``display(...)``
        and matplotlib figures add results. An exception the code raises does not raise here: it
        is ``execution.error``.

        Args:
            code: the code.
            language: only ``"python"`` today; default that of ``context``, else ``"python"``.
            context: a :class:`~brig.Context` or its id (:meth:`create_code_context`). None: the
                language's default context (made on first use).
            envs: environment variables for this execution only.
            timeout: seconds after which the daemon interrupts the execution: it then returns
                with ``error.name == "KeyboardInterrupt"``, and the context keeps its state.
            on_stdout, on_stderr: called with each printed message (str) as it comes.
            on_result: called with each :class:`~brig.Result` as it comes.
            on_error: called with the :class:`~brig.ExecutionError`, if any.
            request_timeout: seconds the whole request may take; when it passes the daemon
                interrupts the execution as ``timeout`` does.

        Raises:
            NotFoundError: no such context (or it is not running). InvalidArgumentError: an
            unknown language. ConflictError: the sandbox is not running (e.g. paused).
            SandboxLostError: the sandbox ended. SandboxTimeoutError: the execution did not stop
            after its interrupt. ApiConnectionError: the stream broke (leaving interrupts the
            execution).
        """
        return run_code(self, code, language=language, context=context, envs=envs,
                        timeout=timeout, on_stdout=on_stdout, on_stderr=on_stderr,
                        on_result=on_result, on_error=on_error,
                        request_timeout=request_timeout)

    def create_code_context(self, language: str = "python", cwd: Optional[str] = None,
                            envs: Optional[Mapping[str, str]] = None) -> Context:
        """A new code context (a fresh interpreter; numpy, pandas and matplotlib already
        imported where installed), independent of the others.

        Args:
            language: ``"python"`` or ``"bash"`` (another raises InvalidArgumentError).
            cwd: its working directory (default the user's home).
            envs: its environment variables, over the sandbox's.
        """
        body: Dict[str, Any] = {"language": language}
        if cwd is not None:
            body["cwd"] = cwd
        if envs:
            body["env"] = dict(envs)
        return Context.from_json(self._call("POST", contexts_path(self), json_body=body))

    def list_code_contexts(self) -> List[Context]:
        """The sandbox's code contexts, including the default ones; those that ended have
        ``running`` False."""
        return list(iter_contexts(self._call("GET", contexts_path(self))))

    def restart_code_context(self, context: ContextLike) -> Context:
        """Replaces the context by a fresh one with the same id: its state is gone.
        NotFoundError when the sandbox has no such context."""
        return Context.from_json(self._call("POST", contexts_path(self, context, "/restart")))

    def fork_code_context(self, context: ContextLike) -> Context:
        """A new context that starts as a copy of this one's whole state (variables, loaded
        data), made in milliseconds without disturbing the original. Python contexts only
        (InvalidArgumentError otherwise); NotFoundError when it is not running."""
        return Context.from_json(self._call("POST", contexts_path(self, context, "/fork")))

    def remove_code_context(self, context: ContextLike) -> None:
        """Ends the context. NotFoundError when it is not running."""
        self._call("DELETE", contexts_path(self, context))

    def is_running(self) -> bool:
        """True when its state is ``running`` (False when paused, ended or unknown)."""
        try:
            return self.get_info().state == "running"
        except NotFoundError:
            return False

    def close(self) -> None:
        """Closes this object's idle keep-alive connections (the sandbox is not touched)."""
        self._transport.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        try:
            self.kill()
        except BrigError:
            if exc_type is None:
                raise
        finally:
            self.close()

