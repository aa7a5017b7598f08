#include "engine/seccomp.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>

#include "base/unique_fd.h"

namespace brig {
namespace {

// Calls refused with EPERM, whatever their arguments. See docs/security.md for why each.
constexpr const char* kDenied[] = {
    // the kernel itself
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "iopl",
    "ioperm",
    "syslog",
    "acct",
    "swapon",
    "swapoff",
    "quotactl",
    "quotactl_fd",
    "nfsservctl",
    "lookup_dcookie",
    "uselib",
    "_sysctl",
    "vhangup",
    "fanotify_init",
    // io_uring: a large, fast-moving attack surface that bypasses this filter's view of calls
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    // keys are not namespaced
    "keyctl",
    "add_key",
    "request_key",
    // the host's clock
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    // file systems and namespaces: the sandbox's own are set up before this filter loads
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "unshare",
    "setns",
    // file handles bypass path-based confinement (the "shocker" escape)
    "open_by_handle_at",
    "name_to_handle_at",
};

constexpr uint64_t kNamespaceFlags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET |
                                     CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_NEWTIME;

struct CtxDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};

absl::Status Rule(scmp_filter_ctx ctx, uint32_t action, int nr, unsigned count,
                  const scmp_arg_cmp* args, const char* what) {
  int rc = seccomp_rule_add_array(ctx, action, nr, count, args);
  if (rc < 0) return ErrnoError("seccomp_rule_add", what, -rc);
  return absl::OkStatus();
}

absl::Status AddRules(scmp_filter_ctx ctx) {
  const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
  for (const char* name : kDenied) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    BRIG_RETURN_IF_ERROR(Rule(ctx, eperm, nr, 0, nullptr, name));
  }
  // clone3 passes flags in memory, out of the filter's sight: ENOSYS makes libc fall back to
  // clone, whose flags the next rule can check.
  BRIG_RETURN_IF_ERROR(Rule(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0, nullptr, "clone3"));
  // clone with any namespace flag: one rule per flag, since libseccomp compares for equality
  // under a mask and "any of these bits" needs one comparison each.
  for (uint64_t flag = 1; flag != 0; flag <<= 1) {
    if ((kNamespaceFlags & flag) == 0) continue;
    scmp_arg_cmp cmp = SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag);
    BRIG_RETURN_IF_ERROR(Rule(ctx, eperm, SCMP_SYS(clone), 1, &cmp, "clone(CLONE_NEW*)"));
  }
  // Device nodes: mknod of character and block devices.
  for (mode_t type : {S_IFCHR, S_IFBLK}) {
    scmp_arg_cmp mknod = SCMP_A1(SCMP_CMP_MASKED_EQ, S_IFMT, type);
    BRIG_RETURN_IF_ERROR(Rule(ctx, eperm, SCMP_SYS(mknod), 1, &mknod, "mknod"));
    scmp_arg_cmp mknodat = SCMP_A2(SCMP_CMP_MASKED_EQ, S_IFMT, type);
    BRIG_RETURN_IF_ERROR(Rule(ctx, eperm, SCMP_SYS(mknodat), 1, &mknodat, "mknodat"));
  }
  // Terminal injection into whatever terminal the sandbox's stdio reaches.
  for (unsigned long request : {TIOCSTI, TIOCLINUX}) {
    scmp_arg_cmp ioctl = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, request);
    BRIG_RETURN_IF_ERROR(Rule(ctx, eperm, SCMP_SYS(ioctl), 1, &ioctl, "ioctl(TIOCSTI)"));
  }
  // Packet sockets, and raw IP sockets (the type's low bits; SOCK_NONBLOCK etc. are above).
  scmp_arg_cmp packet = SCMP_A0(SCMP_CMP_EQ, AF_PACKET);
  BRIG_RETURN_IF_ERROR(Rule(ctx, eperm, SCMP_SYS(socket), 1, &packet, "socket(AF_PACKET)"));
  for (int family : {AF_INET, AF_INET6}) {
    scmp_arg_cmp raw[2] = {SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(family)),
                           SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, SOCK_RAW)};
    BRIG_RETURN_IF_ERROR(Rule(ctx, eperm, SCMP_SYS(socket), 2, raw, "socket(SOCK_RAW)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<sock_filter>> CompileSandboxFilter() {
  std::unique_ptr<void, CtxDeleter> ctx(seccomp_init(SCMP_ACT_ALLOW));
  if (!ctx) return absl::InternalError("seccomp_init failed");
  int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  if (rc < 0) return ErrnoError("seccomp_attr_set", "ACT_BADARCH", -rc);
  // LoadFilter sets no_new_privs itself, right before loading.
  rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0);
  if (rc < 0) return ErrnoError("seccomp_attr_set", "CTL_NNP", -rc);
  BRIG_RETURN_IF_ERROR(AddRules(ctx.get()));

  UniqueFd memfd(::memfd_create("brig-seccomp", MFD_CLOEXEC));
  if (!memfd) return ErrnoError("memfd_create", "brig-seccomp");
  rc = seccomp_export_bpf(ctx.get(), memfd.get());
  if (rc < 0) return ErrnoError("seccomp_export_bpf", "", -rc);
  off_t size = ::lseek(memfd.get(), 0, SEEK_END);
  if (size <= 0 || size % sizeof(sock_filter) != 0) {
    return absl::InternalError("seccomp_export_bpf produced no program");
  }
  std::vector<sock_filter> program(static_cast<size_t>(size) / sizeof(sock_filter));
  if (::pread(memfd.get(), program.data(), static_cast<size_t>(size), 0) != size) {
    return ErrnoError("pread", "brig-seccomp");
  }
  return program;
}

}  // namespace brig
