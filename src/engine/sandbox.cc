#include "engine/sandbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "base/files.h"
#include "engine/child.h"
#include "engine/mounts.h"
#include "engine/restricted.h"
#include "engine/template.h"

namespace brig {
namespace {

using Clock = std::chrono::steady_clock;

constexpr absl::string_view kOneShotPrefix = "brig-run-";

std::string OneShotCgroupName(const std::string& id) {
  return absl::StrCat(kOneShotPrefix, ::getpid(), "-", id);
}

// Long-lived sandboxes outlive their launcher: no owner pid in the name, never swept.
std::string LongLivedCgroupName(const std::string& id) { return absl::StrCat("brig-sb-", id); }

std::unique_ptr<ChildPlan> MakeChildPlan(const std::string& state_dir, const SandboxSpec& spec) {
  auto plan = std::make_unique<ChildPlan>();
  plan->hostname = spec.id;
  plan->rootfs = MakeRootfsPlan(state_dir + "/mnt", spec.limits.disk_bytes, plan->hostname);
  return plan;
}

// The agent's listening socket, at a host path only root can reach (docs/agent-protocol.md).
absl::StatusOr<UniqueFd> ListenForDaemon(const std::string& path) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return absl::InvalidArgumentError(absl::StrCat("invalid agent socket path \"", path, "\""));
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoError("socket", "AF_UNIX");
  ::unlink(path.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return ErrnoError("bind", path);
  }
  if (::chmod(path.c_str(), 0600) != 0) return ErrnoError("chmod", path);
  if (::listen(fd.get(), 64) != 0) return ErrnoError("listen", path);
  return fd;
}

// A command that reopens its stdout through /dev/stdout (as `echo x >/dev/stderr` does) needs
// access to the pipe's inode, which the launcher's caller owns. Pipes handed to the command are
// given to its uid (the caller keeps its descriptors; only the inode's owner changes);
// terminals, named FIFOs and files are not changed: they are the caller's, not brig's.
absl::Status HandOverStdioPipes(const ProcessSpec& process, uint32_t host_base) {
  UserIdentity who = IdentityOf(process.user);
  for (int n = 0; n < 3; ++n) {
    int fd = process.stdio[n] >= 0 ? process.stdio[n] : n;
    struct statfs fs;
    if (::fstatfs(fd, &fs) != 0 || fs.f_type != PIPEFS_MAGIC) continue;  // not named FIFOs
    if (::fchown(fd, host_base + who.uid, host_base + who.gid) != 0) {
      return ErrnoError("fchown", absl::StrCat("stdio pipe ", n));
    }
  }
  return absl::OkStatus();
}

absl::Status SendGo(int control_fd, const LayerMounts& layers) {
  return SendWithFds(control_fd, "g", {layers.skeleton.get(), layers.usr.get()}, "go to PID 1");
}

absl::Status StepError(const ChildReport& report) {
  return ErrnoError(absl::StrCat("sandbox setup failed at step \"",
                                 StepName(static_cast<Step>(report.step)), "\""),
                    "", report.error);
}

}  // namespace

int ExitCodeFor(const RunOutcome& outcome) {
  switch (outcome.kind) {
    case RunOutcome::Kind::kExited:
      return outcome.exit_code;
    case RunOutcome::Kind::kSignaled:
      return 128 + outcome.signal;
    case RunOutcome::Kind::kTimedOut:
      return kExitTimedOut;
    case RunOutcome::Kind::kOutOfMemory:
      return kExitOutOfMemory;
    case RunOutcome::Kind::kSetupFailed:
      return kExitBrigError;
    case RunOutcome::Kind::kExecFailed:
      return absl::IsNotFound(outcome.error) ? kExitNotFound : kExitNotExecutable;
  }
  return kExitBrigError;
}

