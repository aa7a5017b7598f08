// Small, whole-file reads and writes for kernel interfaces (cgroupfs, procfs) and config files.
//
// Each call opens, does its one read or write, and closes; errors name the call and the path.
// Thread-safe (no shared state). Not for use between fork and exec.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "base/status.h"
#include "base/unique_fd.h"

namespace brig {

// Writes `content` to an existing file in one write(2), as kernel interfaces expect.
absl::Status WriteKernelFile(const std::string& path, absl::string_view content);

// Reads a whole (small or virtual) file.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Replaces `path` atomically: writes a temporary sibling, fsyncs it, renames it over `path`.
absl::Status WriteFileAtomic(const std::string& path, absl::string_view content, mode_t mode);

// open(2) with O_CLOEXEC added, as a UniqueFd or a named error.
absl::StatusOr<UniqueFd> OpenFd(const std::string& path, int flags, mode_t mode = 0);

// mkdir -p with `mode` for the directories it creates.
absl::Status MakeDirs(const std::string& path, mode_t mode);

// Sends `bytes` (non-empty) on a unix socket with `fds` attached (SCM_RIGHTS, at most 8), in
// one message; `what` names it in the error.
absl::Status SendWithFds(int socket, absl::string_view bytes, std::initializer_list<int> fds,
                         absl::string_view what);

}  // namespace brig
