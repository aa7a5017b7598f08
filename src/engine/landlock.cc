#include "engine/landlock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace brig {
namespace {

// The uapi of Linux 6.12 (Debian 12's headers predate the net and scope fields).
struct RulesetAttr {
  uint64_t handled_access_fs;
  uint64_t handled_access_net;
  uint64_t scoped;
};
struct PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
} __attribute__((packed));

constexpr uint32_t kCreateRulesetVersion = 1u << 0;
constexpr int kRulePathBeneath = 1;

constexpr uint64_t kExecute = 1ull << 0, kWriteFile = 1ull << 1, kReadFile = 1ull << 2;
constexpr uint64_t kMakeChar = 1ull << 6, kMakeBlock = 1ull << 11;
constexpr uint64_t kTruncate = 1ull << 14, kIoctlDev = 1ull << 15;
constexpr uint64_t kScopeAbstractUnix = 1ull << 0, kScopeSignal = 1ull << 1;

uint64_t FsAccessFor(int abi) {
  uint64_t access = (1ull << 13) - 1;  // ABI 1: execute … make_sym
  if (abi >= 2) access |= 1ull << 13;  // refer
  if (abi >= 3) access |= kTruncate;
  if (abi >= 5) access |= kIoctlDev;
  return access;
}

long CreateRuleset(const RulesetAttr* attr, size_t size, uint32_t flags) {
  return ::syscall(SYS_landlock_create_ruleset, attr, size, flags);
}

// Lets the command reopen the files it was given as stdio (e.g. `echo x >/dev/stderr`), which
// live outside the sandbox's tree.
int AllowStdio(int ruleset, int abi) {
  for (int fd = 0; fd <= 2; ++fd) {
    struct stat st;
    if (::fstat(fd, &st) != 0) continue;
    if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode)) continue;  // pipes/sockets need no rule
    char path[32] = "/proc/self/fd/0";
    path[14] = static_cast<char>('0' + fd);
    int opath = ::open(path, O_PATH | O_CLOEXEC);
    if (opath < 0) continue;
    uint64_t file_access = kExecute | kWriteFile | kReadFile;
    if (abi >= 3) file_access |= kTruncate;
    if (abi >= 5) file_access |= kIoctlDev;
    PathBeneathAttr rule = {file_access, opath};
    long rc = ::syscall(SYS_landlock_add_rule, ruleset, kRulePathBeneath, &rule, 0);
    ::close(opath);
    if (rc != 0) return -1;
  }
  return 0;
}

}  // namespace

int LandlockAbi() {
  static const int abi = [] {
    long v = CreateRuleset(nullptr, 0, kCreateRulesetVersion);
    return v < 0 ? 0 : static_cast<int>(v);
  }();
  return abi;
}

int RestrictSelf(int abi) {
  if (abi <= 0) return 0;
  RulesetAttr attr = {};
  attr.handled_access_fs = FsAccessFor(abi);
  size_t size = sizeof attr.handled_access_fs;
  if (abi >= 4) size = offsetof(RulesetAttr, scoped);  // fs + net (net left unhandled here)
  if (abi >= 6) {
    attr.scoped = kScopeAbstractUnix | kScopeSignal;
    size = sizeof attr;
  }
  int ruleset = static_cast<int>(CreateRuleset(&attr, size, 0));
  if (ruleset < 0) return -1;
  int root = ::open("/", O_PATH | O_CLOEXEC | O_DIRECTORY);
  if (root < 0) {
    ::close(ruleset);
    return -1;
  }
  PathBeneathAttr everything = {attr.handled_access_fs & ~(kMakeChar | kMakeBlock), root};
  long rc = ::syscall(SYS_landlock_add_rule, ruleset, kRulePathBeneath, &everything, 0);
  ::close(root);
  if (rc == 0) rc = AllowStdio(ruleset, abi);
  if (rc == 0) rc = ::syscall(SYS_landlock_restrict_self, ruleset, 0);
  int saved = errno;
  ::close(ruleset);
  errno = saved;
  return rc == 0 ? 0 : -1;
}

}  // namespace brig