namespace {

// Every directory above the state dir must be searchable by others (o+x), for the same reason
// as the 0711 above; otherwise every sandbox would fail while building its root.
absl::Status CheckTraversable(const std::string& state_dir) {
  for (size_t slash = state_dir.find('/', 1); slash != std::string::npos;
       slash = state_dir.find('/', slash + 1)) {
    std::string dir = state_dir.substr(0, slash);
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) return ErrnoError("stat", dir);
    if ((st.st_mode & S_IXOTH) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the state directory ", state_dir, " is inside ", dir,
          ", which others cannot search (mode ", absl::StrFormat("%o", st.st_mode & 07777),
          "): sandboxes reach the state directory as unprivileged users. Use another state "
          "directory, or chmod o+x ",
          dir));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Open(const std::string& state_dir) {
  if (state_dir.empty() || state_dir[0] != '/') {
    return absl::InvalidArgumentError("the state directory must be an absolute path");
  }
  if (::geteuid() != 0) {
    return absl::FailedPreconditionError(
        "brig must run as root: it creates user namespaces with their own uid ranges, cgroups "
        "and id-mapped mounts");
  }
  // The state dir is traversable (not listable) by others: a sandbox's PID 1, already mapped
  // to its unprivileged uid, must reach the empty mount point <state>/mnt. Files inside that
  // matter are themselves 0600.
  BRIG_RETURN_IF_ERROR(MakeDirs(state_dir + "/mnt", 0755));
  if (::chmod(state_dir.c_str(), 0711) != 0) return ErrnoError("chmod", state_dir);
  BRIG_RETURN_IF_ERROR(CheckTraversable(state_dir));
  BRIG_ASSIGN_OR_RETURN(CgroupHost cgroups, CgroupHost::Detect());
  // One lock file for the whole host, whatever the state dir: two state dirs must never hand
  // out the same uid range. /run is per boot, like the locks.
  std::string uid_slots = "/run/brig/uid-slots";
  if (!MakeDirs("/run/brig", 0700).ok()) uid_slots = state_dir + "/uid-slots";
  return std::unique_ptr<Engine>(new Engine(state_dir, std::move(uid_slots), std::move(cgroups)));
}

absl::StatusOr<std::unique_ptr<Sandbox>> Engine::Launch(SandboxSpec spec,
                                                        ProcessSpec process) const {
  BRIG_RETURN_IF_ERROR(Validate(spec, process));
  if (spec.id.empty()) spec.id = NewSandboxId();
  std::unique_ptr<ChildPlan> plan = MakeChildPlan(state_dir_, spec);
  for (int n = 0; n < 3; ++n) plan->keep_fds[2 + n] = process.stdio[n];
  MakeCommandPlan(process, spec.id, spec.limits.open_files, plan->command);
  Mode mode = {OneShotCgroupName(spec.id), /*freezable=*/false, [&](Sandbox& sandbox) {
                 return HandOverStdioPipes(process, sandbox.ids_->host_base());
               }};
  return Start(std::move(spec), std::move(plan), mode);
}

absl::StatusOr<std::unique_ptr<Sandbox>> Engine::LaunchAgent(SandboxSpec spec,
                                                             const AgentOptions& agent) const {
  BRIG_RETURN_IF_ERROR(Validate(spec));
  if (spec.id.empty()) spec.id = NewSandboxId();
  std::unique_ptr<ChildPlan> plan = MakeChildPlan(state_dir_, spec);
  BRIG_ASSIGN_OR_RETURN(UniqueFd exe, OpenFd(agent.binary, O_PATH));
  BRIG_ASSIGN_OR_RETURN(UniqueFd listener, ListenForDaemon(agent.socket_path));
  plan->agent_exe = plan->keep_fds[2] = exe.get();
  plan->agent_listen_fd = plan->keep_fds[3] = listener.get();
  plan->agent_argv_storage = {"brig", "agent"};
  plan->agent_env_storage = {absl::StrCat("BRIG_AGENT_FD=", listener.get()),
                             absl::StrCat("BRIG_OPEN_FILES=", spec.limits.open_files),
                             "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
  plan->agent_argv = ExecVector(plan->agent_argv_storage);
  plan->agent_envp = ExecVector(plan->agent_env_storage);
  std::string socket_path = agent.socket_path;
  Mode mode = {LongLivedCgroupName(spec.id), /*freezable=*/true,
               [&](Sandbox&) { return absl::OkStatus(); }};
  absl::StatusOr<std::unique_ptr<Sandbox>> sandbox = Start(std::move(spec), std::move(plan), mode);
  if (!sandbox.ok())
    ::unlink(socket_path.c_str());
  else
    (*sandbox)->agent_socket_ = socket_path;
  return sandbox;
}

absl::StatusOr<std::unique_ptr<Sandbox>> Engine::Start(SandboxSpec spec,
                                                       std::unique_ptr<ChildPlan> plan,
                                                       const Mode& mode) const {
  std::unique_ptr<Sandbox> sandbox(new Sandbox());
  sandbox->id_ = spec.id;

  // 1. The template must exist (checked now; opened once PID 1 exists, see 7).
  BRIG_RETURN_IF_ERROR(CheckTemplateName(spec.template_name));
  // 2. A host uid/gid range of its own.
  BRIG_ASSIGN_OR_RETURN(IdRange ids, IdRange::Allocate(uid_slots_));
  sandbox->ids_.emplace(std::move(ids));
  BRIG_RETURN_IF_ERROR(mode.prepare(*sandbox));
  // 3. A cgroup with its limits, beneath brig's own, watched for OOM kills.
  BRIG_ASSIGN_OR_RETURN(sandbox->cgroup_,
                        cgroups_.Create(mode.cgroup_name, spec.limits, mode.freezable));
  BRIG_ASSIGN_OR_RETURN(sandbox->oom_, sandbox->cgroup_->WatchOom());
  // 4. Everything PID 1 will need is in `plan`, prepared beforehand: it may not allocate.
  plan->cgroup_tasks_files = sandbox->cgroup_->self_attach_files();
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return ErrnoError("socketpair", "PID 1 control");
  }
  sandbox->control_.reset(pair[0]);
  UniqueFd child_end(pair[1]);
  plan->control_fd = child_end.get();
  plan->keep_fds[0] = child_end.get();
  plan->keep_fds[1] = plan->uid_lock_fd = sandbox->ids_->lock_fd();

  // 5. PID 1, in new user, mount, PID, network, IPC and UTS namespaces (cgroup comes later,
  //    once it sits in its cgroup). It waits for step 7 before building anything.
  clone_args args = {};
  int pidfd = -1;
  args.flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
               CLONE_NEWUTS | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  if (int cgroup_fd = sandbox->cgroup_->clone_into_fd(); cgroup_fd >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(cgroup_fd);
  }
  long pid = ::syscall(SYS_clone3, &args, sizeof args);
  if (pid == 0) SandboxInitMain(*plan);
  if (pid < 0) return ErrnoError("clone3", "sandbox namespaces");
  sandbox->pid_ = static_cast<pid_t>(pid);
  sandbox->pidfd_.reset(pidfd);
  sandbox->started_ = Clock::now();
  if (spec.timeout) sandbox->deadline_ = sandbox->started_ + *spec.timeout;
  child_end.reset();

  // 6. Map its users to the range (it joins its v1 cgroups meanwhile, see cgroups.h).
  BRIG_RETURN_IF_ERROR(sandbox->ids_->WriteMaps(sandbox->pid_));
  // 7. Hand it the template layers, id-mapped for its user namespace, and let it go. (Checking
  //    the template here rather than first overlaps it with PID 1 joining its cgroups.)
  BRIG_ASSIGN_OR_RETURN(TemplatePaths layers, EnsureTemplate(state_dir_, spec.template_name));
  BRIG_ASSIGN_OR_RETURN(UniqueFd userns,
                        OpenFd(absl::StrCat("/proc/", sandbox->pid_, "/ns/user"), O_RDONLY));
  BRIG_ASSIGN_OR_RETURN(LayerMounts mounts, OpenLayers(layers, userns.get()));
  BRIG_RETURN_IF_ERROR(SendGo(sandbox->control_.get(), mounts));
  return sandbox;
}

absl::StatusOr<std::unique_ptr<Sandbox>> Engine::Adopt(const std::string& id, pid_t pid,
                                                       const std::string& agent_socket) const {
  std::unique_ptr<Sandbox> sandbox(new Sandbox());
  sandbox->id_ = id;
  sandbox->pid_ = pid;
  sandbox->pidfd_.reset(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!sandbox->pidfd_) {
    sandbox->pid_ = -1;
    return absl::NotFoundError(absl::StrCat("sandbox ", id, ": its PID 1 (", pid, ") is gone"));
  }
  // The pidfd pins the process; check it is this sandbox's PID 1, then that it did not exit
  // (and its pid get reused) between pidfd_open and the check.
  absl::StatusOr<std::string> cgroups = ReadFile(absl::StrCat("/proc/", pid, "/cgroup"));
  const std::string name = LongLivedCgroupName(id);
  if (!cgroups.ok() || cgroups->find("/" + name + "\n") == std::string::npos ||
      ::syscall(SYS_pidfd_send_signal, sandbox->pidfd_.get(), 0, nullptr, 0) != 0) {
    sandbox->reaped_ = true;  // not ours to kill
    return absl::NotFoundError(
        absl::StrCat("sandbox ", id, ": process ", pid, " is not its PID 1"));
  }
  BRIG_ASSIGN_OR_RETURN(sandbox->cgroup_, cgroups_.Open(name));
  BRIG_ASSIGN_OR_RETURN(sandbox->oom_, sandbox->cgroup_->WatchOom());
  sandbox->agent_socket_ = agent_socket;
  sandbox->started_ = Clock::now();
  return sandbox;
}

absl::Status Engine::Discard(const std::string& id, const std::string& agent_socket) const {
  ::unlink(agent_socket.c_str());
  const std::string name = LongLivedCgroupName(id);
  absl::StatusOr<std::unique_ptr<SandboxCgroup>> cgroup = cgroups_.Open(name);
  if (!cgroup.ok()) return cgroups_.RemoveStale(name);
  (void)(*cgroup)->Freeze(false);  // frozen tasks act on SIGKILL only once thawed
  return (*cgroup)->Remove();
}

absl::Status Engine::SweepStale() const {
  absl::Status first;
  for (const std::string& parent : cgroups_.ParentDirs()) {
    DIR* dir = ::opendir(parent.c_str());
    if (dir == nullptr) continue;
    std::vector<std::string> stale;
    while (dirent* e = ::readdir(dir)) {
      absl::string_view name = e->d_name;
      if (name.rfind(kOneShotPrefix, 0) != 0) continue;
      absl::string_view rest = name.substr(kOneShotPrefix.size());
      int owner = 0;
      if (!absl::SimpleAtoi(rest.substr(0, rest.find('-')), &owner) || owner <= 0) continue;
      if (::kill(owner, 0) != 0 && errno == ESRCH) stale.emplace_back(name);
    }
    ::closedir(dir);
    for (const std::string& name : stale) {
      absl::Status s = cgroups_.RemoveStale(name);
      if (first.ok()) first = s;
    }
  }
  return first;
}

Sandbox::~Sandbox() {
  if (pid_ > 0 && !reaped_) {
    ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
    siginfo_t info;
    while (::waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &info, WEXITED) != 0 &&
           errno == EINTR) {
    }
  }
  // cgroup_'s destructor kills anything left and removes the directories.
  if (!agent_socket_.empty()) ::unlink(agent_socket_.c_str());
}

