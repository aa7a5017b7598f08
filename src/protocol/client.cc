#include "protocol/client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace brig::protocol {

absl::StatusOr<AgentConnection> AgentConnection::Connect(const std::string& socket_path) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof addr.sun_path) {
    return absl::InvalidArgumentError(absl::StrCat("socket path too long: ", socket_path));
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoError("socket", "AF_UNIX");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return ErrnoError("connect", socket_path);
  }
  return AgentConnection(std::move(fd));
}

absl::Status AgentConnection::Send(const Message& message) {
  std::string bytes = Encode(message);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd_.get(), bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("send", "agent connection");
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

std::optional<Message> AgentConnection::Next(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (std::optional<Message> m = decoder_.Next()) return m;
    if (decoder_.failed() || closed_) {
      closed_ = true;
      return std::nullopt;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p = {fd_.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(0, left.count()))) <= 0) {
      return std::nullopt;  // nothing within the timeout (a zero timeout still takes what is here)
    }
    char buf[65536];
    ssize_t n = ::read(fd_.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || !decoder_.Feed(absl::string_view(buf, static_cast<size_t>(n))).ok()) {
      closed_ = true;
      return std::nullopt;
    }
  }
}

}  // namespace brig::protocol
