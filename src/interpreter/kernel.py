"""brig's code interpreter kernel (docs/interpreter.md).

Runs inside a sandbox as the sandbox user, started by brig's agent; never by hand.

    kernel.py zygote    Imports the heavy libraries once (numpy, pandas, matplotlib when
                        present), then waits on its stdin, a SOCK_SEQPACKET socket from the
                        agent, for fork requests: each brings the new context's stdin, stdout
                        and stderr as descriptors, and gets back the context's pid. A context is
                        a copy-on-write fork of this process, so it starts with everything
                        imported, in milliseconds.

A context reads execution requests as JSON lines on stdin and writes its messages as JSON lines
on stdout, every one tagged with the request's id:

    request   {"id": "x", "code": "...", "env": {"K": "V"}}
    messages  {"id", "type": "stdout"|"stderr", "text"}
              {"id", "type": "result", "data": {mime: value}, "main": bool}
              {"id", "type": "error", "name", "value", "traceback": [lines]}
              {"id", "type": "end", "execution_count": N}

Binary MIME values (image/png, image/jpeg, application/pdf) are base64. What the user's code
writes to file descriptors 1 and 2 (subprocesses, C libraries) is relayed as stdout/stderr
messages; the protocol has a descriptor of its own.
"""

import ast
import base64
import io
import json
import os
import signal
import socket
import sys
import threading
import traceback

PRELOAD = ("numpy", "pandas", "matplotlib", "matplotlib.pyplot")
MAX_TEXT = 1 << 20  # a longer stream message is cut, with a marker


def preload():
    os.environ.setdefault("MPLBACKEND", "Agg")
    for name in PRELOAD:
        try:
            __import__(name)
        except Exception:  # not installed, or broken: contexts do without
            pass


# ---- zygote, and forks ----

def zygote():
    preload()
    control = socket.socket(fileno=0)
    spare = Spare(control)
    serve_forks(control, lambda request: Context(request).serve(), spare)


class Spare:
    """A context made ahead of time: a fork of the zygote that already left it and waits for
    its descriptors. Handing it out is one message, so a new context costs no fork on the
    request's path; the next spare is forked after the answer."""

    def __init__(self, control):
        self.control = control
        self.ready = None  # (pid, socket to it)
        self.make()

    def make(self):
        ours, its = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

        def wait_for_work(_):
            ours.close()
            message, fds, _, _ = socket.recv_fds(its, 65536, 4)
            if not message or len(fds) != 4:
                os._exit(0)  # the zygote went away, or sent nothing usable
            take_descriptors(fds)
            Context(json.loads(message)).serve()

        pid = spawn(self.control, [], {}, wait_for_work)
        its.close()
        self.ready = (pid, ours)

    def hand_out(self, fds, request):
        """Gives the spare its descriptors and request; returns its pid."""
        pid, sock = self.ready
        self.ready = None
        socket.send_fds(sock, [json.dumps(request).encode()], fds)
        sock.close()
        return pid


