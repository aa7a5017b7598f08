#!/usr/bin/env bash
# README command 1: install what brig needs, build it, and run its main job on the embedded
# defaults. Until `brig serve` exists, the main job is a one-shot sandbox: a host check, then a
# Python program run in a fresh sandbox (state in /var/lib/brig).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
build/brig check
build/brig run -- /usr/bin/python3 -c '
import os, socket
print("hello from sandbox", socket.gethostname(), "as", os.environ["USER"], "in", os.getcwd())'
