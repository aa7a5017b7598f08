#include "engine/command.h"

#include <linux/close_range.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/files.h"
#include "engine/caps.h"
#include "engine/landlock.h"
#include "engine/restricted.h"
#include "engine/seccomp.h"

namespace brig {
namespace {

// execvp's search, done here so the restricted zone only has to try paths.
std::vector<std::string> ExecCandidates(const std::string& command,
                                        const std::vector<std::string>& env) {
  if (command.find('/') != std::string::npos) return {command};
  std::string path_var = "/usr/local/bin:/usr/bin:/bin";
  for (const std::string& kv : env) {
    if (kv.rfind("PATH=", 0) == 0) path_var = kv.substr(5);
  }
  std::vector<std::string> out;
  for (absl::string_view dir : absl::StrSplit(path_var, ':')) {
    out.push_back(absl::StrCat(dir.empty() ? "." : dir, "/", command));
  }
  return out;
}

int LastCapability() {
  static const int last = [] {
    int value = 63;
    absl::StatusOr<std::string> text = ReadFile("/proc/sys/kernel/cap_last_cap");
    if (text.ok()) (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &value);
    return value;
  }();
  return last;
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

}  // namespace

pid_t SpawnCommand(const CommandPlan& plan, int report_fd) {
  pid_t pid = ::vfork();
  if (pid == 0) RunCommand(plan, report_fd);
  return pid;
}

std::vector<char*> ExecVector(std::vector<std::string>& storage) {
  std::vector<char*> views;
  views.reserve(storage.size() + 1);
  for (std::string& s : storage) views.push_back(s.data());
  views.push_back(nullptr);
  return views;
}

void MakeCommandPlan(const ProcessSpec& process, const std::string& hostname, uint64_t open_files,
                     CommandPlan& c) {
  UserIdentity who = IdentityOf(process.user);
  c.uid = who.uid;
  c.gid = who.gid;
  c.workdir = process.workdir.empty() ? who.home : process.workdir;
  c.open_files = open_files;
  for (int n = 0; n < 3; ++n) c.stdio[n] = process.stdio[n];
  c.landlock_abi = LandlockAbi();
  c.last_capability = LastCapability();
  c.argv_storage = process.argv;
  c.env_storage = BuildEnvironment(process, hostname);
  c.candidates = ExecCandidates(process.argv[0], c.env_storage);
  c.argv = ExecVector(c.argv_storage);
  c.envp = ExecVector(c.env_storage);
  absl::Span<const sock_filter> program = SandboxFilter();
  c.seccomp.len = static_cast<unsigned short>(program.size());
  c.seccomp.filter = const_cast<sock_filter*>(program.data());  // the kernel only reads it
}

[[noreturn]] void RunCommand(const CommandPlan& c, int report_fd) {
  auto fail = [&](Step step) {
    StepResult r = Failed(step);
    SendReport(report_fd,
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
  // A terminal the agent made for this command (inside the sandbox's own devpts) becomes its
  // controlling terminal, as interactive programs expect.
  if (c.controlling_tty && ::ioctl(0, TIOCSCTTY, 0) != 0) fail(Step::kSession);
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

}  // namespace brig
