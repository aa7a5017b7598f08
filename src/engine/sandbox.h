// The isolation engine's front door: Engine launches sandboxes; Sandbox is one running sandbox.
//
// Engine::Launch reads as the ordered list of what a sandbox is made of (see sandbox.cc):
// validate, uid range, cgroup, child plan, clone3 into new namespaces (PID 1 joins its v1
// cgroups itself), id maps, template layers, go. Every resource acquired on the way is owned by an
// RAII object, so a failure at any step, or the launcher's death (PID 1 has PDEATHSIG and the
// kernel tears down its PID and mount namespaces), leaves nothing behind but a cgroup
// directory, which Engine::SweepStale removes on the next start.
//
// Thread-safety: Engine is immutable after Open and may launch from several threads. A Sandbox
// is driven by one thread at a time.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "base/unique_fd.h"
#include "engine/cgroups.h"
#include "engine/restricted.h"
#include "engine/spec.h"
#include "engine/userns.h"

namespace brig {

// How the sandbox's command ended, and what it used.
struct RunOutcome {
  enum class Kind { kExited, kSignaled, kTimedOut, kOutOfMemory, kSetupFailed, kExecFailed };
  Kind kind = Kind::kExited;
  int exit_code = 0;   // kExited
  int signal = 0;      // kSignaled, kOutOfMemory (the signal that ended it)
  absl::Status error;  // kSetupFailed, kExecFailed: which step and why
  CgroupUsage usage;
  std::chrono::nanoseconds wall{0};
};

// Exit codes `brig run` uses besides the command's own (docs/architecture.md).
inline constexpr int kExitTimedOut = 124;
inline constexpr int kExitBrigError = kSetupFailedExit;
inline constexpr int kExitNotExecutable = 126;
inline constexpr int kExitNotFound = 127;
inline constexpr int kExitOutOfMemory = 123;
int ExitCodeFor(const RunOutcome& outcome);

class Sandbox;
struct ChildPlan;

// A long-lived sandbox: its PID 1 is the agent (agent/agent.h), reached at `socket_path`.
struct AgentOptions {
  std::string socket_path;                // created (0600, root only) and listened on by brig
  std::string binary = "/proc/self/exe";  // the brig executable to run as the agent
};

class Engine {
 public:
  // Prepares <state_dir> (created if missing) and detects the host's cgroup layout.
  static absl::StatusOr<std::unique_ptr<Engine>> Open(const std::string& state_dir);

  // A one-shot sandbox running `process`; it ends when the process does (or its launcher dies).
  absl::StatusOr<std::unique_ptr<Sandbox>> Launch(SandboxSpec sandbox, ProcessSpec process) const;
  // A long-lived sandbox whose PID 1 is the agent. It runs until killed, and survives its
  // launcher once Detach()ed.
  absl::StatusOr<std::unique_ptr<Sandbox>> LaunchAgent(SandboxSpec sandbox,
                                                       const AgentOptions& agent) const;

  // Takes a detached long-lived sandbox over again (a restarted daemon does this for each one
  // it recorded): `pid` is its PID 1 as seen from here. NotFound when that process is gone or
  // is not that sandbox's PID 1 (a reused pid). The adopter may Kill() it or Detach() again.
  absl::StatusOr<std::unique_ptr<Sandbox>> Adopt(const std::string& id, pid_t pid,
                                                 const std::string& agent_socket) const;

  // Removes what is left of a long-lived sandbox whose PID 1 is gone, or whose launch never
  // finished: whatever still runs in its cgroup (thawed first) is killed, the cgroup removed,
  // and its agent socket unlinked.
  absl::Status Discard(const std::string& id, const std::string& agent_socket) const;

  // Removes cgroups of one-shot sandboxes whose launcher died without cleaning up.
  absl::Status SweepStale() const;

  const CgroupHost& cgroups() const { return cgroups_; }
  const std::string& state_dir() const { return state_dir_; }

