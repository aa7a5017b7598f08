// What the daemon knows about one long-lived sandbox: the row it keeps in its store, and the
// states of the sandbox state machine (docs/api.md, "States").
//
// Plain values: copy freely. Thread-safety: none of their own; the manager guards them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

namespace brig::server {

enum class SandboxState { kCreating, kRunning, kPaused, kStopping, kStopped, kLost };

absl::string_view StateName(SandboxState state);
std::optional<SandboxState> ParseState(absl::string_view name);
// creating, running, paused: it exists (or is being made) and owns host resources.
bool IsLive(SandboxState state);

using StringMap = std::map<std::string, std::string>;

struct SandboxRecord {
  std::string id;
  std::string name;  // empty: none
  std::string template_name = "base";
  SandboxState state = SandboxState::kCreating;
  std::string reason;  // why it left running
  double cpus = 0;
  uint64_t memory_mb = 512;
  uint64_t disk_mb = 1024;
  uint32_t pids = 256;
  StringMap env;
  StringMap metadata;
  // Wall-clock times in ms since the epoch, so that they survive a daemon restart; 0 = unset.
  int64_t created_ms = 0;
  int64_t expires_ms = 0;    // while running: when the lifetime timeout kills it
  int64_t remaining_ms = 0;  // while paused: the lifetime left
  int64_t ended_ms = 0;
  pid_t init_pid = 0;  // PID 1, as seen from the host
};

}  // namespace brig::server
