"""The code interpreter: stateful code contexts and their executions (docs/api.md, "Code
interpreter"). Shaped like E2B's code-interpreter SDK: ``sb.run_code(...)`` returns an
:class:`Execution` with its :class:`Result` objects, :class:`Logs` and :class:`ExecutionError`.

The methods live on :class:`~brig.Sandbox` (``run_code``, ``create_code_context``,
``list_code_contexts``, ``restart_code_context``, ``remove_code_context``); this module holds
the data they return and the execution stream's reader.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional,
                    Union)

from ._transport import StreamDropped, path_part
from .exceptions import (ApiConnectionError, BrigError, SandboxLostError, SandboxTimeoutError,
                         ServerError, error_for_status)
from .models import ENDED_STATES

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

#: Seconds the daemon gives an interrupted execution to stop before it ends the stream anyway.
INTERRUPT_GRACE_S = 5.0
#: Extra seconds the client waits beyond an execution's ``timeout`` for the daemon's answer.
_CLIENT_GRACE_S = 15.0

#: The MIME types of a result bundle and the :class:`Result` attribute each one is.
MIME_ATTRIBUTES = (
    ("text/plain", "text"),
    ("text/html", "html"),
    ("text/markdown", "markdown"),
    ("image/svg+xml", "svg"),
    ("image/png", "png"),
    ("image/jpeg", "jpeg"),
    ("application/pdf", "pdf"),
    ("text/latex", "latex"),
    ("application/json", "json"),
    ("application/javascript", "javascript"),
    ("application/vnd.dataframe+json", "data"),
    ("application/vnd.brig.chart+json", "chart"),
)
_KNOWN_MIME = {mime for mime, _ in MIME_ATTRIBUTES}


@dataclass
class Context:
    """A code context: a stateful interpreter in the sandbox (its variables, imports and
    functions last between executions). ``running`` is False once it ended."""

    id: str
    language: str
    pid: int
    running: bool
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Context":
        pid = data.get("pid")
        return cls(id=str(data.get("id", "")), language=str(data.get("language", "")),
                   pid=int(pid) if isinstance(pid, int) else -1,
                   running=bool(data.get("running", False)), raw=dict(data))


ContextLike = Union[str, Context]


def context_id(context: ContextLike) -> str:
    """The id of a context given as an id or a :class:`Context`."""
    if isinstance(context, Context):
        return context.id
    if isinstance(context, str) and context:
        return context
    raise TypeError(f"context must be a context id (str) or a Context, not {context!r}")


class Result:
    """One rich result of an execution: the last expression's value (``is_main_result``), a
    ``display(...)``, or a matplotlib figure. Its MIME bundle is exposed by format:

    ``text`` (text/plain, always), ``html``, ``markdown``, ``svg``, ``png``, ``jpeg`` and
    ``pdf`` (base64 ``str``), ``latex``, ``json``, ``javascript``, ``data`` (a DataFrame as
    ``{"columns", "index", "data", "dtypes"}``), ``chart`` (what a figure plots:
    ``{"type": "bar"|"line"|"scatter"|"pie"|"composite", "title", ..., "elements"}``); ``extra``
    holds other MIME types and ``raw`` the whole bundle. A format the object did not offer is
    ``None``.
    """

    text: Optional[str]
    html: Optional[str]
    markdown: Optional[str]
    svg: Optional[str]
    png: Optional[str]
    jpeg: Optional[str]
    pdf: Optional[str]
    latex: Optional[str]
    json: Optional[Any]
    javascript: Optional[str]
    data: Optional[Dict[str, Any]]
    chart: Optional[Dict[str, Any]]
    extra: Dict[str, Any]
    is_main_result: bool
    raw: Dict[str, Any]

    def __init__(self, data: Mapping[str, Any], is_main_result: bool = False) -> None:
        self.raw = dict(data)
        self.is_main_result = bool(is_main_result)
        for mime, attribute in MIME_ATTRIBUTES:
            setattr(self, attribute, self.raw.get(mime))
        self.extra = {k: v for k, v in self.raw.items() if k not in _KNOWN_MIME}

    def formats(self) -> List[str]:
        """The formats this result has besides ``text`` (which every result has), as attribute
        names (``"html"``, ``"png"``, ``"chart"``, ...), then the MIME types in ``extra``."""
        found = [attribute for mime, attribute in MIME_ATTRIBUTES
                 if attribute != "text" and self.raw.get(mime) is not None]
        return found + list(self.extra)

    def __getitem__(self, key: str) -> Any:
        """A format by attribute name (``result["png"]``) or MIME type
        (``result["image/png"]``)."""
        if "/" in key:
            return self.raw[key]
        if key in {attribute for _, attribute in MIME_ATTRIBUTES}:
            return getattr(self, key)
        raise KeyError(key)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Result):
            return NotImplemented
        return (self.raw, self.is_main_result) == (other.raw, other.is_main_result)

    def __repr__(self) -> str:
        text = self.text if self.text is None or len(self.text) <= 80 else self.text[:77] + "..."
        return (f"Result(text={text!r}, formats={self.formats()!r}, "
                f"is_main_result={self.is_main_result!r})")

    def __str__(self) -> str:
        return self.text or ""

    # Rich display of a Result itself in Jupyter (as E2B's results do).
    def _repr_html_(self) -> Optional[str]:
        return self.html

    def _repr_markdown_(self) -> Optional[str]:
        return self.markdown

    def _repr_svg_(self) -> Optional[str]:
        return self.svg

    def _repr_png_(self) -> Optional[str]:
        return self.png

    def _repr_jpeg_(self) -> Optional[str]:
        return self.jpeg

    def _repr_pdf_(self) -> Optional[str]:
        return self.pdf

    def _repr_latex_(self) -> Optional[str]:
        return self.latex

    def _repr_json_(self) -> Optional[Any]:
        return self.json


@dataclass
class Logs:
    """What an execution printed, one entry per message, in order."""

    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)


@dataclass
class ExecutionError:
    """An exception the execution raised: ``name`` (its class, e.g. ``"ValueError"``;
    ``"KeyboardInterrupt"`` when its ``timeout`` interrupted it; ``"ContextDied"`` when the
    context's process ended), ``value`` (its message) and ``traceback`` (formatted, one
    string)."""

    name: str
    value: str
    traceback: str

    @classmethod
    def from_json(cls, line: Mapping[str, Any]) -> "ExecutionError":
        tb = line.get("traceback") or []
        text = "".join(str(t) for t in tb) if isinstance(tb, list) else str(tb)
        return cls(name=str(line.get("name", "")), value=str(line.get("value", "")),
                   traceback=text)

    def __str__(self) -> str:
        return f"{self.name}: {self.value}" if self.value else self.name


@dataclass
class Execution:
    """An execution's outcome: its ``results``, ``logs``, ``error`` (None when it did not
    raise) and ``execution_count`` (how many executions its context has run, this one
    included; None when the context died before saying)."""

    results: List[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None

    @property
    def text(self) -> Optional[str]:
        """The main result's (the last expression's) text, or None when there is none."""
        for result in self.results:
            if result.is_main_result:
                return result.text
        return None


OutputHandler = Callable[[str], Any]
ResultHandler = Callable[[Result], Any]
ErrorHandler = Callable[[ExecutionError], Any]


def code_body(code: str, *, language: Optional[str], context: Optional[ContextLike],
              envs: Optional[Mapping[str, str]], timeout: Optional[float]) -> Dict[str, Any]:
    if not isinstance(code, str):
        raise TypeError(f"code must be a str, not {type(code).__name__}")
    body: Dict[str, Any] = {"code": code}
    if context is not None:
        body["context"] = context_id(context)
        if isinstance(context, Context) and language is None and context.language:
            language = context.language
    if language is not None:
        body["language"] = language
    if envs:
        body["env"] = dict(envs)
    if timeout:
        body["timeout"] = float(timeout)
    return body


def run_code(sandbox: "Sandbox", code: str, language: Optional[str] = None,
             context: Optional[ContextLike] = None, envs: Optional[Mapping[str, str]] = None,
             timeout: Optional[float] = None, on_stdout: Optional[OutputHandler] = None,
             on_stderr: Optional[OutputHandler] = None,
             on_result: Optional[ResultHandler] = None,
             on_error: Optional[ErrorHandler] = None,
             request_timeout: Optional[float] = None) -> Execution:
    """See :meth:`brig.Sandbox.run_code`."""
    body = code_body(code, language=language, context=context, envs=envs, timeout=timeout)
    # The daemon answers with the execution's first line: a quiet execution keeps the headers
    # waiting. Wait as long as the daemon may take (no limit without a timeout).
    limits = [t for t in (timeout, request_timeout) if t]
    header_timeout = (min(limits) + INTERRUPT_GRACE_S + _CLIENT_GRACE_S) if limits else None
    stream = sandbox._stream("POST", sandbox._path("/code"), json_body=body,
                             request_timeout=request_timeout, header_timeout=header_timeout)
    execution = Execution()
    with stream:
        try:
            for line in stream:
                if _feed(sandbox, execution, line, on_stdout, on_stderr, on_result, on_error):
                    return execution
        except StreamDropped as e:
            raise ApiConnectionError(f"the execution's stream broke (the execution was "
                                     f"interrupted): {e.message}") from e
    raise ApiConnectionError("the execution's stream ended before its end line (the execution "
                             "was interrupted)")


def _feed(sandbox: "Sandbox", execution: Execution, line: Mapping[str, Any],
          on_stdout: Optional[OutputHandler], on_stderr: Optional[OutputHandler],
          on_result: Optional[ResultHandler], on_error: Optional[ErrorHandler]) -> bool:
    """Adds one stream line to ``execution`` and calls its handler; True when it was the last
    line."""
    kind = line.get("type")
    if kind in ("stdout", "stderr"):
        text = str(line.get("text", ""))
        if kind == "stdout":
            execution.logs.stdout.append(text)
            if on_stdout is not None:
                on_stdout(text)
        else:
            execution.logs.stderr.append(text)
            if on_stderr is not None:
                on_stderr(text)
    elif kind == "result":
        result = Result(line.get("data") or {}, bool(line.get("main", False)))
        execution.results.append(result)
        if on_result is not None:
            on_result(result)
    elif kind == "error":
        if "code" in line and "name" not in line:
            _raise_stream_error(sandbox, line)
        error = ExecutionError.from_json(line)
        execution.error = error
        if on_error is not None:
            on_error(error)
        if error.name == "ContextDied":
            return True  # the context's process ended: nothing follows
    elif kind == "end":
        count = line.get("execution_count")
        execution.execution_count = int(count) if isinstance(count, int) else None
        return True
    return False


def _raise_stream_error(sandbox: "Sandbox", line: Mapping[str, Any]) -> None:
    """The stream's own error line (``{"type": "error", "code", "message"}``) as an exception."""
    code = int(line.get("code") or 500)
    message = str(line.get("message") or "stream error")
    if code == 408:
        raise SandboxTimeoutError(f"the execution: {message}", 408)
    if code == 503:
        info = sandbox._peek_state()
        if info is not None and info[0] in ENDED_STATES:
            raise SandboxLostError(
                f"sandbox {sandbox.sandbox_id} is {info[0]}"
                + (f" ({info[1]})" if info[1] else "") + f": {message}",
                503, state=info[0], reason=info[1])
        raise ServerError(message, 503)
    raise error_for_status(code, message)


def contexts_path(sandbox: "Sandbox", context: Optional[ContextLike] = None,
                  suffix: str = "") -> str:
    path = sandbox._path("/contexts")
    if context is not None:
        path += "/" + path_part(context_id(context))
    return path + suffix


def iter_contexts(answer: Any) -> Iterator[Context]:
    if not isinstance(answer, Mapping):
        raise BrigError(f"unexpected answer for the context list: {answer!r}")
    for c in answer.get("contexts") or []:
        yield Context.from_json(c)
