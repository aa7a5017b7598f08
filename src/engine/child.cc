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
#include "engine/net.h"

namespace brig {
namespace {

// Closes every descriptor from 3 up except those in `keep` (-1 entries are ignored).
void CloseAllBut(const int (&keep)[7]) {
  int sorted[7];
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
  SendReport(control_fd,
             {ChildReport::kSetupFailed, static_cast<int32_t>(result.step), result.error, 0});
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

// Long-lived sandboxes: the rest of PID 1's life is the agent's. It must outlive the launcher
// (no parent-death signal) and keep its socket and uid-range lock across the exec.
[[noreturn]] void BecomeAgent(const ChildPlan& plan) {
  // The launcher's stdio is not the agent's: it may be a terminal or a pipe someone waits on.
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0 || ::dup2(null, 0) < 0 || ::dup2(null, 1) < 0 || ::dup2(null, 2) < 0 ||
      ::prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0) != 0 ||
      ::fcntl(plan.agent_listen_fd, F_SETFD, 0) != 0 ||
      ::fcntl(plan.uid_lock_fd, F_SETFD, 0) != 0) {
    FailSetup(plan.control_fd, Failed(Step::kExecAgent));
  }
  ::syscall(SYS_execveat, plan.agent_exe, "", plan.agent_argv.data(), plan.agent_envp.data(),
            AT_EMPTY_PATH);
  FailSetup(plan.control_fd, Failed(Step::kExecAgent));
}

}  // namespace

const char* StepName(Step step) {
  switch (step) {
    case Step::kNone:
      return "none";
    case Step::kJoinCgroups:
      return "join cgroups";
    case Step::kWaitForLauncher:
      return "wait for launcher";
    case Step::kBecomeRoot:
      return "become namespace root";
    case Step::kCgroupNamespace:
      return "enter cgroup namespace";
    case Step::kPrivateMounts:
      return "make mounts private";
    case Step::kScratchTmpfs:
      return "mount writable-layer tmpfs";
    case Step::kScratchDirs:
      return "create layer directories";
    case Step::kAttachLayers:
      return "attach template layers";
    case Step::kRootOverlay:
      return "mount root overlay";
    case Step::kUsrOverlay:
      return "mount /usr overlay";
    case Step::kProc:
      return "mount /proc";
    case Step::kMaskProc:
      return "mask /proc entries";
    case Step::kDev:
      return "populate /dev";
    case Step::kDevPts:
      return "mount /dev/pts";
    case Step::kDevShm:
      return "mount /dev/shm";
    case Step::kEtcFiles:
      return "write /etc/hosts";
    case Step::kPivotRoot:
      return "pivot_root";
    case Step::kLoopback:
      return "bring up loopback";
    case Step::kHostname:
      return "set hostname";
    case Step::kBlockSignals:
      return "set signal mask";
    case Step::kForkCommand:
      return "fork command";
    case Step::kStdio:
      return "set up stdio";
    case Step::kSession:
      return "setsid";
    case Step::kRlimits:
      return "set rlimits";
    case Step::kCapabilities:
      return "bound capabilities";
    case Step::kIdentity:
      return "switch user";
    case Step::kWorkdir:
      return "change to working directory";
    case Step::kLandlock:
      return "apply Landlock";
    case Step::kNoNewPrivs:
      return "set no_new_privs";
    case Step::kSeccomp:
      return "load seccomp filter";
    case Step::kExec:
      return "exec";
    case Step::kExecAgent:
      return "exec agent";
  }
  return "unknown step";
}

void SendReport(int fd, const ChildReport& report) {
  ssize_t n;
  do {
    n = ::send(fd, &report, sizeof report, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
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
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    FailSetup(control, Failed(Step::kBecomeRoot));
  }
  pollfd launcher = {control, POLLRDHUP, 0};
  if (::poll(&launcher, 1, 0) > 0 && (launcher.revents & (POLLRDHUP | POLLHUP))) {
    ::_exit(kSetupFailedExit);
  }
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
  if (plan.agent_exe >= 0) BecomeAgent(plan);
  sigset_t all;
  sigfillset(&all);
  if (::sigprocmask(SIG_BLOCK, &all, nullptr) != 0) FailSetup(control, Failed(Step::kBlockSignals));

  // PID 1 stays suspended until the command execs or exits (command.h).
  pid_t command = SpawnCommand(plan.command, plan.control_fd);
  if (command < 0) FailSetup(control, Failed(Step::kForkCommand));
  ReapAndForward(control, command);
}

}  // namespace brig
