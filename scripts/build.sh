#!/usr/bin/env bash
# Builds brig (build/) and, with --sanitize, the ASan+UBSan build of the tests (build-asan/).
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache hits across clones (CI builds a fresh clone): paths relative to the checkout, and the
# working directory kept out of the hash.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
if [[ ${1:-} == --sanitize ]]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DBRIG_SANITIZE=ON >/dev/null
  cmake --build build-asan
fi