def take_descriptors(fds):
    """stdin, stdout, stderr and the fork-request socket become descriptors 0-3."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 3:
            os.close(fd)


def serve_forks(control, become, spare=None):
    """Answers fork requests on `control`, a SOCK_SEQPACKET socket from the agent. Each brings
    the new process's stdin, stdout, stderr and control socket as descriptors, and gets back its
    pid; in the new process, become(request) runs and never returns."""
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(control, 65536, 4)
        except InterruptedError:
            continue
        except OSError:
            return
        if not message:
            return  # the agent is gone
        try:
            request = json.loads(message)
            if len(fds) != 4:
                pid = -1
            elif spare is not None:
                pid = spare.hand_out(fds, request)
            else:
                pid = spawn(control, fds, request, become)
        except Exception as e:  # answer, never die: the agent waits for a reply
            pid = -1
            print(f"kernel: fork failed: {e!r}", file=sys.__stderr__, flush=True)
        for fd in fds:
            os.close(fd)
        control.send(json.dumps({"pid": pid}).encode())
        if spare is not None:
            spare.make()


def spawn(control, fds, request, become):
    """Double fork: the new process is orphaned to the sandbox's PID 1 (the agent), which reaps
    it and reports its exit like any process's. Returns its pid."""
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        grandchild = os.fork()
        if grandchild == 0:
            os.close(w)
            control.detach()  # its descriptor is about to be replaced
            os.setsid()  # its own process group: an interrupt reaches it alone
            signal.signal(signal.SIGINT, signal.default_int_handler)  # the zygote ignores it
            if fds:
                take_descriptors(fds)
            code = 0
            try:
                become(request)
            except BaseException:
                code = 1
            os._exit(code)
        os.write(w, str(grandchild).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 32):
        data += chunk
    os.close(r)
    # The middle process is exiting (tearing down its copy of this address space takes a
    # while): reap it later, not on the new context's critical path.
    reap_later(child)
    return int(data)


_unreaped = []


def reap_later(pid):
    _unreaped.append(pid)
    for p in list(_unreaped):
        try:
            done, _ = os.waitpid(p, os.WNOHANG)
        except ChildProcessError:
            done = p
        if done:
            _unreaped.remove(p)


# ---- context ----

class Context:
    def __init__(self, request):
        self.language = request.get("language") or "python"
        self.count = 0
        if request.get("cwd"):
            os.chdir(request["cwd"])
        os.environ.update(request.get("env") or {})
        self.attach()
        self.namespace = {"__name__": "__main__", "__builtins__": __builtins__,
                          "display": self.display}
        self.bash = {"bash": Bash, "javascript": Node}.get(self.language, lambda: None)()

    def attach(self):
        """Takes over descriptors 0-3 as this context's: requests on 0, the protocol on a copy
        of 1, fds 1 and 2 relayed as messages, fork requests on 3."""
        self.lock = threading.Lock()
        self.current = None
        self.proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        self.relay_lock = threading.Lock()
        self.relays = []
        for fd, name in ((1, "stdout"), (2, "stderr")):
            r, w = os.pipe()
            os.dup2(w, fd)
            os.close(w)
            os.set_blocking(r, False)
            self.relays.append((r, name))
            threading.Thread(target=self.relay, args=(r, name), daemon=True).start()
        sys.stdout = Stream(self, "stdout")
        sys.stderr = Stream(self, "stderr")
        threading.Thread(target=serve_forks, args=(socket.socket(fileno=3), self.become_copy),
                         daemon=True).start()

    def become_copy(self, request):
        """In a fork of this context: the same state, its own descriptors."""
        if self.bash:
            os._exit(3)  # a bash context's shell cannot be shared
        self.attach()
        self.serve()

    def emit(self, message):
        if message["type"] not in ("stdout", "stderr"):
            for stream in (sys.stdout, sys.stderr):  # what was printed comes first
                if isinstance(stream, Stream):
                    stream.flush()
        message["id"] = self.current
        line = json.dumps(message, default=str)
        with self.lock:
            self.proto.write(line + "\n")

    def relay(self, fd, name):
        import select
        while True:
            select.select([fd], [], [])
            if not self.drain(fd, name):
                return

    def drain(self, fd, name):
        """Relays what is in a pipe now; False at its end."""
        with self.relay_lock:
            while True:
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    return True
                except OSError:
                    return False
                if not data:
                    return False
                self.emit({"type": name, "text": data.decode("utf-8", "replace")})

    def serve(self):
        stdin = io.TextIOWrapper(io.FileIO(0, closefd=False), encoding="utf-8")
        while True:
            try:
                line = stdin.readline()
            except KeyboardInterrupt:  # an interrupt between executions: nothing to stop
                continue
            if not line:
                return
            try:
                request = json.loads(line)
            except ValueError:
                continue
            self.execute(request)

    def execute(self, request):
        self.current = request.get("id")
        self.count += 1
        saved = {k: os.environ.get(k) for k in (request.get("env") or {})}
        os.environ.update(request.get("env") or {})
        try:
            if self.bash:
                self.bash.run(self, request.get("code", ""))
            else:
                self.run(request.get("code", ""))
        except KeyboardInterrupt:
            self.error_from(*sys.exc_info())
        except Exception:  # the language's process failed: say so, keep serving
            self.error_from(*sys.exc_info())
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            sys.stdout.flush()
            sys.stderr.flush()
            # What subprocesses wrote is in the pipes by now: it belongs to this execution.
            for fd, name in self.relays:
                self.drain(fd, name)
            self.emit({"type": "end", "execution_count": self.count})

    def run(self, code):
        try:
            tree = ast.parse(code, "<cell>", "exec")
        except SyntaxError:
            self.error_from(*sys.exc_info(), skip=0)
            return
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        try:
            exec(compile(tree, "<cell>", "exec"), self.namespace)
            if last is not None:
                value = eval(compile(last, "<cell>", "eval"), self.namespace)
                if value is not None:
                    self.namespace["_"] = value
                    self.display(value, main=True)
            self.show_figures()
        except KeyboardInterrupt:
            raise
        except BaseException:
            self.show_figures()
            self.error_from(*sys.exc_info())

    def error_from(self, kind, value, tb, skip=1):
        frames = traceback.format_exception(kind, value, tb)
        # Drop the kernel's own frames: the traceback starts at the user's cell.
        lines = [frames[0]] + [f for f in frames[1:] if "kernel.py" not in f]
        self.emit({"type": "error", "name": kind.__name__, "value": str(value),
                   "traceback": lines})

    # -- rich results --

    def display(self, *objects, main=False):
        for obj in objects:
            data = bundle(obj)
            if data:
                self.emit({"type": "result", "data": data, "main": main})

    def show_figures(self):
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        for number in plt.get_fignums():
            figure = plt.figure(number)
            self.display(figure)
            plt.close(figure)


