// Landlock: confines a sandboxed command's file access to the sandbox's own file tree (plus the
// stdio files it was handed), forbids creating device nodes, and, where the kernel has scopes
// (ABI 6), keeps signals and abstract unix sockets inside the sandbox's own domain.
//
// A second wall behind the mount namespace: even if a descriptor or path from outside leaks
// in, opening through it is refused. Skipped, not failed, on kernels without Landlock.
//
// LandlockAbi() runs in the launcher (cached, thread-safe); RestrictSelf() is restricted-zone
// code.
#pragma once

namespace brig {

// The kernel's Landlock ABI version, or 0 when Landlock is unavailable or disabled.
int LandlockAbi();

// Restricted zone. Must run after pivot_root (it grants "/" = the sandbox's root), after
// no_new_privs (required once capabilities are gone) and before seccomp. Returns -1 with errno
// on failure; 0 (and does nothing) when abi == 0.
int RestrictSelf(int abi);

}  // namespace brig
