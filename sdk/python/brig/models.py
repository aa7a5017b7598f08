"""The data the SDK returns: sandboxes, processes, command results, file entries, events."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Dict, List, Mapping, Optional


def parse_time(value: Any) -> Optional[datetime]:
    """An API timestamp (``"2026-11-30T08:00:00.123Z"``) as an aware UTC datetime; ``None`` for
    ``None``. Unparseable text is returned as ``None`` rather than failing the whole call."""
    if not isinstance(value, str) or not value:
        return None
    text = value[:-1] if value.endswith("Z") else value
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed


class SandboxState(str, enum.Enum):
    """A sandbox's state. A ``str``: ``SandboxState.RUNNING == "running"``."""

    CREATING = "creating"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"
    STOPPED = "stopped"
    LOST = "lost"

    def __str__(self) -> str:
        return self.value


LIVE_STATES = ("creating", "running", "paused")
ENDED_STATES = ("stopping", "stopped", "lost")


@dataclass
class SandboxMetrics:
    """One resource sample of a sandbox (``GET /v1/sandboxes/{id}/metrics``): CPU use since the
    previous sample (100 = one core busy), memory, its writable layer's use, processes."""

    timestamp: Optional[datetime]
    cpu_percent: float
    cpu_usec: int
    memory_bytes: int
    memory_peak_bytes: int
    disk_used_bytes: int
    pids: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SandboxMetrics":
        return cls(timestamp=parse_time(data.get("timestamp")),
                   cpu_percent=float(data.get("cpu_percent", 0.0)),
                   cpu_usec=int(data.get("cpu_usec", 0)),
                   memory_bytes=int(data.get("memory_bytes", 0)),
                   memory_peak_bytes=int(data.get("memory_peak_bytes", 0)),
                   disk_used_bytes=int(data.get("disk_used_bytes", 0)),
                   pids=int(data.get("pids", 0)))


@dataclass
class SandboxInfo:
    """A sandbox as the daemon describes it (``GET /v1/sandboxes/{id}``).

    ``expires_at`` is when its lifetime timeout kills it (``None`` while paused, and once it
    ended); ``remaining_s`` is the lifetime left while paused. ``raw`` is the JSON object as
    received (it may hold fields newer than this SDK).
    """

    id: str
    name: Optional[str]
    template: str
    state: str
    reason: Optional[str]
    cpus: float
    memory_mb: int
    disk_mb: int
    pids: int
    env: Dict[str, str]
    metadata: Dict[str, str]
    created_at: Optional[datetime]
    expires_at: Optional[datetime]
    ended_at: Optional[datetime]
    remaining_s: Optional[float] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def sandbox_id(self) -> str:
        """The sandbox's id (E2B's name for ``id``)."""
        return self.id

    @property
    def envs(self) -> Dict[str, str]:
        """The sandbox's environment (E2B's name for ``env``)."""
        return self.env

    @property
    def started_at(self) -> Optional[datetime]:
        """When it was created (E2B's name)."""
        return self.created_at

    @property
    def end_at(self) -> Optional[datetime]:
        """When its lifetime ends (E2B's name for ``expires_at``)."""
        return self.expires_at

    @property
    def is_live(self) -> bool:
        """True while ``creating``, ``running`` or ``paused``."""
        return self.state in LIVE_STATES

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SandboxInfo":
        remaining = data.get("remaining_s")
        return cls(
            id=str(data.get("id", "")),
            name=data.get("name"),
            template=str(data.get("template", "")),
            state=str(data.get("state", "")),
            reason=data.get("reason"),
            cpus=float(data.get("cpus") or 0.0),
            memory_mb=int(data.get("memory_mb") or 0),
            disk_mb=int(data.get("disk_mb") or 0),
            pids=int(data.get("pids") or 0),
            env=dict(data.get("env") or {}),
            metadata=dict(data.get("metadata") or {}),
            created_at=parse_time(data.get("created_at")),
            expires_at=parse_time(data.get("expires_at")),
            ended_at=parse_time(data.get("ended_at")),
            remaining_s=float(remaining) if isinstance(remaining, (int, float)) else None,
            raw=dict(data),
        )


