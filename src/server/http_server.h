// The daemon's transport: HTTP/1.1 over TCP with Boost.Beast. It knows nothing of sandboxes:
// it reads and bounds requests (16 KiB of headers, 1 MiB of body, 30 s to send a request, a
// connection limit), hands each to the handler with a Responder, and writes plain or chunked
// (NDJSON) responses. One thread per connection, with keep-alive; blocking I/O bounded by a
// watchdog that shuts down a socket whose read or write overstays.
//
// Thread-safety: Start/Stop from one thread; the handler is called from many threads at once.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "base/status.h"
#include "nlohmann/json.hpp"

namespace brig::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query, percent-decoded
  std::map<std::string, std::string> query;  // percent-decoded; a repeated key keeps the last
  std::string authorization;                 // the Authorization header
  std::string api_key;                       // the X-API-Key header
  std::string body;
};

// How a handler answers: either one Send, or a stream of lines.
class Responder {
 public:
  virtual ~Responder() = default;
  // A complete response with a JSON body (none for 204).
  virtual void Send(int status, const nlohmann::json& body) = 0;
  // One NDJSON line; the first starts a chunked 200 response. False when the client is gone.
  virtual bool WriteLine(const nlohmann::json& line) = 0;
  // Whether the client has closed its end (checked without blocking, while a stream is idle).
  virtual bool ClientGone() = 0;
};

using Handler = std::function<void(const HttpRequest&, Responder&)>;

class HttpServer {
 public:
  // Listens on "host:port" (IPv4, or [IPv6]; port 0 picks one) and serves until Stop().
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& listen,
                                                           Handler handler,
                                                           size_t max_connections = 1024);
  ~HttpServer();  // Stop()

  // The address actually listened on, "host:port".
  const std::string& address() const;
  // Stops accepting, cuts open connections and waits for their threads. Idempotent.
  void Stop();

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace brig::server
