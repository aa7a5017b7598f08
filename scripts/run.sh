#!/usr/bin/env bash
# README command 1: install what brig needs, build it, check the host, and start brig's main
# job on its embedded defaults: the daemon, `brig serve`, on http://127.0.0.1:7878 with its
# state in /var/lib/brig. It prints where its API key is and how to call it. Ctrl-C stops the
# daemon; sandboxes keep running and the next `brig serve` takes them over.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
build/brig check
exec build/brig serve
