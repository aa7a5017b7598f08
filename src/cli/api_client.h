// The CLI's client of brig's HTTP API (docs/api.md), over Boost.Beast: one request per
// connection, JSON in and out, and NDJSON streams delivered line by line as they arrive.
//
// Not thread-safe; one per command invocation.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "base/status.h"
#include "nlohmann/json.hpp"

namespace brig {

class ApiClient {
 public:
  // `url` is http://HOST:PORT with HOST an IP address or localhost.
  static absl::StatusOr<ApiClient> Create(const std::string& url, std::string api_key);

  struct Response {
    int status = 0;
    nlohmann::json body;  // null when empty
  };
  // Sends one request. Error responses (4xx/5xx) are returned as a Status whose message is the
  // server's, with the HTTP status in front.
  absl::StatusOr<Response> Call(const std::string& method, const std::string& target,
                                const std::optional<nlohmann::json>& body = std::nullopt) const;
  // Sends one request whose answer is a stream; `on_line` gets each line (return false to stop).
  // A non-stream answer (background command, error) is delivered as one line.
  absl::Status Stream(const std::string& method, const std::string& target,
                      const std::optional<nlohmann::json>& body,
                      const std::function<bool(const nlohmann::json&)>& on_line) const;
  // Sends raw bytes as the body (the stdin route); the answer is checked, not returned.
  absl::Status CallBytes(const std::string& method, const std::string& target,
                         const std::string& bytes) const;

 private:
  absl::Status Exchange(const std::string& method, const std::string& target,
                        const std::optional<std::string>& body, const std::string& content_type,
                        const std::function<bool(const nlohmann::json&)>& on_line) const;
  ApiClient(std::string host, unsigned short port, std::string key)
      : host_(std::move(host)), port_(port), key_(std::move(key)) {}
  std::string host_;
  unsigned short port_;
  std::string key_;
};

}  // namespace brig
