// A sandboxed command: everything it needs, prepared before fork (CommandPlan), and the steps
// that turn a freshly forked process inside a sandbox into that command (RunCommand).
//
// Used by a one-shot sandbox's PID 1 (child.h) and by the agent of a long-lived sandbox
// (agent/agent.h), so every command of every sandbox goes through the same steps:
// stdio, session, rlimits, bounded capabilities, user, working directory, no_new_privs,
// Landlock, seccomp (last), exec. Each later step needs the earlier ones' privileges gone or
// set; seccomp must come last.
//
// MakeCommandPlan allocates (launcher or agent, before fork). RunCommand is restricted-zone
// code (restricted.h). A plan is not movable once finalized.
#pragma once

#include <linux/filter.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "engine/spec.h"

namespace brig {

struct CommandPlan {
  std::vector<std::string> candidates;  // absolute paths to try with execve, in PATH order
  std::vector<std::string> argv_storage, env_storage;
  std::vector<char*> argv, envp;  // NULL-terminated views of the storage
  uid_t uid = 0;
  gid_t gid = 0;
  std::string workdir;
  uint64_t open_files = 1024;
  int stdio[3] = {-1, -1, -1};   // dup2'ed onto 0, 1, 2 when >= 0
  bool controlling_tty = false;  // stdin is a terminal to make the session's own
  int landlock_abi = 0;
  int last_capability = 40;  // /proc/sys/kernel/cap_last_cap
  sock_fprog seccomp = {};   // points at SandboxFilter()
};

// NULL-terminated pointers into `storage`, for execve; valid while `storage` is unchanged.
std::vector<char*> ExecVector(std::vector<std::string>& storage);

// Fills `plan` for `process` in a sandbox named `hostname`, then points its views at its own
// storage: `plan` must stay where it is until the command has exec'd.
void MakeCommandPlan(const ProcessSpec& process, const std::string& hostname, uint64_t open_files,
                     CommandPlan& plan);

// Starts the command: vfork, then RunCommand in the child. Returns the child's pid (or -1)
// once it has exec'd or exited; a failure before exec was reported on `report_fd`.
// vfork, not fork(3): libc's fork takes locks that a launcher thread may have held when this
// process was cloned from it, and copying page tables costs more than the rest of the set-up.
// (In a function of its own so that no caller's locals share a stack frame with vfork.)
pid_t SpawnCommand(const CommandPlan& plan, int report_fd);

// Restricted zone, in a process freshly forked inside the sandbox with namespace-root powers.
// Never returns: execs, or reports {step, errno} as a ChildReport on `report_fd` (a socket)
// and exits 127 (not found), 126 (not executable) or 125 (a set-up step failed).
[[noreturn]] void RunCommand(const CommandPlan& plan, int report_fd);

}  // namespace brig
