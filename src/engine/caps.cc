#include "engine/caps.h"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace brig {
namespace {

constexpr unsigned long long kKept =
    (1ull << CAP_CHOWN) | (1ull << CAP_DAC_OVERRIDE) | (1ull << CAP_FOWNER) | (1ull << CAP_FSETID) |
    (1ull << CAP_KILL) | (1ull << CAP_SETGID) | (1ull << CAP_SETUID) | (1ull << CAP_SETPCAP) |
    (1ull << CAP_NET_BIND_SERVICE);

}  // namespace

int BoundCapabilities(int last_capability) {
  for (int cap = 0; cap <= last_capability; ++cap) {
    if (kKept & (1ull << cap)) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return -1;
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) return -1;
  // Narrow the current sets as well, so the kept set holds before exec too.
  __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return -1;
  for (int i = 0; i < 2; ++i) {
    auto kept = static_cast<uint32_t>(kKept >> (32 * i));
    data[i].effective &= kept;
    data[i].permitted &= kept;
    data[i].inheritable = 0;
  }
  return static_cast<int>(::syscall(SYS_capset, &header, data));
}

int SwitchIdentity(uid_t uid, gid_t gid, bool with_group) {
  gid_t groups[1] = {gid};
  if (::syscall(SYS_setgroups, with_group ? 1 : 0, groups) != 0) return -1;
  if (::syscall(SYS_setresgid, gid, gid, gid) != 0) return -1;
  return static_cast<int>(::syscall(SYS_setresuid, uid, uid, uid));
}

}  // namespace brig