class Bash:
    """A bash context: one interactive bash (so an interrupt stops the command, not the shell)
    keeps variables, functions and the working directory between executions. Its output goes
    to the context's relayed descriptors; each execution ends by writing its status to a pipe
    of the kernel's own."""

    def __init__(self):
        import subprocess
        self.status_r, status_w = os.pipe()
        self.proc = subprocess.Popen(
            ["/bin/bash", "--norc", "--noprofile", "--noediting", "-i"], stdin=subprocess.PIPE,
            stdout=1, stderr=2, pass_fds=(status_w,), start_new_session=False,
            env=dict(os.environ, PS1="", PS2="", BRIG_STATUS_FD=str(status_w)))
        os.close(status_w)
        self.status = os.fdopen(self.status_r, "r")

    def run(self, context, code):
        script = code + '\n__brig_status=$?; echo "$__brig_status" >&"$BRIG_STATUS_FD"\n'
        self.proc.stdin.write(script.encode())
        self.proc.stdin.flush()
        try:
            line = self.status.readline()
        except KeyboardInterrupt:
            # bash got the interrupt too; it reports the stopped command's status, which is
            # this execution's, not the next one's.
            self.status.readline()
            raise
        if not line:
            raise RuntimeError("bash exited")
        status = int(line.strip() or 0)
        if status != 0:
            context.emit({"type": "error", "name": "ExitCode", "value": str(status),
                          "traceback": []})