absl::Status Sandbox::Pause() {
  if (paused_since_) return absl::OkStatus();
  BRIG_RETURN_IF_ERROR(Annotate(cgroup_->Freeze(true), absl::StrCat("pause ", id_)));
  paused_since_ = Clock::now();
  return absl::OkStatus();
}

absl::Status Sandbox::Resume() {
  if (!paused_since_) return absl::OkStatus();
  BRIG_RETURN_IF_ERROR(Annotate(cgroup_->Freeze(false), absl::StrCat("resume ", id_)));
  // The time spent paused does not count against the sandbox's lifetime.
  if (deadline_) *deadline_ += Clock::now() - *paused_since_;
  paused_since_.reset();
  return absl::OkStatus();
}

void Sandbox::Detach() {
  reaped_ = true;  // nothing left for the destructor to kill or reap
  if (cgroup_) cgroup_->Release();
  agent_socket_.clear();
  // The launcher's copy of the uid-range lock closes with ids_; PID 1's copy keeps the range.
}

absl::Status Sandbox::Signal(int sig) {
  if (::syscall(SYS_pidfd_send_signal, pidfd_.get(), sig, nullptr, 0) != 0) {
    return ErrnoError("pidfd_send_signal", absl::StrCat("PID 1 of ", id_));
  }
  return absl::OkStatus();
}

