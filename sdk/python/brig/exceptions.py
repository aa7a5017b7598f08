"""Exceptions raised by the brig SDK.

Every error the daemon answers is ``{"code": <HTTP status>, "message": "..."}``; the SDK raises
the matching subclass of :class:`BrigError`, with ``.status`` (the HTTP status, or ``None`` when
the error did not come from an HTTP answer) and ``.message`` (the server's message).

=========================  ==============================================================
exception                  when
=========================  ==============================================================
AuthenticationError        401: no or wrong API key
InvalidArgumentError       400 (bad request) and 413 (body over 1 MiB), 405
NotFoundError              404: no such sandbox, process, file or route
SandboxTimeoutError        408 (a request timeout passed), a command killed by its own
                           timeout, or no answer from the daemon in time
ConflictError              409: the sandbox (or process) is in the wrong state, e.g. paused
SandboxLostError           the sandbox is ``stopped``/``stopping``/``lost``: it ended (killed,
                           timed out, out of memory) while you were using it
NotEnoughSpaceError        507: a file write does not fit in the sandbox's disk
ServerError                any other 5xx
ApiConnectionError         the daemon cannot be reached (connection refused, reset, ...)
CommandExitError           a command exited with a non-zero code or was killed by a signal
=========================  ==============================================================

Aliases with E2B's names (``SandboxException``, ``TimeoutException``, ...) are provided for
code written against E2B's SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # pragma: no cover
    from .models import CommandResult


class BrigError(Exception):
    """Base class of every error the SDK raises.

    Attributes:
        status: the HTTP status of the answer (``None`` when not from an HTTP answer).
        message: the server's message (or the SDK's own explanation).
    """

    status: Optional[int]
    message: str

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        Exception.__init__(self, message)
        self.message = message
        self.status = status

    def __str__(self) -> str:
        if self.status is not None:
            return f"{self.message} (HTTP {self.status})"
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status={self.status!r})"

    def __reduce__(self) -> Any:
        return (type(self), (self.message, self.status))


class AuthenticationError(BrigError):
    """401: the API key is missing or wrong."""


class InvalidArgumentError(BrigError):
    """400 (malformed request, unknown field, value out of range), 405 or 413 (body too big)."""


class NotFoundError(BrigError):
    """404: no such sandbox, process, file or route."""


class SandboxTimeoutError(BrigError, TimeoutError):
    """A timeout passed: the daemon's request timeout (408), a command's own ``timeout`` (its
    process group was killed), or the daemon did not answer within the client's wait.

    Also an instance of the builtin :class:`TimeoutError`. ``result`` is the command's
    :class:`~brig.CommandResult` when a command timed out, else ``None``.
    """

    result: Optional["CommandResult"]

    def __init__(self, message: str, status: Optional[int] = None,
                 result: Optional["CommandResult"] = None) -> None:
        BrigError.__init__(self, message, status)
        # OSError's own fields, filled in a way that reads well.
        self.args = (message,)
        self.result = result

    def __str__(self) -> str:
        return BrigError.__str__(self)

    def __reduce__(self) -> Any:
        return (type(self), (self.message, self.status, self.result))


class ConflictError(BrigError):
    """409: the sandbox or process is in the wrong state for the action (the message names the
    state), e.g. running a command in a paused sandbox, or writing to a closed stdin."""


class SandboxLostError(BrigError):
    """The sandbox is gone: it is ``stopped``, ``stopping`` or ``lost`` (killed, its lifetime
    timeout passed, out of memory, or found dead when the daemon restarted), possibly while you
    were using it. ``state`` and ``reason`` say what the daemon knows, when known."""

    state: Optional[str]
    reason: Optional[str]

    def __init__(self, message: str, status: Optional[int] = None,
                 state: Optional[str] = None, reason: Optional[str] = None) -> None:
        super().__init__(message, status)
        self.state = state
        self.reason = reason

    def __reduce__(self) -> Any:
        return (type(self), (self.message, self.status, self.state, self.reason))


class ServerError(BrigError):
    """5xx: the host failed to do it (500), or the daemon is shutting down, at its connection
    limit, or the sandbox's agent does not answer (503)."""


class NotEnoughSpaceError(ServerError):
    """507: the write does not fit in the sandbox's ``disk_mb``; the old file is kept."""


class ApiConnectionError(BrigError):
    """The daemon could not be reached or dropped the connection (``status`` is ``None``)."""


class CommandExitError(BrigError):
    """A command exited with a non-zero code, or was killed by a signal.

    ``result`` is the whole :class:`~brig.CommandResult`; ``exit_code``, ``stdout``,
    ``stderr``, ``error`` and ``signal`` are shortcuts to its fields.
    """

    result: "CommandResult"

    def __init__(self, result: "CommandResult") -> None:
        if result.signal is not None:
            what = f"command was killed by signal {result.signal}"
        else:
            what = f"command exited with code {result.exit_code}"
        if result.error:
            what += f": {result.error}"
        elif result.stderr.strip():
            tail = result.stderr.strip().splitlines()[-1]
            what += f": {tail[:500]}"
        super().__init__(what, None)
        self.result = result

    def __reduce__(self) -> Any:
        return (type(self), (self.result,))

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    @property
    def stdout(self) -> str:
        return self.result.stdout

    @property
    def stderr(self) -> str:
        return self.result.stderr

    @property
    def error(self) -> Optional[str]:
        return self.result.error

    @property
    def signal(self) -> Optional[int]:
        return self.result.signal


# E2B's names, for code written against its SDK.
SandboxException = BrigError
AuthenticationException = AuthenticationError
InvalidArgumentException = InvalidArgumentError
NotFoundException = NotFoundError
TimeoutException = SandboxTimeoutError
NotEnoughSpaceException = NotEnoughSpaceError
CommandExitException = CommandExitError


def error_for_status(status: int, message: str) -> BrigError:
    """The exception for an HTTP error answer (``status``, the server's ``message``)."""
    if status == 401:
        return AuthenticationError(message, status)
    if status == 404:
        return NotFoundError(message, status)
    if status in (400, 405, 413):
        return InvalidArgumentError(message, status)
    if status == 408:
        return SandboxTimeoutError(message, status)
    if status == 409:
        state = _ended_state(message)
        if state is not None:
            return SandboxLostError(message, status, state=state)
        return ConflictError(message, status)
    if status == 507:
        return NotEnoughSpaceError(message, status)
    if status >= 500:
        return ServerError(message, status)
    return BrigError(message, status)


def _ended_state(message: str) -> Optional[str]:
    """The state a 409 message names when it is one of an ended sandbox ("... sandbox X: it is
    stopped"), else None."""
    marker = "sandbox "
    if marker not in message:
        return None
    for state in ("stopped", "stopping", "lost"):
        if message.rstrip().endswith(": it is " + state):
            return state
    return None
