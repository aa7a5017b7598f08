// Networking of a sandbox's network namespace. For now a sandbox has loopback only: the
// namespace starts with a single, down "lo", which PID 1 brings up.
//
// Restricted-zone code (no allocation).
#pragma once

namespace brig {

// Sets IFF_UP on "lo". Returns -1 with errno on failure.
int BringUpLoopback();

}  // namespace brig
