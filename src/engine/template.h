// Templates: the read-only lower layer of a sandbox's root filesystem.
//
// The default template, "base", is made from the host's own userland, so nothing is downloaded:
// /usr is the host's /usr (mounted read-only, copy-on-write per sandbox), and the rest is a
// small skeleton brig writes once into <state dir>/templates/base/rootfs: its own /etc (users,
// hosts, resolver, CA certificates and the other files programs read, but none of the host's
// secrets), empty mount points, /home/user and /root. Nothing else of the host is visible.
//
// EnsureTemplate() builds the skeleton when it is missing or stale (the host's ld.so.cache or
// alternatives changed, i.e. packages were installed), under a lock, atomically. Thread-safe
// across processes; not for use between fork and exec.
#pragma once

#include <string>

#include "base/status.h"

namespace brig {

struct TemplatePaths {
  std::string rootfs;  // the skeleton: becomes the sandbox's "/" (lower layer)
  std::string usr;     // becomes the sandbox's /usr (lower layer)
};

// NotFound unless a template of that name exists (only "base" for now).
absl::Status CheckTemplateName(const std::string& name);

absl::StatusOr<TemplatePaths> EnsureTemplate(const std::string& state_dir, const std::string& name);

}  // namespace brig
