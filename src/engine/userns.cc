#include "engine/userns.h"

#include <fcntl.h>
#include <sys/random.h>

#include "base/files.h"

namespace brig {

absl::StatusOr<IdRange> IdRange::Allocate(const std::string& lock_file) {
  BRIG_ASSIGN_OR_RETURN(UniqueFd fd, OpenFd(lock_file, O_RDWR | O_CREAT, 0600));
  // Start at a random slot so that concurrent launchers rarely probe the same bytes.
  uint32_t start = 0;
  if (::getrandom(&start, sizeof start, GRND_NONBLOCK) != sizeof start) start = ::getpid();
  for (uint32_t i = 0; i < kIdSlots; ++i) {
    uint32_t slot = (start + i) % kIdSlots;
    struct flock lock = {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    lock.l_start = slot;
    lock.l_len = 1;
    if (::fcntl(fd.get(), F_OFD_SETLK, &lock) == 0) return IdRange(std::move(fd), slot);
    if (errno != EAGAIN && errno != EACCES) return ErrnoError("fcntl F_OFD_SETLK", lock_file);
  }
  return absl::ResourceExhaustedError("all sandbox uid ranges are in use");
}

absl::Status IdRange::WriteMaps(pid_t pid) const {
  std::string map = absl::StrCat("0 ", host_base(), " ", kIdsPerSandbox, "\n");
  std::string proc = absl::StrCat("/proc/", pid);
  BRIG_RETURN_IF_ERROR(WriteKernelFile(proc + "/uid_map", map));
  return WriteKernelFile(proc + "/gid_map", map);
}

}  // namespace brig
