// The daemon's HTTP API (docs/api.md): routes a parsed request to a typed action on the
// SandboxManager or a command in a sandbox, and turns results and Status errors into responses
// ({"code", "message"} for errors). Authentication happens here too.
//
// Layers: HttpServer (transport) → Api::Handle (route, authenticate, parse and check the body
// into a typed request) → SandboxManager (state machine) / commands.h (agent).
//
// Thread-safety: Handle is called from many connection threads at once; Api holds no mutable
// state of its own.
#pragma once

#include "server/api_key.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/sandboxes.h"

namespace brig::server {

class Api {
 public:
  Api(SandboxManager& sandboxes, const ApiKey& key, Metrics& metrics)
      : sandboxes_(sandboxes), key_(key), metrics_(metrics) {}
  void Handle(const HttpRequest& request, Responder& out) const;
  // Whether a request's body streams to its route (uploads) rather than being read whole.
  static bool BodyStreams(const std::string& method, const std::string& path);

 private:
  SandboxManager& sandboxes_;
  const ApiKey& key_;
  Metrics& metrics_;
};

// The HTTP status for a Status code (InvalidArgument 400, NotFound 404, FailedPrecondition 409,
// DeadlineExceeded 408, Unavailable 503, ...).
int HttpStatusOf(const absl::Status& status);

}  // namespace brig::server