class Node:
    """A JavaScript context: one node process running kernel.js keeps the global scope between
    executions. Its console output goes to the context's relayed descriptors; results, errors
    and the end of each execution come back on a pipe of the kernel's own."""

    def __init__(self):
        self.start()

    def start(self):
        import subprocess
        self.results_r, results_w = os.pipe()
        self.proc = subprocess.Popen(
            ["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel.js")],
            stdin=subprocess.PIPE, stdout=1, stderr=2, pass_fds=(results_w,),
            env=dict(os.environ, BRIG_RESULTS_FD=str(results_w)))
        os.close(results_w)
        self.results = os.fdopen(self.results_r, "r")

    def run(self, context, code):
        self.proc.stdin.write((json.dumps({"code": code}) + "\n").encode())
        self.proc.stdin.flush()
        try:
            self.forward(context)
        except KeyboardInterrupt:
            # node got the interrupt too: the cell stops and reports it, or node ends, and a
            # fresh one takes its place (the context's JavaScript state is then gone).
            try:
                self.forward(context)
            except RuntimeError:
                self.proc.wait()
                self.results.close()
                self.start()
                context.emit({"type": "stderr",
                              "text": "[brig: the interrupt ended node; the JavaScript state "
                                      "was reset]\n"})
            raise

    def forward(self, context):
        while True:
            line = self.results.readline()
            if not line:
                raise RuntimeError("node exited")
            message = json.loads(line)
            if message.get("type") == "done":
                return
            context.emit(message)


class Stream(io.TextIOBase):
    """sys.stdout / sys.stderr of a context: every write becomes a message."""

    def __init__(self, context, name):
        self.context, self.name = context, name
        self.held = ""  # up to the last newline: one message per line or flush, not per write

    def writable(self):
        return True

    def write(self, text):
        if not text:
            return 0
        self.held += text
        if len(self.held) > MAX_TEXT:
            cut = len(self.held) - MAX_TEXT
            self.held = self.held[:MAX_TEXT] + f"\n[brig: {cut} characters cut]\n"
            self.flush()
        elif "\n" in text:
            end = self.held.rfind("\n") + 1
            line, self.held = self.held[:end], self.held[end:]
            self.context.emit({"type": self.name, "text": line})
        return len(text)

    def flush(self):
        if self.held:
            text, self.held = self.held, ""
            self.context.emit({"type": self.name, "text": text})

    def fileno(self):
        return 1 if self.name == "stdout" else 2

    @property
    def buffer(self):
        """Bytes written here are text to the reader (undecodable bytes replaced)."""
        return BinaryStream(self)


class BinaryStream(io.RawIOBase):
    def __init__(self, text):
        self.text = text

    def writable(self):
        return True

    def write(self, data):
        self.text.write(bytes(data).decode("utf-8", "replace"))
        return len(data)

    def flush(self):
        self.text.flush()


BINARY = {"image/png", "image/jpeg", "application/pdf"}
REPR_METHODS = (("_repr_html_", "text/html"), ("_repr_markdown_", "text/markdown"),
                ("_repr_svg_", "image/svg+xml"), ("_repr_png_", "image/png"),
                ("_repr_jpeg_", "image/jpeg"), ("_repr_latex_", "text/latex"),
                ("_repr_json_", "application/json"), ("_repr_pdf_", "application/pdf"))


def encode(mime, value):
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if mime in BINARY and isinstance(value, str):
        return value  # already base64, as IPython's convention has it
    return value


def bundle(obj):
    """The Jupyter-style MIME bundle of an object."""
    data = {}
    figure = figure_bundle(obj)
    if figure:
        return figure
    method = getattr(obj, "_repr_mimebundle_", None)
    if callable(method):
        try:
            b = method()
            if isinstance(b, tuple):
                b = b[0]
            data.update({k: encode(k, v) for k, v in (b or {}).items()})
        except Exception:
            pass
    for name, mime in REPR_METHODS:
        if mime in data or isinstance(obj, type):
            continue
        method = getattr(obj, name, None)
        if callable(method):
            try:
                value = method()
            except Exception:
                continue
            if isinstance(value, tuple):
                value = value[0]
            if value is not None:
                data[mime] = encode(mime, value)
    table = dataframe_data(obj)
    if table is not None:
        data["application/vnd.dataframe+json"] = table
    data["text/plain"] = repr(obj)
    return data


