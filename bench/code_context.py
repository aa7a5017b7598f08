#!/usr/bin/python3
"""Benchmark: a new code context with numpy, pandas and matplotlib imported, then `print(1)`.

  (a) brig: POST /v1/sandboxes/{id}/contexts, then POST .../code {"code": "print(1)"} until its
      `end` line: a fork of the sandbox's preloaded zygote (docs/interpreter.md).
  (b) the peer: a Jupyter kernel started with jupyter_client (Debian's python3-jupyter-client
      and python3-ipykernel), the same imports, then print(1): what hosted services do per
      context.

Both run side by side in this process, on this machine. Prints p50/p95/p99 and the ratio.

Usage: code_context.py [--brig build/brig] [--iterations 200] [--jupyter-iterations 20]
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

IMPORTS = "import numpy, pandas, matplotlib.pyplot"


def percentile(values, p):
    values = sorted(values)
    if not values:
        return 0.0
    return values[min(len(values) - 1, int(p / 100 * (len(values) - 1) + 0.5))]


def row(name, ms, errors):
    print(f"| {name} | {percentile(ms, 50):.2f} | {percentile(ms, 95):.2f} | "
          f"{percentile(ms, 99):.2f} | {len(ms)} | {errors} |")


class Brig:
    def __init__(self, binary):
        self.root = tempfile.mkdtemp(prefix="brig-bench-code-", dir="/tmp")
        os.chmod(self.root, 0o711)
        state = os.path.join(self.root, "state")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = subprocess.Popen([binary, "--state-dir", state, "serve", "--listen",
                                      f"127.0.0.1:{self.port}"], stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not os.path.exists(os.path.join(state, "url")):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("brig serve did not start")
            time.sleep(0.05)
        with open(os.path.join(state, "api-key")) as f:
            self.key = f.read().strip()
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def call(self, method, path, body=None):
        self.conn.request(method, path, json.dumps(body) if body is not None else None,
                          {"Authorization": "Bearer " + self.key})
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: {resp.status} {data!r}")
        return [json.loads(l) for l in data.splitlines() if l.strip()]

    def close(self):
        self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--brig", default="build/brig")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--jupyter-iterations", type=int, default=20)
    args = parser.parse_args()

    brig = Brig(args.brig)
    ms, errors = [], 0
    try:
        sid = brig.call("POST", "/v1/sandboxes", {"timeout": 3600, "memory_mb": 4096})[0]["id"]
        start = time.perf_counter()
        brig.call("POST", f"/v1/sandboxes/{sid}/code", {"code": IMPORTS})  # starts the zygote
        first = (time.perf_counter() - start) * 1000
        for i in range(args.iterations + 5):
            start = time.perf_counter()
            try:
                ctx = brig.call("POST", f"/v1/sandboxes/{sid}/contexts", {})[0]["id"]
                lines = brig.call("POST", f"/v1/sandboxes/{sid}/code",
                                  {"code": f"{IMPORTS}\nprint(1)", "context": ctx})
                ok = any(l.get("type") == "stdout" and l.get("text") == "1\n" for l in lines)
            except RuntimeError:
                ok, ctx = False, None
            elapsed = (time.perf_counter() - start) * 1000
            if not ok:
                errors += 1
            elif i >= 5:
                ms.append(elapsed)
            if ctx:
                brig.call("DELETE", f"/v1/sandboxes/{sid}/contexts/{ctx}")
        brig.call("DELETE", f"/v1/sandboxes/{sid}")
    finally:
        brig.close()

    jupyter_ms, jupyter_errors, jupyter_skip = [], 0, None
    try:
        from jupyter_client.manager import KernelManager
    except ImportError as e:
        jupyter_skip = f"jupyter_client is not installed ({e})"
    if not jupyter_skip:
        for _ in range(args.jupyter_iterations):
            start = time.perf_counter()
            km = KernelManager(kernel_name="python3")
            try:
                km.start_kernel(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                kc = km.client()
                kc.start_channels()
                kc.wait_for_ready(timeout=60)
                out = []
                reply = kc.execute_interactive(
                    f"{IMPORTS}\nprint(1)", timeout=60,
                    output_hook=lambda m: out.append(m["content"].get("text", "")))
                ok = reply["content"]["status"] == "ok" and "1\n" in "".join(out)
                kc.stop_channels()
            except Exception:
                ok = False
            finally:
                km.shutdown_kernel(now=True)
            elapsed = (time.perf_counter() - start) * 1000
            if ok:
                jupyter_ms.append(elapsed)
            else:
                jupyter_errors += 1

    print("| new context (numpy+pandas+matplotlib) + print(1) | p50 ms | p95 ms | p99 ms | runs "
          "| errors |\n|---|---:|---:|---:|---:|---:|")
    row("brig: fork of the preloaded zygote, over HTTP", ms, errors)
    if jupyter_skip:
        print(f"| Jupyter kernel (jupyter_client): skipped, {jupyter_skip} | | | | | |")
    else:
        row("Jupyter kernel (jupyter_client + ipykernel)", jupyter_ms, jupyter_errors)
    print(f"\nfirst use in a sandbox (starting the zygote and its imports): {first:.0f} ms")
    if ms and jupyter_ms:
        print(f"ratio Jupyter / brig at p50: {percentile(jupyter_ms, 50) / percentile(ms, 50):.0f}x")
    return 0 if errors == 0 and jupyter_errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
