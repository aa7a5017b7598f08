// Capabilities and identity of a sandboxed command: the bounded capability set a sandbox's
// root keeps, and the switch to the command's uid/gid.
//
// Restricted-zone code (no allocation). Capabilities here are those of the sandbox's user
// namespace: they never act on the host's resources.
#pragma once

#include <sys/types.h>

namespace brig {

// Removes every capability outside the kept set (chown, dac_override, fowner, fsetid, kill,
// setgid, setuid, setpcap, net_bind_service) from the bounding set, and clears the ambient
// and inheritable sets. After exec, root holds only the kept set; other users hold none.
int BoundCapabilities(int last_capability);

// setgroups + setresgid + setresuid to the given identity, as raw system calls: libc's wrappers
// broadcast to every thread libc believes the process has, and a process cloned from a
// multithreaded launcher has one thread but libc's list of all of them (it would wait forever).
// Supplementary groups are {gid} with `with_group`, none otherwise. Returns -1 with errno.
int SwitchIdentity(uid_t uid, gid_t gid, bool with_group);

}  // namespace brig