 private:
  struct Mode {
    std::string cgroup_name;
    bool freezable;
    std::function<absl::Status(Sandbox&)> prepare;  // once the uid range is known
  };
  // The steps shared by both kinds, in order (sandbox.cc).
  absl::StatusOr<std::unique_ptr<Sandbox>> Start(SandboxSpec spec, std::unique_ptr<ChildPlan> plan,
                                                 const Mode& mode) const;

  Engine(std::string state_dir, std::string uid_slots, CgroupHost cgroups)
      : state_dir_(std::move(state_dir)),
        uid_slots_(std::move(uid_slots)),
        cgroups_(std::move(cgroups)) {}
  std::string state_dir_;
  std::string uid_slots_;  // the lock file of host uid ranges (userns.h), shared host-wide
  CgroupHost cgroups_;
};

class Sandbox {
 public:
  ~Sandbox();  // kills whatever still runs, reaps PID 1, removes the cgroup
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  const std::string& id() const { return id_; }
  pid_t init_pid() const { return pid_; }
  const SandboxCgroup& cgroup() const { return *cgroup_; }

  // Sends `sig` to PID 1, which forwards it to the command's process group.
  absl::Status Signal(int sig);
  // Kills every process of the sandbox.
  absl::Status Kill();

  // Freezes every process of the sandbox (cgroup freezer): they keep their PIDs, memory and
  // open files, and the sandbox's timeout stops running until Resume(). Long-lived sandboxes
  // only (one-shot cgroups are not freezable). Idempotent.
  absl::Status Pause();
  absl::Status Resume();
  bool paused() const { return paused_since_.has_value(); }

  // Gives up ownership without killing: the sandbox (a long-lived one) keeps running, its
  // cgroup and uid range stay, and this object forgets them.
  void Detach();

  // Waits until the command ends or the sandbox's timeout passes (then kills it). When
  // `forward_signals_fd` is a signalfd, signals read from it are forwarded with Signal().
  RunOutcome Wait(int forward_signals_fd = -1);

  // For a caller that watches many sandboxes from one event loop (the daemon): descriptors
  // that become readable when the sandbox needs Poll(): PID 1 exited, or (cgroup v1) the first
  // OOM kill. An entry of -1 is absent.
  std::array<int, 2> watch_fds() const { return {pidfd_.get(), oom_.get()}; }
  // Wait() without blocking: acts on what watch_fds() report (an OOM kill kills the whole
  // sandbox); once PID 1 has exited, returns the outcome as Wait() would. Call it no more
  // after it returned one.
  std::optional<RunOutcome> Poll();

 private:
  friend class Engine;
  Sandbox() = default;
  void HandleReport(const struct ChildReport& report);
  void DrainReports();
  // One poll of PID 1, the control socket, the forwarded signals and the OOM watch.
  void WaitStep(int forward_signals_fd, int timeout_ms);
  // Reads usage, removes the cgroup and decides the outcome, once PID 1 is reaped.
  RunOutcome Finish();

  std::string id_;
  pid_t pid_ = -1;
  UniqueFd pidfd_;
  UniqueFd control_;  // launcher's end of the SOCK_SEQPACKET pair with PID 1
  UniqueFd oom_;      // readable at the first OOM kill (v1), see SandboxCgroup::WatchOom
  std::unique_ptr<SandboxCgroup> cgroup_;
  std::optional<IdRange> ids_;
  std::string agent_socket_;  // long-lived sandboxes: removed when the sandbox is destroyed
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::optional<std::chrono::steady_clock::time_point> paused_since_;
  std::chrono::steady_clock::time_point started_;
  bool reaped_ = false;
  bool timed_out_ = false, out_of_memory_ = false;
  siginfo_t init_info_ = {};
  // What PID 1 reported so far.
  std::optional<absl::Status> setup_error_, exec_error_;
  int exec_errno_ = 0;
  std::optional<int> command_status_;
};

}  // namespace brig