absl::Status Sandbox::Kill() {
  // SIGKILL to PID 1 tears down the whole PID namespace; the cgroup catches anything else.
  absl::Status s = Signal(SIGKILL);
  absl::Status c = cgroup_->KillAll();
  // Frozen tasks act on SIGKILL only once thawed (cgroup v1).
  if (paused_since_) {
    (void)cgroup_->Freeze(false);
    paused_since_.reset();
  }
  return s.ok() ? c : s;
}

void Sandbox::HandleReport(const ChildReport& report) {
  switch (report.kind) {
    case ChildReport::kSetupFailed:
      setup_error_ = StepError(report);
      break;
    case ChildReport::kExecFailed:
      exec_errno_ = report.error;
      exec_error_ = ErrnoError("exec", "", report.error);
      break;
    case ChildReport::kCommandExited:
      command_status_ = report.wait_status;
      break;
    default:
      break;
  }
}

void Sandbox::WaitStep(int forward_signals_fd, int timeout_ms) {
  pollfd fds[4] = {{pidfd_.get(), POLLIN, 0},
                   {control_ ? control_.get() : -1, POLLIN, 0},
                   {forward_signals_fd, POLLIN, 0},
                   {out_of_memory_ ? -1 : oom_.get(), POLLIN, 0}};
  int n = ::poll(fds, 4, timeout_ms);
  if (n < 0 && errno != EINTR) {
    reaped_ = true;  // cannot wait any more; the destructor's waitid still reaps
    return;
  }
  if (fds[1].revents != 0) {
    DrainReports();
    if (fds[1].revents & (POLLHUP | POLLERR)) control_.reset();
  }
  if (fds[2].revents & POLLIN) {
    signalfd_siginfo si;
    if (::read(forward_signals_fd, &si, sizeof si) == sizeof si) {
      (void)Signal(static_cast<int>(si.ssi_signo));
    }
  }
  if (fds[3].revents & POLLIN) {
    // A memory limit breach ends the whole sandbox, not just the process the kernel chose.
    out_of_memory_ = true;
    (void)Kill();
  }
  if (fds[0].revents & POLLIN) {
    // An adopted PID 1 is not this process's child (ECHILD): its parent reaps it.
    if (::waitid(P_PIDFD, static_cast<id_t>(pidfd_.get()), &init_info_, WEXITED) == 0 ||
        errno == ECHILD) {
      reaped_ = true;
    }
  }
}

