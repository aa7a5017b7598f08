#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine/seccomp.h"

namespace brig {
namespace {

// Generated at build time from CompileSandboxFilter() by tools/seccomp_gen.
constexpr sock_filter kProgram[] = {
#include "seccomp_program.inc"
};

}  // namespace

absl::Span<const sock_filter> SandboxFilter() { return absl::MakeConstSpan(kProgram); }

int LoadFilter(const sock_fprog& program) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -1;
  return static_cast<int>(::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &program));
}

}  // namespace brig
