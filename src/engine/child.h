// The inside of a sandbox: what its PID 1 does, from the moment clone3 returns to the moment
// the sandbox's command exits. Every function here is restricted-zone code (restricted.h).
//
// PID 1, in order:
//   1. join its v1 cgroups (while still the launcher's uid), then wait for the launcher (id maps
//      written, template layers sent)
//   2. become root of the user namespace; enter a cgroup namespace rooted at its own cgroup
//   3. build the root filesystem and pivot into it (mounts.h)
//   4. bring up loopback; set the hostname
//   5. one-shot: vfork the command (command.h: RunCommand's steps, then exec);
//      long-lived: exec the agent instead, which runs commands on request (agent/agent.h)
//   6. one-shot: reap every process, forward the launcher's signals to the command's process
//      group, and report the command's wait status; exiting then kills whatever is left.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "engine/command.h"
#include "engine/mounts.h"

namespace brig {

struct ChildPlan {
  int control_fd = -1;  // PID 1's end of the SOCK_SEQPACKET pair with the launcher
  // The only descriptors PID 1 keeps of the launcher's: control_fd, the uid-range lock, and the
  // command's stdio. Everything else a (multithreaded) launcher had open at clone time, such as
  // another thread's lock file, is closed at once.
  int keep_fds[7] = {-1, -1, -1, -1, -1, -1, -1};
  std::vector<std::string> cgroup_tasks_files;  // v1 cgroups PID 1 joins itself (cgroups.h)
  RootfsPlan rootfs;
  std::string hostname;
  CommandPlan command;  // one-shot sandboxes: the command PID 1 runs
  // Long-lived sandboxes: PID 1 instead becomes the agent (agent/agent.h) by executing brig
  // (agent_exe, an O_PATH descriptor) with `agent_argv`; it keeps agent_listen_fd (the socket
  // the daemon connects to) and the uid-range lock across that exec, and outlives its launcher.
  int agent_exe = -1;
  int agent_listen_fd = -1;
  int uid_lock_fd = -1;
  std::vector<std::string> agent_argv_storage, agent_env_storage;
  std::vector<char*> agent_argv, agent_envp;
};

// PID 1's entry point, right after clone3. Never returns.
[[noreturn]] void SandboxInitMain(const ChildPlan& plan);

}  // namespace brig
