#include "engine/child.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/caps.h"
#include "engine/landlock.h"
#include "engine/net.h"
#include "engine/seccomp.h"

namespace brig {
namespace {

constexpr int kSetupFailedExit = 125;

// Closes every descriptor from 3 up except those in `keep` (-1 entries are ignored).
void CloseAllBut(const int (&keep)[5]) {
  int sorted[5];
  int n = 0;
  for (int fd : keep) {
    if (fd < 3) continue;
    int i = n++;
    while (i > 0 && sorted[i - 1] > fd) {
      sorted[i] = sorted[i - 1];
      --i;
    }
    sorted[i] = fd;
  }
  unsigned first = 3;
  for (int i = 0; i < n; ++i) {
    if (static_cast<unsigned>(sorted[i]) > first) {
      ::syscall(SYS_close_range, first, static_cast<unsigned>(sorted[i]) - 1, 0u);
    }
    first = static_cast<unsigned>(sorted[i]) + 1;
  }
  ::syscall(SYS_close_range, first, ~0u, 0u);
}

[[noreturn]] void FailSetup(int control_fd, StepResult result) {
  SendReport(control_fd, {ChildReport::kSetupFailed, static_cast<int32_t>(result.step),
                          result.error, 0});
  ::_exit(kSetupFailedExit);
}

// Receives the launcher's go-ahead with the two template layer mounts attached.
StepResult WaitForLauncher(int control_fd, int* skeleton_fd, int* usr_fd) {
  char byte = 0;
  iovec iov = {&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(control_fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    if (n == 0) errno = EPIPE;  // the launcher went away
    return Failed(Step::kWaitForLauncher);
  }
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(2 * sizeof(int))) {
    errno = EPROTO;
    return Failed(Step::kWaitForLauncher);
  }
  int fds[2];
  __builtin_memcpy(fds, CMSG_DATA(c), sizeof fds);
  *skeleton_fd = fds[0];
  *usr_fd = fds[1];
  return Ok();
}

StepResult BecomeNamespaceRoot() {
  if (SwitchIdentity(0, 0, /*with_group=*/false) != 0) return Failed(Step::kBecomeRoot);
  return Ok();
}

int ApplyRlimits(uint64_t open_files) {
  rlimit nofile;
  if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0) return -1;
  // The hard limit can only go down without CAP_SYS_RESOURCE in the host's namespace.
  rlim_t want = open_files < nofile.rlim_max ? open_files : nofile.rlim_max;
  nofile = {want, want};
  rlimit none = {0, 0};
  if (::setrlimit(RLIMIT_NOFILE, &nofile) != 0 || ::setrlimit(RLIMIT_CORE, &none) != 0 ||
      ::setrlimit(RLIMIT_RTPRIO, &none) != 0) {
    return -1;
  }
  return 0;
}

// Tries each candidate path as execvp would: skip the ones that do not exist, remember a
// permission error, stop at any other error. Returns only on failure, with errno set.
void ExecCommand(const CommandPlan& plan) {
  int remembered = ENOENT;
  for (const std::string& path : plan.candidates) {
    ::execve(path.c_str(), plan.argv.data(), plan.envp.data());
    if (errno == EACCES) {
      remembered = EACCES;
    } else if (errno != ENOENT && errno != ENOTDIR) {
      return;
    }
  }
  errno = remembered;
}

[[noreturn]] void CommandMain(const ChildPlan& plan) {
  const CommandPlan& c = plan.command;
  auto fail = [&](Step step) {
    StepResult r = Failed(step);
    SendReport(plan.control_fd,
               {step == Step::kExec ? ChildReport::kExecFailed : ChildReport::kSetupFailed,
                static_cast<int32_t>(r.step), r.error, 0});
    ::_exit(step == Step::kExec ? (r.error == ENOENT ? 127 : 126) : kSetupFailedExit);
  };
  for (int n = 0; n < 3; ++n) {
    if (c.stdio[n] >= 0 && ::dup2(c.stdio[n], n) < 0) fail(Step::kStdio);
  }
  // Only 0, 1 and 2 cross the exec.
  if (::syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) != 0) fail(Step::kStdio);
  sigset_t none;
  sigemptyset(&none);
  if (::sigprocmask(SIG_SETMASK, &none, nullptr) != 0) fail(Step::kBlockSignals);
  // Its own session: no controlling terminal shared with the host, so no TIOCSTI games.
  if (::setsid() < 0) fail(Step::kSession);
  if (ApplyRlimits(c.open_files) != 0) fail(Step::kRlimits);
  if (BoundCapabilities(c.last_capability) != 0) fail(Step::kCapabilities);
  if (SwitchIdentity(c.uid, c.gid, /*with_group=*/true) != 0) fail(Step::kIdentity);
  if (::chdir(c.workdir.c_str()) != 0) fail(Step::kWorkdir);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail(Step::kNoNewPrivs);
  if (RestrictSelf(c.landlock_abi) != 0) fail(Step::kLandlock);
  if (LoadFilter(c.seccomp) != 0) fail(Step::kSeccomp);
  ExecCommand(c);
  fail(Step::kExec);
  ::_exit(kSetupFailedExit);  // not reached
}

