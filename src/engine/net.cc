#include "engine/net.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace brig {

int BringUpLoopback() {
  int sock = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return -1;
  ifreq request = {};
  std::memcpy(request.ifr_name, "lo", 3);
  int rc = ::ioctl(sock, SIOCGIFFLAGS, &request);
  if (rc == 0) {
    request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP | IFF_RUNNING);
    rc = ::ioctl(sock, SIOCSIFFLAGS, &request);
  }
  int saved = errno;
  ::close(sock);
  errno = saved;
  return rc;
}

}  // namespace brig
