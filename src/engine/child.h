// The inside of a sandbox: what its PID 1 does, from the moment clone3 returns to the moment
// the sandbox's command exits. Every function here is restricted-zone code (restricted.h).
//
// PID 1, in order:
//   1. join its v1 cgroups (while still the launcher's uid), then wait for the launcher (id maps
//      written, template layers sent)
//   2. become root of the user namespace; enter a cgroup namespace rooted at its own cgroup
//   3. build the root filesystem and pivot into it (mounts.h)
//   4. bring up loopback; set the hostname
//   5. vfork the command, which takes its stdio, starts a session, applies rlimits, bounds its
//      capabilities, switches user, changes directory, sets no_new_privs, applies Landlock and
//      loads seccomp (in that order: each later step needs the earlier ones' privileges gone
//      or set, and seccomp must come last), then execs
//   6. reap every process, forward the launcher's signals to the command's process group, and
//      report the command's wait status; exiting then kills whatever is left in the sandbox.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "engine/mounts.h"

namespace brig {

struct CommandPlan {
  std::vector<std::string> candidates;  // absolute paths to try with execve, in PATH order
  std::vector<std::string> argv_storage, env_storage;
  std::vector<char*> argv, envp;        // NULL-terminated views of the storage
  uid_t uid = 0;
  gid_t gid = 0;
  std::string workdir;
  uint64_t open_files = 1024;
  int stdio[3] = {-1, -1, -1};          // dup2'ed onto 0, 1, 2 when >= 0
  int landlock_abi = 0;
  int last_capability = 40;             // /proc/sys/kernel/cap_last_cap
  sock_fprog seccomp = {};              // points into ChildPlan::filter
};

struct ChildPlan {
  int control_fd = -1;   // PID 1's end of the SOCK_SEQPACKET pair with the launcher
  // The only descriptors PID 1 keeps of the launcher's: control_fd, the uid-range lock, and the
  // command's stdio. Everything else a (multithreaded) launcher had open at clone time, such as
  // another thread's lock file, is closed at once.
  int keep_fds[5] = {-1, -1, -1, -1, -1};
  std::vector<std::string> cgroup_tasks_files;  // v1 cgroups PID 1 joins itself (cgroups.h)
  RootfsPlan rootfs;
  std::string hostname;
  std::vector<sock_filter> filter;
  CommandPlan command;
};

// Makes the NULL-terminated argv/envp views and the seccomp program point into `plan`. Call once
// the plan is at its final address (it is not movable afterwards).
void FinalizePlan(ChildPlan& plan);

// PID 1's entry point, right after clone3. Never returns.
[[noreturn]] void SandboxInitMain(const ChildPlan& plan);

}  // namespace brig
