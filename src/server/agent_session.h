// One connection to a sandbox's agent, as the daemon's routes use it (commands.h, files.h):
// send requests, await replies with a timeout, and turn a process's events into the API's
// output lines. Everything the agent says is untrusted and bounded by the frame decoder.
//
// Move-only; one thread at a time.
#pragma once

#include <chrono>
#include <string>

#include "base/status.h"
#include "nlohmann/json.hpp"
#include "protocol/client.h"
#include "server/commands.h"

namespace brig::server {

// An agent `error` body ({"code", "message"}) as a Status; the code rides along as the HTTP
// status (HttpStatusFromPayload).
absl::Status StatusFromAgentError(const Json& body);
// A message's JSON payload, or {} when it is not an object.
Json ParseBody(const protocol::Message& m);

class AgentSession {
 public:
  static absl::StatusOr<AgentSession> Open(const std::string& socket);

  absl::Status Send(protocol::MessageType type, uint32_t channel, const Json& body);
  absl::Status SendRaw(const protocol::Message& m);
  // The next message, or an error when none comes within `timeout`.
  absl::StatusOr<protocol::Message> Reply(
      std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // The next message if one is already here.
  std::optional<protocol::Message> Poll();
  // The connection's descriptor, for an event loop: readable means Poll() has something.
  int fd() const { return conn_.fd(); }
  bool closed() const { return conn_.closed(); }
  // Why nothing came: the agent closed the connection, or it did not answer in time.
  absl::Status AgentGone() const;

  // The agent's channel of the process with this pid: the running one, else the newest.
  absl::StatusOr<uint32_t> ChannelOf(int pid);
  absl::StatusOr<Json> List();

  // Delivers the events of `channel` as output lines until it exits (or an attach without
  // follow caught up), the deadline passes, or the reader leaves.
  absl::Status Pump(uint32_t channel, const StreamControl& control, const LineSink& sink);

 private:
  explicit AgentSession(protocol::AgentConnection conn) : conn_(std::move(conn)) {}
  protocol::AgentConnection conn_;
};

}  // namespace brig::server