// PID 1's life after the command starts. Signals are all blocked and taken synchronously.
[[noreturn]] void ReapAndForward(int control_fd, pid_t command) {
  sigset_t all;
  sigfillset(&all);
  for (;;) {
    siginfo_t info;
    int sig = ::sigwaitinfo(&all, &info);
    if (sig < 0) continue;
    if (sig != SIGCHLD) {
      // Only the launcher's signals (sent from outside: si_pid reads 0 here) are forwarded.
      if (info.si_pid == 0) ::kill(-command, sig);
      continue;
    }
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      if (pid == command) {
        SendReport(control_fd, {ChildReport::kCommandExited, 0, 0, status});
        ::_exit(0);  // the kernel now kills everything left in this PID namespace
      }
    }
  }
}

}  // namespace

const char* StepName(Step step) {
  switch (step) {
    case Step::kNone: return "none";
    case Step::kJoinCgroups: return "join cgroups";
    case Step::kWaitForLauncher: return "wait for launcher";
    case Step::kBecomeRoot: return "become namespace root";
    case Step::kCgroupNamespace: return "enter cgroup namespace";
    case Step::kPrivateMounts: return "make mounts private";
    case Step::kScratchTmpfs: return "mount writable-layer tmpfs";
    case Step::kScratchDirs: return "create layer directories";
    case Step::kAttachLayers: return "attach template layers";
    case Step::kRootOverlay: return "mount root overlay";
    case Step::kUsrOverlay: return "mount /usr overlay";
    case Step::kProc: return "mount /proc";
    case Step::kMaskProc: return "mask /proc entries";
    case Step::kDev: return "populate /dev";
    case Step::kDevPts: return "mount /dev/pts";
    case Step::kDevShm: return "mount /dev/shm";
    case Step::kEtcFiles: return "write /etc/hosts";
    case Step::kPivotRoot: return "pivot_root";
    case Step::kLoopback: return "bring up loopback";
    case Step::kHostname: return "set hostname";
    case Step::kBlockSignals: return "set signal mask";
    case Step::kForkCommand: return "fork command";
    case Step::kStdio: return "set up stdio";
    case Step::kSession: return "setsid";
    case Step::kRlimits: return "set rlimits";
    case Step::kCapabilities: return "bound capabilities";
    case Step::kIdentity: return "switch user";
    case Step::kWorkdir: return "change to working directory";
    case Step::kLandlock: return "apply Landlock";
    case Step::kNoNewPrivs: return "set no_new_privs";
    case Step::kSeccomp: return "load seccomp filter";
    case Step::kExec: return "exec";
  }
  return "unknown step";
}

void SendReport(int fd, const ChildReport& report) {
  ssize_t n;
  do {
    n = ::send(fd, &report, sizeof report, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
}

void FinalizePlan(ChildPlan& plan) {
  CommandPlan& c = plan.command;
  c.argv.clear();
  for (std::string& a : c.argv_storage) c.argv.push_back(a.data());
  c.argv.push_back(nullptr);
  c.envp.clear();
  for (std::string& e : c.env_storage) c.envp.push_back(e.data());
  c.envp.push_back(nullptr);
  c.seccomp.len = static_cast<unsigned short>(plan.filter.size());
  c.seccomp.filter = plan.filter.data();
}

void SandboxInitMain(const ChildPlan& plan) {
  const int control = plan.control_fd;
  // Die with the launcher; a launcher killed before this point is seen as EOF below (which
  // needs every copy of the launcher's end closed, this process's too).
  CloseAllBut(plan.keep_fds);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) ::_exit(kSetupFailedExit);

  for (const std::string& tasks : plan.cgroup_tasks_files) {
    int fd = ::open(tasks.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, "0", 1) != 1) FailSetup(control, Failed(Step::kJoinCgroups));
    ::close(fd);
  }
  int skeleton_fd = -1, usr_fd = -1;
  if (StepResult r = WaitForLauncher(control, &skeleton_fd, &usr_fd); !r.ok()) {
    FailSetup(control, r);
  }
  if (StepResult r = BecomeNamespaceRoot(); !r.ok()) FailSetup(control, r);
  // Changing credentials cleared the parent-death signal: set it again, then make sure the
  // launcher did not die in between (its end of the socket would be closed).
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) FailSetup(control, Failed(Step::kBecomeRoot));
  pollfd launcher = {control, POLLRDHUP, 0};
  if (::poll(&launcher, 1, 0) > 0 && (launcher.revents & (POLLRDHUP | POLLHUP))) ::_exit(kSetupFailedExit);
  if (::unshare(CLONE_NEWCGROUP) != 0) FailSetup(control, Failed(Step::kCgroupNamespace));
  if (StepResult r = BuildRootfs(plan.rootfs, skeleton_fd, usr_fd); !r.ok()) {
    FailSetup(control, r);
  }
  ::close(skeleton_fd);
  ::close(usr_fd);
  if (BringUpLoopback() != 0) FailSetup(control, Failed(Step::kLoopback));
  if (::sethostname(plan.hostname.data(), plan.hostname.size()) != 0) {
    FailSetup(control, Failed(Step::kHostname));
  }
  // PID 1 keeps namespace-root powers; nothing inside may ptrace it or read its memory.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  sigset_t all;
  sigfillset(&all);
  if (::sigprocmask(SIG_BLOCK, &all, nullptr) != 0) FailSetup(control, Failed(Step::kBlockSignals));

  // vfork, not fork(3): libc's fork takes locks that a launcher thread may have held when
  // this process was cloned from it, and copying the page tables costs more than the rest of
  // the command's set-up. PID 1 stays suspended until the command execs or exits.
  pid_t command = ::vfork();
  if (command < 0) FailSetup(control, Failed(Step::kForkCommand));
  if (command == 0) CommandMain(plan);
  ReapAndForward(control, command);
}

}  // namespace brig
