// Mounts: a sandbox's root filesystem.
//
//   /        overlay: template skeleton (read-only, id-mapped) + writable layer
//   /usr     overlay: the host's /usr (read-only, id-mapped) + writable layer
//   /proc    the sandbox's own procfs; kernel internals (kcore, kallsyms, keys, timer_list, …)
//            masked; /proc/sys read-only
//   /dev     tmpfs with null, zero, full, random, urandom, tty; devpts; a tmpfs /dev/shm
//
// Both writable layers live on one tmpfs whose size is the sandbox's disk limit (its pages are
// charged to the sandbox's memory cgroup). Everything is built inside the sandbox's private
// mount namespace and the host's tree is detached after pivot_root, so nothing is visible on
// the host and nothing is left behind when the sandbox's last process exits.
//
// The launcher opens the template layers as detached, read-only, id-mapped mounts for the
// sandbox's user namespace (OpenLayers), so files owned by root on disk appear owned by the
// sandbox's root, and passes them to PID 1, which attaches them (restricted zone).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "engine/restricted.h"
#include "engine/template.h"

namespace brig {

struct LayerMounts {
  UniqueFd skeleton;
  UniqueFd usr;
};

// Launcher side: `userns_fd` is the sandbox's user namespace (/proc/<pid>/ns/user).
absl::StatusOr<LayerMounts> OpenLayers(const TemplatePaths& layers, int userns_fd);

// Every path and option string the restricted zone needs, prepared by the launcher.
struct RootfsPlan {
  std::string scratch;          // a host directory; the scratch tmpfs is mounted over it
  std::string scratch_options;  // "size=…,mode=0700"
  std::string skeleton_dir, usr_lower_dir;       // where the layers are attached
  std::string upper, work, usr_upper, usr_work;  // writable layer directories
  std::string root;                              // the new root (overlay mount point)
  std::string root_overlay_options, usr_overlay_options;
  std::string root_usr, root_proc, root_dev, root_dev_pts, root_dev_shm;
  std::vector<std::string> masked_proc;  // entries of the new /proc to cover (those that exist)
  std::string root_proc_sys;
  std::string dev_shm_options;
  std::string etc_hosts, etc_hostname;  // paths under root
  std::string hosts_content, hostname_content;
};

RootfsPlan MakeRootfsPlan(const std::string& scratch_dir, uint64_t disk_bytes,
                          const std::string& hostname);

// Restricted zone, in PID 1 with namespace-root credentials: builds the tree described above
// from the attached layers, then pivot_roots into it and detaches the host's tree.
StepResult BuildRootfs(const RootfsPlan& plan, int skeleton_fd, int usr_fd);

}  // namespace brig
