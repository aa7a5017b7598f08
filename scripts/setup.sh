#!/usr/bin/env bash
# Installs everything brig needs to build and test on Debian 12, as root. Idempotent: a package
# already present is not fetched again, and a second run changes nothing.
set -euo pipefail

packages=(
  # toolchain
  g++ cmake ninja-build ccache pkg-config git
  # libraries (see docs/architecture.md, "Dependencies")
  libabsl-dev libseccomp-dev libcli11-dev nlohmann-json3-dev
  libboost-dev libsqlite3-dev libssl-dev zlib1g-dev
  # tests and benchmarks (bubblewrap: the benchmark's peer; python3: programs run in sandboxes;
  # python3-yaml: the OpenAPI test; clang and its runtime: the libFuzzer targets)
  libgtest-dev libgmock-dev bubblewrap python3 python3-yaml clang libclang-rt-14-dev
  # the Python SDK: pip installs it from the repository path (no index needed)
  python3-pip python3-setuptools
  # the code interpreter's preloaded libraries (the template takes them from the host's /usr)
  python3-numpy python3-pandas python3-matplotlib
  # the code-context benchmark's peer: a Jupyter kernel
  python3-jupyter-client python3-ipykernel
  # JavaScript contexts run node from the host's /usr
  nodejs
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
