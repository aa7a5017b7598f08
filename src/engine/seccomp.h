// The seccomp-bpf filter every sandboxed command runs under.
//
// Default allow, with a deny list of what a sandbox has no business calling (kernel modules,
// kexec, bpf, perf, keyctl, mounts, new namespaces, io_uring, raw and packet sockets, terminal
// injection, …); docs/security.md lists each entry and the reasoning. Foreign syscall ABIs
// (i386, x32) kill the process. The filter is compiled by libseccomp in the launcher and loaded
// in the restricted zone from the exported bytes, which needs no allocation.
//
// CompileSandboxFilter() is thread-safe; the result is immutable.
#pragma once

#include <linux/filter.h>

#include <vector>

#include "base/status.h"

namespace brig {

absl::StatusOr<std::vector<sock_filter>> CompileSandboxFilter();

// Restricted zone: sets no_new_privs and installs `program`. Returns -1 with errno on failure.
int LoadFilter(const sock_fprog& program);

}  // namespace brig
