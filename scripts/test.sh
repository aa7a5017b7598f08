#!/usr/bin/env bash
# README command 2 (and .ci/run): install, build, and run the whole test suite: unit, engine,
# agent and CLI tests; the same tests under ASan+UBSan; bounded libFuzzer runs of every parser
# of untrusted bytes; and short benchmark smoke runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh --sanitize

echo "== tests"
ctest --test-dir build --output-on-failure -j2

echo "== tests under ASan+UBSan"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan --output-on-failure -j2

echo "== fuzz targets, bounded runs"
bash scripts/fuzz.sh 15

echo "== benchmark smoke run (full numbers: docs/benchmarks.md)"
bench_state=$(mktemp -d /tmp/brig-bench.XXXXXX)
trap 'rm -rf "$bench_state"' EXIT
build/bench/run_vs_bwrap --iterations 20 --brig build/brig --state-dir "$bench_state"
build/bench/agent_roundtrip --iterations 20 --brig build/brig --state-dir "$bench_state"
build/bench/http_api --iterations 20 --brig build/brig --state-dir "$bench_state"
/usr/bin/python3 bench/code_context.py --iterations 10 --jupyter-iterations 2 --brig build/brig
