#include "server/record.h"

#include <array>

namespace brig::server {
namespace {

constexpr std::array<absl::string_view, 6> kStateNames = {"creating", "running", "paused",
                                                          "stopping", "stopped", "lost"};

}  // namespace

absl::string_view StateName(SandboxState state) { return kStateNames[static_cast<size_t>(state)]; }

std::optional<SandboxState> ParseState(absl::string_view name) {
  for (size_t i = 0; i < kStateNames.size(); ++i) {
    if (kStateNames[i] == name) return static_cast<SandboxState>(i);
  }
  return std::nullopt;
}

bool IsLive(SandboxState state) {
  return state == SandboxState::kCreating || state == SandboxState::kRunning ||
         state == SandboxState::kPaused;
}

}  // namespace brig::server
