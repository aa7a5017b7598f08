// cgroups: resource limits, accounting and whole-tree kill for one sandbox, behind one
// interface over cgroup v1 (legacy and hybrid hosts) and cgroup v2 (unified hosts).
//
// CgroupHost::Detect() reads /proc/self/mountinfo and /proc/self/cgroup once and decides which
// hierarchy carries the limits. Sandbox cgroups are always created beneath the cgroup brig
// itself runs in, in every hierarchy used: the tree above belongs to whoever started brig.
// On a hybrid host (v1 controllers plus a v2 mount without them) the v2 mount is used as well,
// for cgroup.kill.
//
// SandboxCgroup owns its directories: destroying it kills every process left inside and
// removes them. Objects are not thread-safe; one owner drives each. Nothing here may be called
// between fork and exec.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "engine/spec.h"

namespace brig {

struct CgroupUsage {
  uint64_t cpu_usec = 0;           // CPU time of all processes, user + system
  uint64_t memory_peak_bytes = 0;  // high-water mark of charged memory
  uint64_t oom_kills = 0;          // processes killed by the OOM killer for this cgroup
  uint64_t nr_throttled = 0;       // CFS periods in which the quota ran out
  uint64_t throttled_usec = 0;
  uint64_t memory_bytes = 0;  // charged memory now
  uint64_t pids = 0;          // processes and threads now
};

class SandboxCgroup {
 public:
  virtual ~SandboxCgroup() = default;

  // Moves `pid` into the sandbox's cgroup in every hierarchy brig uses.
  virtual absl::Status Attach(pid_t pid) = 0;
  // A v2 directory fd for clone3(CLONE_INTO_CGROUP), or -1 when the host has no v2 mount.
  virtual int clone_into_fd() const = 0;
  // v1 "tasks" files that a new sandbox process joins by writing "0" itself, before it drops
  // privileges. Moving oneself as a single thread skips the kernel's global threadgroup lock,
  // whose RCU synchronisation makes moving another process cost ~15 ms; CLONE_INTO_CGROUP
  // avoids it for v2. Empty on pure v2 hosts.
  virtual std::vector<std::string> self_attach_files() const = 0;
  // SIGKILLs every process inside, including ones that raced in during the kill.
  virtual absl::Status KillAll() = 0;
  virtual absl::StatusOr<CgroupUsage> ReadUsage() const = 0;
  // An OOM kill anywhere in the sandbox must end the whole sandbox. v2 does that itself
  // (memory.oom.group) and returns an invalid descriptor; v1 returns an eventfd that becomes
  // readable at the cgroup's first OOM, for the owner to kill everything.
  virtual absl::StatusOr<UniqueFd> WatchOom() = 0;
  // Kills what is left and removes the directories. Idempotent; the destructor calls it.
  virtual absl::Status Remove() = 0;
  // Forgets the directories without touching them (their sandbox lives on, owned elsewhere).
  virtual void Release() = 0;
  // Freezes (or thaws) every process inside, and returns once the kernel reports it done.
  // FailedPrecondition for a cgroup created without `freezable`.
  virtual absl::Status Freeze(bool frozen) = 0;
  // The directories, for tests and diagnostics.
  virtual std::vector<std::string> Paths() const = 0;
};

class CgroupHost {
 public:
  enum class Mode { kV1, kV2 };

  static absl::StatusOr<CgroupHost> Detect();

  Mode mode() const { return mode_; }
  // Creates `<own cgroup>/<name>` in each hierarchy needed and applies `limits`. On v1 hosts
  // every hierarchy costs a mkdir, a join and an rmdir, so only what is used is made: memory,
  // cpuacct and pids always; cpu with a CPU quota; freezer (and, on hybrid hosts, the v2
  // directory for cgroup.kill) only when `freezable` (sandboxes that may be paused). Whole-tree
  // kill does not depend on them: the sandbox's PID namespace dies with its PID 1.
  absl::StatusOr<std::unique_ptr<SandboxCgroup>> Create(const std::string& name,
                                                        const Limits& limits, bool freezable) const;
  // The existing cgroup `<own cgroup>/<name>` of a long-lived (freezable) sandbox, as Create
  // made it, for a launcher taking the sandbox over from an earlier one. NotFound when it does
  // not exist.
  absl::StatusOr<std::unique_ptr<SandboxCgroup>> Open(const std::string& name) const;
  // The directories under which Create() makes sandbox cgroups (one per hierarchy).
  std::vector<std::string> ParentDirs() const;
  // Kills and removes `<parent>/<name>` wherever it exists (stale sandboxes of a dead owner).
  absl::Status RemoveStale(const std::string& name) const;
  std::string Describe() const;

 private:
  Mode mode_ = Mode::kV1;
  // v1: controller name ("memory", "cpu", …) -> brig's own cgroup directory in its hierarchy.
  std::map<std::string, std::string> v1_dirs_;
  std::string v2_dir_;  // brig's own cgroup in the v2 mount, or empty
};

}  // namespace brig