def dataframe_data(obj):
    pandas = sys.modules.get("pandas")
    if pandas is None or not isinstance(obj, pandas.DataFrame):
        return None
    split = json.loads(obj.to_json(orient="split", date_format="iso", default_handler=str))
    return {"columns": [str(c) for c in obj.columns], "index": split.get("index"),
            "data": split.get("data"), "dtypes": {str(c): str(t) for c, t in obj.dtypes.items()}}


def figure_bundle(obj):
    matplotlib = sys.modules.get("matplotlib")
    if matplotlib is None:
        return None
    from matplotlib.figure import Figure
    if not isinstance(obj, Figure):
        return None
    png = io.BytesIO()
    obj.savefig(png, format="png", bbox_inches="tight")
    data = {"image/png": base64.b64encode(png.getvalue()).decode(),
            "text/plain": f"<Figure size {obj.get_figwidth() * obj.dpi:.0f}x"
                          f"{obj.get_figheight() * obj.dpi:.0f} with {len(obj.axes)} Axes>"}
    charts = [c for c in (chart_of(ax) for ax in obj.axes) if c]
    if len(charts) == 1:
        data["application/vnd.brig.chart+json"] = charts[0]
    elif charts:
        data["application/vnd.brig.chart+json"] = {"type": "composite", "elements": charts}
    return data


def chart_of(ax):
    """What an Axes plots, as data an agent can read: bar, line, scatter or pie."""
    from matplotlib.container import BarContainer
    from matplotlib.collections import PathCollection
    from matplotlib.patches import Wedge
    base = {"title": ax.get_title(), "x_label": ax.get_xlabel(), "y_label": ax.get_ylabel(),
            "x_scale": ax.get_xscale(), "y_scale": ax.get_yscale()}
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    if bars:
        labels = [t.get_text() for t in ax.get_xticklabels()]
        ticks = list(ax.get_xticks())
        elements = []
        for container in bars:
            group = container.get_label() or ""
            for patch in container.patches:
                x = patch.get_x() + patch.get_width() / 2
                label = min(zip(ticks, labels), key=lambda t: abs(t[0] - x))[1] if ticks else ""
                elements.append({"label": label, "group": "" if group.startswith("_") else group,
                                 "value": float(patch.get_height())})
        return dict(base, type="bar", elements=elements)
    wedges = [p for p in ax.patches if isinstance(p, Wedge)]
    if wedges:
        labels = [t.get_text() for t in ax.texts]
        total = sum(w.theta2 - w.theta1 for w in wedges) or 1
        return dict(base, type="pie", elements=[
            {"label": labels[i] if i < len(labels) else "",
             "angle": float(w.theta2 - w.theta1), "radius": float(w.r),
             "fraction": float((w.theta2 - w.theta1) / total)} for i, w in enumerate(wedges)])
    scatters = [c for c in ax.collections if isinstance(c, PathCollection)]
    if scatters:
        return dict(base, type="scatter", elements=[
            {"label": "" if (c.get_label() or "").startswith("_") else c.get_label(),
             "points": [[float(x), float(y)] for x, y in c.get_offsets()]} for c in scatters])
    lines = [l for l in ax.get_lines() if not (l.get_label() or "").startswith("_")] or ax.get_lines()
    if lines:
        def number(v):
            try:
                return float(v)
            except (TypeError, ValueError):
                return str(v)
        return dict(base, type="line", elements=[
            {"label": "" if (l.get_label() or "").startswith("_") else l.get_label(),
             "points": [[number(x), number(y)] for x, y in zip(l.get_xdata(), l.get_ydata())]}
            for l in lines])
    return None


if __name__ == "__main__":
    if sys.argv[1:] == ["zygote"]:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts are for contexts
        zygote()
    else:
        sys.exit("usage: kernel.py zygote (started by brig's agent)")
