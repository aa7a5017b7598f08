"""Interactive terminals in a sandbox: ``sandbox.pty`` (a background command run on a
pseudo-terminal; docs/api.md, the ``pty`` field and the resize route)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Optional, Sequence, Union

from .commands import CommandHandle, Commands, DataHandler
from .exceptions import NotFoundError
from .models import CommandResult

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

DEFAULT_TERM = "xterm-256color"


class PtyHandle(CommandHandle):
    """A process on a pseudo-terminal. ``on_data`` (given to :meth:`Pty.create`) receives what
    the terminal shows, as bytes, from a reader thread of the handle's; :attr:`output` holds it
    all. Type into it with :meth:`send_input`."""

    def __init__(self, sandbox: "Sandbox", pid: int, tag: Optional[str] = None,
                 on_data: Optional[DataHandler] = None) -> None:
        super().__init__(sandbox, pid, tag=tag, on_data=on_data)

    @property
    def output(self) -> bytes:
        """Everything the terminal showed so far (as seen by the reader thread or ``wait``)."""
        return bytes(self._state.stdout)

    def send_input(self, data: Union[str, bytes]) -> None:
        """Types ``data`` into the terminal (e.g. ``"ls\\n"``, or ``b"\\x03"`` for Ctrl-C)."""
        self._sandbox.pty.send_input(self.pid, data)

    def resize(self, rows: int, cols: int) -> None:
        """Sets the terminal's size (the process gets SIGWINCH)."""
        self._sandbox.pty.resize(self.pid, rows, cols)

    def wait(self, on_stdout: None = None, on_stderr: None = None,  # type: ignore[override]
             timeout: Optional[float] = None) -> CommandResult:
        """Waits for the process to exit; its ``stdout`` is everything the terminal showed.
        Raises CommandExitError for a non-zero exit (as commands do), SandboxTimeoutError when
        ``timeout`` passes first."""
        return super().wait(timeout=timeout)


class Pty:
    """Create and drive pseudo-terminals: ``sandbox.pty``."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sandbox = sandbox

    def create(self, rows: int = 24, cols: int = 80,
               cmd: Union[str, Sequence[str]] = "/bin/bash",
               envs: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
               user: Optional[str] = None, on_data: Optional[DataHandler] = None,
               timeout: Optional[float] = None, tag: Optional[str] = None) -> PtyHandle:
        """Starts ``cmd`` on a new ``rows`` x ``cols`` terminal (its controlling terminal, stdin,
        stdout and stderr) and returns at once.

        Args:
            cmd: a string run as ``/bin/bash -l -c <cmd>``, or an argv list run directly
                (e.g. ``["/bin/bash", "--norc", "-i"]``).
            envs: environment over the sandbox's; ``TERM`` defaults to xterm-256color.
            cwd, user, timeout, tag: as for :meth:`Commands.run`.
            on_data: called with each piece of terminal output (bytes), from a reader thread.
        """
        env = {"TERM": DEFAULT_TERM}
        env.update(envs or {})
        body = Commands._body(cmd, envs=env, cwd=cwd, user=user, timeout=timeout, stdin=False,
                              tag=tag, background=True,
                              pty={"rows": int(rows), "cols": int(cols)})
        answer = self._sandbox._call("POST", self._sandbox.commands._path(), json_body=body)
        return PtyHandle(self._sandbox, int(answer["pid"]), tag=answer.get("tag"),
                         on_data=on_data)

    def connect(self, pid: int, on_data: Optional[DataHandler] = None) -> PtyHandle:
        """A handle on a terminal process started earlier. Its output is replayed from the
        start to ``on_data``."""
        if not any(p.pid == pid for p in self._sandbox.commands.list()):
            raise NotFoundError(f"no process {pid} in sandbox {self._sandbox.sandbox_id}", 404)
        return PtyHandle(self._sandbox, int(pid), on_data=on_data)

    def send_input(self, pid: int, data: Union[str, bytes]) -> None:
        """Types ``data`` into the terminal of process ``pid``."""
        self._sandbox.commands.send_stdin(pid, data)

    def resize(self, pid: int, rows: int, cols: int) -> None:
        """Sets the terminal's size; InvalidArgumentError when ``pid`` has no terminal."""
        self._sandbox._call("POST", self._sandbox.commands._path(f"/{int(pid)}/resize"),
                            json_body={"rows": int(rows), "cols": int(cols)})

    def kill(self, pid: int) -> bool:
        """SIGKILL to the terminal's process group: True when sent, False when it had exited."""
        return self._sandbox.commands.kill(pid)
