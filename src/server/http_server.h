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
  std::string method;                        // "GET", "POST", ...
  std::string path;                          // without the query, percent-decoded
  std::map<std::string, std::string> query;  // percent-decoded; a repeated key keeps the last
  std::string authorization;                 // the Authorization header
  std::string api_key;                       // the X-API-Key header
  std::string accept_encoding;               // the Accept-Encoding header
  std::string content_encoding;              // the Content-Encoding header
  std::string body;  // the whole body (at most 1 MiB), unless it is streamed:
  // Routes whose body streams (BodyStreams) read it here instead, piece by piece: the bytes
  // read into `buffer`, 0 at the end of the body.
  std::function<absl::StatusOr<size_t>(char* buffer, size_t size)> read_body;
};

// A WebSocket a handler accepted (Responder::RunWebSocket), as its callbacks see it.
class WebSocket {
 public:
  virtual ~WebSocket() = default;
  // Queues a message; messages go out in order.
  virtual void Send(std::string data, bool binary) = 0;
  // Closes (normally) once what is queued has gone out.
  virtual void Close() = 0;
};

struct WebSocketHandlers {
  int watch_fd = -1;  // the handler's own descriptor: readable calls on_readable
  std::function<void(WebSocket&, absl::string_view data, bool binary)> on_message;
  std::function<void(WebSocket&)> on_readable;
};

// How a handler answers: either one Send, or a stream of lines.
class Responder {
 public:
  virtual ~Responder() = default;
  // A complete response with a JSON body (none for 204).
  virtual void Send(int status, const nlohmann::json& body) = 0;
  // One NDJSON line; the first starts a chunked 200 response. False when the client is gone.
  virtual bool WriteLine(const nlohmann::json& line) = 0;
  // A chunked 200 response of raw bytes: Start once, then Write each piece. False when the
  // client is gone.
  virtual bool StartBytes(const std::string& content_type, const std::string& content_encoding) = 0;
  virtual bool WriteBytes(absl::string_view bytes) = 0;
  // Ends a started response without its terminating chunk and closes the connection, so that
  // the client sees a failure rather than a complete body (a transfer that broke midway).
  virtual void Abort() = 0;
  // Whether the request asks to become a WebSocket (Upgrade: websocket).
  virtual bool IsWebSocketUpgrade() const = 0;
  // Accepts the upgrade and runs the session, one event loop over the socket and
  // `handlers.watch_fd`, until either side closes; the connection ends with it. False when
  // the upgrade cannot be accepted.
  virtual bool RunWebSocket(const WebSocketHandlers& handlers) = 0;
  // The status answered so far (0 before any answer; 200 once a stream started; 101 for a
  // WebSocket).
  virtual int status() const = 0;
  // Whether the client has closed its end (checked without blocking, while a stream is idle).
  virtual bool ClientGone() = 0;
};

using Handler = std::function<void(const HttpRequest&, Responder&)>;
// Whether a request (by method and path) streams its body through read_body instead of
// having it read whole (and bounded to 1 MiB) first.
using BodyStreams = std::function<bool(const std::string& method, const std::string& path)>;

class HttpServer {
 public:
  // Listens on "host:port" (IPv4, or [IPv6]; port 0 picks one) and serves until Stop().
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& listen,
                                                           Handler handler,
                                                           BodyStreams body_streams,
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
