#include "engine/mounts.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace brig {
namespace {

absl::StatusOr<UniqueFd> OpenIdmappedReadOnly(const std::string& path, int userns_fd) {
  UniqueFd tree(
      static_cast<int>(::open_tree(AT_FDCWD, path.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)));
  if (!tree) return ErrnoError("open_tree", path);
  mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_IDMAP;
  attr.userns_fd = static_cast<uint64_t>(userns_fd);
  if (::mount_setattr(tree.get(), "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
    int err = errno;
    absl::Status failed = ErrnoError("mount_setattr (id-mapped, read-only)", path, err);
    if (err == EINVAL || err == ENOSYS || err == EOPNOTSUPP) {
      return Annotate(failed, absl::StrCat("this host cannot make id-mapped mounts of ", path,
                                           " (needs Linux >= 5.12 and a file system that supports "
                                           "them: ext4, xfs, btrfs, tmpfs; not overlayfs or NFS)"));
    }
    return failed;
  }
  return tree;
}

// Device nodes bind-mounted from the host: the harmless ones every program expects.
constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom", "tty"};
constexpr const char* kDevLinks[][2] = {
    {"fd", "/proc/self/fd"},       {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"},
    {"stderr", "/proc/self/fd/2"}, {"ptmx", "pts/ptmx"},         {"core", "/proc/kcore"}};
// /proc entries that expose the host kernel's internals: covered by /dev/null.
constexpr const char* kMaskedProc[] = {
    "kcore", "sysrq-trigger", "timer_list", "sched_debug", "latency_stats", "kallsyms", "keys"};

// The entries of kMaskedProc this kernel has. A sandbox's procfs has the same entries as the
// host's (same kernel), so the host's is asked, once per process.
const std::vector<const char*>& MaskedProcEntries() {
  static const std::vector<const char*> present = [] {
    std::vector<const char*> out;
    for (const char* entry : kMaskedProc) {
      if (::access((std::string("/proc/") + entry).c_str(), F_OK) == 0) out.push_back(entry);
    }
    return out;
  }();
  return present;
}

// Restricted-zone path join into a caller's buffer; no allocation.
bool Join(char* out, size_t cap, const char* a, const char* b) {
  size_t la = RawStrlen(a), lb = RawStrlen(b);
  if (la + 1 + lb + 1 > cap) return false;
  std::memcpy(out, a, la);
  out[la] = '/';
  std::memcpy(out + la + 1, b, lb + 1);
  return true;
}

int WriteWholeFile(const char* path, const std::string& content) {
  int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  ssize_t n = ::write(fd, content.data(), content.size());
  int saved = errno;
  ::close(fd);
  errno = saved;
  return n == static_cast<ssize_t>(content.size()) ? 0 : -1;
}

StepResult MountProc(const RootfsPlan& plan) {
  constexpr unsigned long kFlags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
  if (::mount("proc", plan.root_proc.c_str(), "proc", kFlags, nullptr) != 0) {
    return Failed(Step::kProc);
  }
  for (const std::string& entry : plan.masked_proc) {
    if (::mount("/dev/null", entry.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return Failed(Step::kMaskProc);
    }
  }
  const char* path = plan.root_proc_sys.c_str();
  if (::mount(path, path, nullptr, MS_BIND | MS_REC, nullptr) != 0 ||
      ::mount(nullptr, path, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | kFlags, nullptr) != 0) {
    return Failed(Step::kMaskProc);
  }
  return Ok();
}

StepResult MountDev(const RootfsPlan& plan) {
  const char* dev = plan.root_dev.c_str();
  if (::mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64") !=
      0) {
    return Failed(Step::kDev);
  }
  char path[512];
  char host[64];
  for (const char* node : kDevices) {
    if (!Join(path, sizeof path, dev, node) || !Join(host, sizeof host, "/dev", node)) {
      return Failed(Step::kDev);
    }
    int fd = ::open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return Failed(Step::kDev);
    ::close(fd);
    if (::mount(host, path, nullptr, MS_BIND, nullptr) != 0) return Failed(Step::kDev);
  }
  for (const auto& link : kDevLinks) {
    if (!Join(path, sizeof path, dev, link[0]) || ::symlink(link[1], path) != 0) {
      return Failed(Step::kDev);
    }
  }
  if (::mkdir(plan.root_dev_pts.c_str(), 0755) != 0 ||
      ::mount("devpts", plan.root_dev_pts.c_str(), "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=0620,gid=5") != 0) {
    return Failed(Step::kDevPts);
  }
  if (::mkdir(plan.root_dev_shm.c_str(), 01777) != 0 ||
      ::mount("tmpfs", plan.root_dev_shm.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
              plan.dev_shm_options.c_str()) != 0) {
    return Failed(Step::kDevShm);
  }
  // /dev itself holds only what was made above; nothing inside may add to it.
  if (::mount(nullptr, dev, nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC,
              "mode=0755,size=64k,nr_inodes=64") != 0) {
    return Failed(Step::kDev);
  }
  return Ok();
}

StepResult PivotInto(const char* root) {
  // pivot_root(".", ".") stacks the old root on top of the new one; detaching "." then removes
  // the host's whole tree from this namespace in one step.
  if (::chdir(root) != 0 || ::syscall(SYS_pivot_root, ".", ".") != 0 ||
      ::umount2(".", MNT_DETACH) != 0 || ::chdir("/") != 0) {
    return Failed(Step::kPivotRoot);
  }
  return Ok();
}

}  // namespace

absl::StatusOr<LayerMounts> OpenLayers(const TemplatePaths& layers, int userns_fd) {
  LayerMounts mounts;
  BRIG_ASSIGN_OR_RETURN(mounts.skeleton, OpenIdmappedReadOnly(layers.rootfs, userns_fd));
  BRIG_ASSIGN_OR_RETURN(mounts.usr, OpenIdmappedReadOnly(layers.usr, userns_fd));
  return mounts;
}

RootfsPlan MakeRootfsPlan(const std::string& scratch_dir, uint64_t disk_bytes,
                          const std::string& hostname) {
  RootfsPlan p;
  p.scratch = scratch_dir;
  p.scratch_options = absl::StrCat("size=", disk_bytes, ",mode=0700");
  p.skeleton_dir = scratch_dir + "/skeleton";
  p.usr_lower_dir = scratch_dir + "/usr-lower";
  p.upper = scratch_dir + "/upper";
  p.work = scratch_dir + "/work";
  p.usr_upper = scratch_dir + "/usr-upper";
  p.usr_work = scratch_dir + "/usr-work";
  p.root = scratch_dir + "/root";
  p.root_overlay_options = absl::StrCat("lowerdir=", p.skeleton_dir, ",upperdir=", p.upper,
                                        ",workdir=", p.work, ",userxattr");
  p.usr_overlay_options = absl::StrCat("lowerdir=", p.usr_lower_dir, ",upperdir=", p.usr_upper,
                                       ",workdir=", p.usr_work, ",userxattr");
  p.root_usr = p.root + "/usr";
  p.root_proc = p.root + "/proc";
  p.root_proc_sys = p.root_proc + "/sys";
  for (const char* entry : MaskedProcEntries()) p.masked_proc.push_back(p.root_proc + "/" + entry);
  p.root_dev = p.root + "/dev";
  p.root_dev_pts = p.root_dev + "/pts";
  p.root_dev_shm = p.root_dev + "/shm";
  p.dev_shm_options = absl::StrCat("mode=1777,size=", disk_bytes);
  p.etc_hosts = p.root + "/etc/hosts";
  p.etc_hostname = p.root + "/etc/hostname";
  p.hosts_content = absl::StrCat("127.0.0.1\tlocalhost\n127.0.1.1\t", hostname,
                                 "\n::1\tlocalhost ip6-localhost ip6-loopback\n");
  p.hostname_content = hostname + "\n";
  return p;
}

StepResult BuildRootfs(const RootfsPlan& plan, int skeleton_fd, int usr_fd) {
  // Nothing done from here on may propagate to the host's mount namespace.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return Failed(Step::kPrivateMounts);
  }
  if (::mount("tmpfs", plan.scratch.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
              plan.scratch_options.c_str()) != 0) {
    return Failed(Step::kScratchTmpfs);
  }
  for (const std::string* dir : {&plan.skeleton_dir, &plan.usr_lower_dir, &plan.upper, &plan.work,
                                 &plan.usr_upper, &plan.usr_work, &plan.root}) {
    if (::mkdir(dir->c_str(), 0755) != 0) return Failed(Step::kScratchDirs);
  }
  if (::move_mount(skeleton_fd, "", AT_FDCWD, plan.skeleton_dir.c_str(), MOVE_MOUNT_F_EMPTY_PATH) !=
          0 ||
      ::move_mount(usr_fd, "", AT_FDCWD, plan.usr_lower_dir.c_str(), MOVE_MOUNT_F_EMPTY_PATH) !=
          0) {
    return Failed(Step::kAttachLayers);
  }
  if (::mount("overlay", plan.root.c_str(), "overlay", MS_NOSUID | MS_NODEV,
              plan.root_overlay_options.c_str()) != 0) {
    return Failed(Step::kRootOverlay);
  }
  if (::mount("overlay", plan.root_usr.c_str(), "overlay", MS_NOSUID | MS_NODEV,
              plan.usr_overlay_options.c_str()) != 0) {
    return Failed(Step::kUsrOverlay);
  }
  if (StepResult r = MountProc(plan); !r.ok()) return r;
  if (StepResult r = MountDev(plan); !r.ok()) return r;
  if (WriteWholeFile(plan.etc_hosts.c_str(), plan.hosts_content) != 0 ||
      WriteWholeFile(plan.etc_hostname.c_str(), plan.hostname_content) != 0) {
    return Failed(Step::kEtcFiles);
  }
  return PivotInto(plan.root.c_str());
}

}  // namespace brig