void Sandbox::DrainReports() {
  ChildReport report;
  while (control_ &&
         ::recv(control_.get(), &report, sizeof report, MSG_DONTWAIT) == sizeof report) {
    HandleReport(report);
  }
}

std::optional<RunOutcome> Sandbox::Poll() {
  if (!reaped_) WaitStep(-1, 0);
  if (!reaped_) return std::nullopt;
  return Finish();
}

RunOutcome Sandbox::Wait(int forward_signals_fd) {
  while (!reaped_) {
    int timeout_ms = -1;
    if (deadline_ && !timed_out_ && !paused_since_) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline_ - Clock::now());
      if (left.count() <= 0) {
        timed_out_ = true;
        (void)Kill();
        continue;
      }
      timeout_ms = static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
    }
    WaitStep(forward_signals_fd, timeout_ms);
  }
  return Finish();
}

RunOutcome Sandbox::Finish() {
  DrainReports();
  const bool timed_out = timed_out_, out_of_memory = out_of_memory_;
  const siginfo_t& init_info = init_info_;
  RunOutcome out;
  out.wall = Clock::now() - started_;
  if (absl::StatusOr<CgroupUsage> usage = cgroup_->ReadUsage(); usage.ok()) out.usage = *usage;
  (void)cgroup_->Remove();
  if (timed_out) {
    out.kind = RunOutcome::Kind::kTimedOut;
  } else if (out_of_memory) {
    out.kind = RunOutcome::Kind::kOutOfMemory;
    out.signal = SIGKILL;
  } else if (setup_error_) {
    out.kind = RunOutcome::Kind::kSetupFailed;
    out.error = *setup_error_;
  } else if (exec_error_) {
    out.kind = RunOutcome::Kind::kExecFailed;
    out.error = *exec_error_;
  } else if (command_status_ && WIFEXITED(*command_status_)) {
    out.kind = RunOutcome::Kind::kExited;
    out.exit_code = WEXITSTATUS(*command_status_);
  } else {
    // Killed by a signal, or PID 1 itself died before reporting (killed from outside, or by
    // the OOM killer).
    out.signal = command_status_ ? WTERMSIG(*command_status_)
                                 : (init_info.si_code == CLD_EXITED ? 0 : init_info.si_status);
    bool oom = out.usage.oom_kills > 0 && (out.signal == SIGKILL || !command_status_);
    out.kind = oom ? RunOutcome::Kind::kOutOfMemory : RunOutcome::Kind::kSignaled;
    if (!command_status_ && !oom && init_info.si_code == CLD_EXITED) {
      out.kind = RunOutcome::Kind::kSetupFailed;
      out.error = absl::InternalError("the sandbox's PID 1 exited without a report");
    }
  }
  return out;
}

}  // namespace brig
