// The launcher's side of one agent connection: connect to an agent's socket, send requests,
// receive events. Blocking, with timeouts; for tests, benchmarks and simple callers (the daemon
// will drive the same FrameDecoder from its event loop).
//
// Everything received is from inside a sandbox, hence hostile: frames are bounded by
// FrameDecoder and a protocol error ends the connection. Move-only; not thread-safe.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "base/unique_fd.h"
#include "protocol/frame.h"

namespace brig::protocol {

class AgentConnection {
 public:
  static absl::StatusOr<AgentConnection> Connect(const std::string& socket_path);

  absl::Status Send(const Message& message);
  // The next message; nullopt when `timeout` passes, the agent closes the connection, or it
  // sends a malformed frame (then the connection is unusable).
  std::optional<Message> Next(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // True once the agent closed the connection or broke the protocol (Next's nullopt was not a
  // timeout); nothing more will arrive.
  bool closed() const { return closed_; }
  // The socket, for a caller's own event loop (readable: call Next with a zero timeout).
  int fd() const { return fd_.get(); }

 private:
  explicit AgentConnection(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
  FrameDecoder decoder_;
  bool closed_ = false;
};

}  // namespace brig::protocol
