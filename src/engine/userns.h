// User namespaces: each sandbox gets its own range of 65536 host uids and gids, so that root
// inside is an unprivileged, otherwise unused uid outside and two sandboxes never share an
// identity (an escape from one lands as nobody, with no access to the other).
//
// A range is a slot in a lock file (/run/brig/uid-slots): an open-file-description lock on
// byte N reserves slot N. The kernel drops the lock when the last descriptor of that open file
// closes, so a slot is freed when both its launcher and the sandbox's PID 1 (which inherits the
// descriptor) are gone, crash or not. Move-only; not thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"

namespace brig {

inline constexpr uint32_t kIdsPerSandbox = 65536;
inline constexpr uint32_t kFirstHostId = 1u << 30;  // far above any distribution's users
inline constexpr uint32_t kIdSlots = 8192;

class IdRange {
 public:
  // Reserves a free slot. ResourceExhausted when all kIdSlots are taken.
  static absl::StatusOr<IdRange> Allocate(const std::string& lock_file);

  uint32_t host_base() const { return kFirstHostId + slot_ * kIdsPerSandbox; }
  uint32_t slot() const { return slot_; }
  // The descriptor holding the reservation; a process that inherits it keeps the slot.
  int lock_fd() const { return lock_.get(); }

  // Writes /proc/<pid>/{uid_map,gid_map}: 0..65535 inside -> host_base().. outside.
  absl::Status WriteMaps(pid_t pid) const;

 private:
  IdRange(UniqueFd lock, uint32_t slot) : lock_(std::move(lock)), slot_(slot) {}
  UniqueFd lock_;
  uint32_t slot_;
};

}  // namespace brig
