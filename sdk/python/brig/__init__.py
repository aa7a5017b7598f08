"""brig: the Python SDK of brig, a self-hosted sandbox daemon (``brig serve``).

    from brig import Sandbox

    with Sandbox.create() as sb:                      # killed when the block ends
        sb.files.write("hello.py", "print('hi')")
        result = sb.commands.run("python3 hello.py")
        print(result.stdout)
        print(sb.run_code("x = 41\nx + 1").text)       # "42": a stateful code context

Configuration: ``BRIG_URL`` (default http://127.0.0.1:7878) and ``BRIG_API_KEY`` from the
environment, or the ``api_url=`` / ``api_key=`` arguments. Standard library only.
"""

from ._transport import DEFAULT_API_URL
from .code import Context, Execution, ExecutionError, Logs, Result
from .commands import CommandHandle, Commands
from .exceptions import (ApiConnectionError, AuthenticationError, AuthenticationException,
                         BrigError, CommandExitError, CommandExitException, ConflictError,
                         InvalidArgumentError, InvalidArgumentException, NotEnoughSpaceError,
                         NotEnoughSpaceException, NotFoundError, NotFoundException,
                         SandboxException, SandboxLostError, SandboxTimeoutError, ServerError,
                         TimeoutException)
from .files import Files, ReadStream, WatchHandle
from .models import (CommandResult, EntryInfo, FilesystemEvent, FilesystemEventType, FileType,
                     ProcessInfo, SandboxInfo, SandboxMetrics, SandboxState)
from .pty import Pty, PtyHandle
from .sandbox import Sandbox

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_API_URL",
    "Sandbox", "SandboxInfo", "SandboxState", "SandboxMetrics",
    "Commands", "CommandHandle", "CommandResult", "ProcessInfo",
    "Files", "EntryInfo", "FileType", "FilesystemEvent", "FilesystemEventType", "ReadStream",
    "WatchHandle",
    "Pty", "PtyHandle",
    "Execution", "Result", "Logs", "ExecutionError", "Context",
    "BrigError", "AuthenticationError", "InvalidArgumentError", "NotFoundError",
    "SandboxTimeoutError", "ConflictError", "SandboxLostError", "ServerError",
    "NotEnoughSpaceError", "ApiConnectionError", "CommandExitError",
    "SandboxException", "AuthenticationException", "InvalidArgumentException",
    "NotFoundException", "TimeoutException", "NotEnoughSpaceException",
    "CommandExitException",
]
