// The restricted zone: code that runs in a sandbox's processes after clone and before exec.
//
// Rules (docs/architecture.md, "Between fork and exec"): no allocation, no locks, no logging,
// no exceptions; only system calls on data the launcher prepared beforehand. Each step reports
// failure as {step, errno}; the launcher turns that into an absl::Status naming the step.
// Helpers here are async-signal-safe.
#pragma once

#include <cerrno>
#include <cstdint>

namespace brig {

enum class Step : int32_t {
  kNone = 0,
  kJoinCgroups,
  kWaitForLauncher,
  kBecomeRoot,
  kCgroupNamespace,
  kPrivateMounts,
  kScratchTmpfs,
  kScratchDirs,
  kAttachLayers,
  kRootOverlay,
  kUsrOverlay,
  kProc,
  kMaskProc,
  kDev,
  kDevPts,
  kDevShm,
  kEtcFiles,
  kPivotRoot,
  kLoopback,
  kHostname,
  kBlockSignals,
  kForkCommand,
  kStdio,
  kSession,
  kRlimits,
  kCapabilities,
  kIdentity,
  kWorkdir,
  kLandlock,
  kNoNewPrivs,
  kSeccomp,
  kExec,
  kExecAgent,
};
const char* StepName(Step step);

// A step's outcome: error == 0 is success.
struct StepResult {
  Step step = Step::kNone;
  int error = 0;
  bool ok() const { return error == 0; }
};
inline StepResult Ok() { return {}; }
inline StepResult Failed(Step step) { return {step, errno != 0 ? errno : EINVAL}; }

// The exit code of a sandbox process that failed a set-up step (also what `brig run` exits
// with for its own errors).
inline constexpr int kSetupFailedExit = 125;

// What a sandbox's PID 1 tells its launcher, one SOCK_SEQPACKET message each.
struct ChildReport {
  enum Kind : int32_t { kSetupFailed = 1, kExecFailed = 2, kCommandExited = 3 };
  int32_t kind;
  int32_t step;         // Step, for kSetupFailed and kExecFailed
  int32_t error;        // errno, for kSetupFailed and kExecFailed
  int32_t wait_status;  // waitpid status of the command, for kCommandExited
};

// Sends a report; ignores failure (the launcher also watches PID 1's exit).
void SendReport(int fd, const ChildReport& report);

// Length of a NUL-terminated string, without libc (usable anywhere).
inline size_t RawStrlen(const char* s) {
  size_t n = 0;
  while (s[n] != '\0') ++n;
  return n;
}

}  // namespace brig
