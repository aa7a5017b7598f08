#include <signal.h>
#include <sys/signalfd.h>
#include <sys/utsname.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "base/unique_fd.h"
#include "cli/commands.h"
#include "cli/units.h"
#include "engine/landlock.h"
#include "engine/sandbox.h"
#include "nlohmann/json.hpp"

namespace brig {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "brig: %s\n", std::string(status.message()).c_str());
  return kExitBrigError;
}

absl::StatusOr<std::pair<SandboxSpec, ProcessSpec>> SpecsFromFlags(const RunFlags& f) {
  SandboxSpec sandbox;
  ProcessSpec process;
  BRIG_ASSIGN_OR_RETURN(sandbox.limits.memory_bytes, ParseSize(f.memory));
  BRIG_ASSIGN_OR_RETURN(sandbox.limits.disk_bytes, ParseSize(f.disk));
  sandbox.limits.cpus = f.cpus;
  sandbox.limits.pids = f.pids;
  if (!f.timeout.empty()) {
    BRIG_ASSIGN_OR_RETURN(sandbox.timeout, ParseDuration(f.timeout));
  }
  if (f.user == "user") {
    process.user = SandboxUser::kUser;
  } else if (f.user == "root") {
    process.user = SandboxUser::kRoot;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--user must be \"user\" or \"root\", not \"", f.user, "\""));
  }
  process.argv = f.command;
  process.env = f.env;
  process.workdir = f.workdir;
  BRIG_RETURN_IF_ERROR(Validate(sandbox, process));
  return std::make_pair(std::move(sandbox), std::move(process));
}

const char* KindName(RunOutcome::Kind kind) {
  switch (kind) {
    case RunOutcome::Kind::kExited:
      return "exited";
    case RunOutcome::Kind::kSignaled:
      return "signaled";
    case RunOutcome::Kind::kTimedOut:
      return "timed_out";
    case RunOutcome::Kind::kOutOfMemory:
      return "out_of_memory";
    case RunOutcome::Kind::kSetupFailed:
      return "setup_failed";
    case RunOutcome::Kind::kExecFailed:
      return "exec_failed";
  }
  return "unknown";
}

absl::Status WriteStats(const std::string& path, const std::string& id, const RunOutcome& out) {
  nlohmann::json j = {
      {"id", id},
      {"outcome", KindName(out.kind)},
      {"exit_code", ExitCodeFor(out)},
      {"signal", out.signal},
      {"wall_ms", std::chrono::duration<double, std::milli>(out.wall).count()},
      {"cpu_usec", out.usage.cpu_usec},
      {"memory_peak_bytes", out.usage.memory_peak_bytes},
      {"oom_kills", out.usage.oom_kills},
      {"nr_throttled", out.usage.nr_throttled},
      {"throttled_usec", out.usage.throttled_usec},
  };
  std::ofstream file(path);
  file << j.dump() << "\n";
  file.close();
  if (!file) return absl::UnavailableError(absl::StrCat("cannot write stats to ", path));
  return absl::OkStatus();
}

void Explain(const RunOutcome& out, const RunFlags& f) {
  switch (out.kind) {
    case RunOutcome::Kind::kTimedOut:
      std::fprintf(stderr, "brig: timed out after %s; the sandbox was killed\n", f.timeout.c_str());
      break;
    case RunOutcome::Kind::kOutOfMemory:
      std::fprintf(stderr, "brig: out of memory: the command exceeded --memory %s and was killed\n",
                   f.memory.c_str());
      break;
    case RunOutcome::Kind::kSetupFailed:
      std::fprintf(stderr, "brig: %s\n", std::string(out.error.message()).c_str());
      break;
    case RunOutcome::Kind::kExecFailed:
      std::fprintf(stderr, "brig: %s: %s\n", f.command[0].c_str(),
                   absl::IsNotFound(out.error) ? "command not found" : "cannot execute");
      break;
    default:
      if (out.usage.oom_kills > 0) {
        std::fprintf(stderr, "brig: note: the OOM killer killed %llu process(es) in the sandbox\n",
                     static_cast<unsigned long long>(out.usage.oom_kills));
      }
      break;
  }
}

}  // namespace

std::string DefaultStateDir() {
  const char* env = std::getenv("BRIG_STATE_DIR");
  return env != nullptr && *env != '\0' ? env : "/var/lib/brig";
}

int RunCommand(const RunFlags& flags) {
  auto specs = SpecsFromFlags(flags);
  if (!specs.ok()) return Fail(specs.status());
  auto engine = Engine::Open(flags.state_dir);
  if (!engine.ok()) return Fail(engine.status());

  // Signals meant for the command are taken synchronously and forwarded to it.
  sigset_t forwarded;
  sigemptyset(&forwarded);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) sigaddset(&forwarded, sig);
  sigset_t previous;
  ::sigprocmask(SIG_BLOCK, &forwarded, &previous);
  UniqueFd signals(::signalfd(-1, &forwarded, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signals) {
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    return Fail(ErrnoError("signalfd", "forwarded signals"));
  }

  auto sandbox = (*engine)->Launch(specs->first, specs->second);
  if (!sandbox.ok()) return Fail(sandbox.status());
  // Cleaning up after crashed runs costs nothing here: the sandbox is building itself on the
  // other core meanwhile.
  (void)(*engine)->SweepStale();
  RunOutcome out = (*sandbox)->Wait(signals.get());
  std::string id = (*sandbox)->id();
  sandbox->reset();
  Explain(out, flags);
  if (!flags.stats_file.empty()) {
    absl::Status written = WriteStats(flags.stats_file, id, out);
    if (!written.ok()) return Fail(written);
  }
  return ExitCodeFor(out);
}

int GcCommand(const std::string& state_dir) {
  auto engine = Engine::Open(state_dir);
  if (!engine.ok()) return Fail(engine.status());
  absl::Status swept = (*engine)->SweepStale();
  if (!swept.ok()) return Fail(swept);
  return 0;
}

int CheckCommand(const std::string& state_dir) {
  auto engine = Engine::Open(state_dir);
  if (!engine.ok()) return Fail(engine.status());
  utsname host = {};
  ::uname(&host);
  std::printf("kernel: %s %s\n", host.sysname, host.release);
  std::printf("cgroups: %s\n", (*engine)->cgroups().Describe().c_str());
  int landlock = LandlockAbi();
  std::printf("landlock: %s\n", landlock > 0 ? absl::StrCat("ABI ", landlock).c_str()
                                             : "unavailable (layer skipped)");
  SandboxSpec spec;
  ProcessSpec process;
  process.argv = {"/bin/true"};
  auto sandbox = (*engine)->Launch(spec, process);
  if (!sandbox.ok()) return Fail(sandbox.status());
  RunOutcome out = (*sandbox)->Wait();
  if (out.kind != RunOutcome::Kind::kExited || out.exit_code != 0) {
    std::fprintf(stderr, "brig: a test sandbox failed: %s\n",
                 out.error.ok() ? KindName(out.kind) : std::string(out.error.message()).c_str());
    return kExitBrigError;
  }
  std::printf("sandbox: ok (%.2f ms)\n",
              std::chrono::duration<double, std::milli>(out.wall).count());
  return 0;
}

}  // namespace brig
