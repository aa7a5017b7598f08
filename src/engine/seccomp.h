// The seccomp-bpf filter every sandboxed command runs under.
//
// Default allow, with a deny list of what a sandbox has no business calling (kernel modules,
// kexec, bpf, perf, keyctl, mounts, new namespaces, io_uring, raw and packet sockets, terminal
// injection, …); docs/security.md lists each entry and the reasoning. Foreign syscall ABIs
// (i386, x32) kill the process.
//
// The policy is written with libseccomp (CompileSandboxFilter, seccomp.cc) and compiled at
// build time (tools/seccomp_gen.cc) into the BPF program that SandboxFilter() returns, so
// brig neither links libseccomp nor spends ~0.2 ms compiling the filter for every sandbox.
// The restricted zone loads it from those bytes, which needs no allocation.
//
// Thread-safe: the program is immutable.
#pragma once

#include <linux/filter.h>

#include <vector>

#include "absl/types/span.h"
#include "base/status.h"

namespace brig {

// The policy, compiled by libseccomp now (for the generator and its test).
absl::StatusOr<std::vector<sock_filter>> CompileSandboxFilter();

// The policy as compiled when brig was built.
absl::Span<const sock_filter> SandboxFilter();

// Restricted zone: sets no_new_privs and installs `program`. Returns -1 with errno on failure.
int LoadFilter(const sock_fprog& program);

}  // namespace brig