@dataclass
class CommandResult:
    """How a command ended.

    Attributes:
        exit_code: its exit code; when a signal killed it, ``-signal`` (as in
            :mod:`subprocess`).
        stdout: everything it wrote to stdout (bytes that are not UTF-8 are replaced by U+FFFD).
        stderr: the same for stderr.
        error: the daemon's error message(s), e.g. "executable not found", else ``None``.
        signal: the signal that killed it, else ``None``.
        timed_out: True when its own ``timeout`` killed it.
        pid: its pid inside the sandbox.
    """

    exit_code: int
    stdout: str = ""
    stderr: str = ""
    error: Optional[str] = None
    signal: Optional[int] = None
    timed_out: bool = False
    pid: Optional[int] = None

    @property
    def ok(self) -> bool:
        """True when it exited with code 0."""
        return self.exit_code == 0 and self.signal is None


@dataclass
class ProcessInfo:
    """A process in the sandbox's process list (running ones and the recent exited ones)."""

    pid: int
    argv: List[str]
    tag: str
    running: bool
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    timed_out: bool = False

    @property
    def cmd(self) -> str:
        """The executable (E2B's name)."""
        return self.argv[0] if self.argv else ""

    @property
    def args(self) -> List[str]:
        """The arguments after the executable (E2B's name)."""
        return self.argv[1:]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ProcessInfo":
        return cls(
            pid=int(data["pid"]),
            argv=[str(a) for a in data.get("argv") or []],
            tag=str(data.get("tag") or ""),
            running=bool(data.get("running")),
            exit_code=data.get("exit_code"),
            signal=data.get("signal"),
            timed_out=bool(data.get("timed_out", False)),
        )


class FileType(str, enum.Enum):
    """The type of a file-system entry. A ``str``: ``FileType.FILE == "file"``."""

    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value


@dataclass
class EntryInfo:
    """A file-system entry in the sandbox (``stat``, ``list``, and what writes return).

    ``mode`` is the permission bits as a number (``0o644`` = 420); ``permissions`` the
    ``ls -l`` string; ``symlink_target`` is set for symlinks (which stat/list do not follow).
    """

    name: str
    path: str
    type: FileType
    size: int
    mode: int
    permissions: str
    owner: str
    group: str
    modified_at: Optional[datetime]
    symlink_target: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_dir(self) -> bool:
        return self.type == FileType.DIR

    @property
    def is_file(self) -> bool:
        return self.type == FileType.FILE

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "EntryInfo":
        kind = str(data.get("type", "other"))
        try:
            file_type = FileType(kind)
        except ValueError:
            file_type = FileType.OTHER
        return cls(
            name=str(data.get("name", "")),
            path=str(data.get("path", "")),
            type=file_type,
            size=int(data.get("size") or 0),
            mode=int(data.get("mode") or 0),
            permissions=str(data.get("permissions") or ""),
            owner=str(data.get("owner") or ""),
            group=str(data.get("group") or ""),
            modified_at=parse_time(data.get("modified_at")),
            symlink_target=data.get("symlink_target"),
            raw=dict(data),
        )


class FilesystemEventType(str, enum.Enum):
    """What changed under a watched directory. A ``str``."""

    CREATE = "create"
    WRITE = "write"
    REMOVE = "remove"
    RENAME = "rename"
    CHMOD = "chmod"

    def __str__(self) -> str:
        return self.value


@dataclass
class FilesystemEvent:
    """A change under a watched directory: ``path`` is relative to the watched directory;
    ``is_dir`` says whether the entry is a directory. ``type`` is a
    :class:`FilesystemEventType` (or the raw string for a type newer than this SDK)."""

    type: Any
    path: str
    is_dir: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def name(self) -> str:
        """The changed entry's path relative to the watched directory (E2B's name)."""
        return self.path

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "FilesystemEvent":
        kind: Any = str(data.get("type", ""))
        try:
            kind = FilesystemEventType(kind)
        except ValueError:
            pass
        return cls(type=kind, path=str(data.get("path", "")), is_dir=bool(data.get("dir", False)),
                   raw=dict(data))
