#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang and runs each for a bounded time, starting from
# the seed corpora in fuzz/corpus/. Usage: scripts/fuzz.sh [seconds per target, default 20].
# Longer runs: the same with more seconds; new inputs go to a scratch corpus, crashes to
# build-fuzz/crashes/ (each becomes a regression test and a seed).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-20}
CXX=clang++ cmake -S fuzz -B build-fuzz -G Ninja >/dev/null
cmake --build build-fuzz
mkdir -p build-fuzz/crashes
for target in frame_fuzzer units_fuzzer; do
  corpus=$(mktemp -d /tmp/brig-fuzz.XXXXXX)
  cp fuzz/corpus/${target%_fuzzer}/* "$corpus"/
  echo "== $target for ${seconds}s"
  status=0
  build-fuzz/$target -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix=build-fuzz/crashes/ "$corpus" >build-fuzz/$target.log 2>&1 || status=$?
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|SUMMARY|Done)" build-fuzz/$target.log || true
  rm -rf "$corpus"
  if [[ $status -ne 0 ]]; then
    tail -40 build-fuzz/$target.log
    echo "$target failed (exit $status); inputs in build-fuzz/crashes/"
    exit 1
  fi
done
