// The typed description of a sandbox and of the process it runs: what the CLI flags, and
// later the HTTP API, are parsed into before anything touches the kernel.
//
// Plain values; copyable; no thread-safety concerns. Validate() is the one place that decides
// whether a spec is acceptable, so every front end gives the same error for the same mistake.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace brig {

// Resource limits. A zero means "no limit of this kind" except where noted.
struct Limits {
  uint64_t memory_bytes = 512ull << 20;  // memory cgroup limit (writable layer counts too)
  double cpus = 0;                       // CPU quota in cores; 0 = unlimited
  uint32_t pids = 256;                   // process/thread cap (pids cgroup)
  uint64_t disk_bytes = 1ull << 30;      // size of the writable layer (tmpfs); must be > 0
  uint32_t open_files = 1024;            // RLIMIT_NOFILE
};

// Who a process runs as inside the sandbox. Only these two exist in the default template.
enum class SandboxUser { kUser, kRoot };

struct UserIdentity {
  uint32_t uid;
  uint32_t gid;
  const char* name;
  const char* home;
};
UserIdentity IdentityOf(SandboxUser user);

struct ProcessSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
  std::vector<std::string> env;   // "K=V" entries added to (and overriding) the defaults
  std::string workdir;            // empty: the user's home
  SandboxUser user = SandboxUser::kUser;
  // The command's stdin, stdout and stderr: descriptors of the launcher, borrowed until Launch
  // returns. -1 inherits the launcher's own 0, 1 or 2 (as `brig run` does).
  int stdio[3] = {-1, -1, -1};
};

struct SandboxSpec {
  std::string id;  // 20 chars of [a-z0-9]; generated when empty
  std::string template_name = "base";
  Limits limits;
  std::optional<std::chrono::milliseconds> timeout;  // whole-sandbox lifetime
};

// Check every field; return InvalidArgument naming the first bad one.
absl::Status Validate(const SandboxSpec& sandbox);
absl::Status Validate(const ProcessSpec& process);
absl::Status Validate(const SandboxSpec& sandbox, const ProcessSpec& process);

// A fresh random sandbox id: 20 characters of [a-z0-9].
std::string NewSandboxId();

// The environment a process starts with: defaults for its user, then `extra` on top.
std::vector<std::string> BuildEnvironment(const ProcessSpec& process, const std::string& hostname);

}  // namespace brig
