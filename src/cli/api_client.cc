#include "cli/api_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace brig {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;
using Json = nlohmann::json;

absl::Status HttpError(int status, const std::string& body) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  std::string message = j.is_object() && j.contains("message") && j["message"].is_string()
                            ? j["message"].get<std::string>()
                            : body;
  std::string text = absl::StrCat("HTTP ", status, ": ", message);
  switch (status) {
    case 400:
      return absl::InvalidArgumentError(text);
    case 401:
      return absl::UnauthenticatedError(text);
    case 404:
      return absl::NotFoundError(text);
    case 408:
      return absl::DeadlineExceededError(text);
    case 409:
      return absl::FailedPreconditionError(text);
    default:
      return absl::UnavailableError(text);
  }
}

}  // namespace

absl::StatusOr<ApiClient> ApiClient::Create(const std::string& url, std::string api_key) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat("URL ", url, ": must start with http://"));
  }
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  size_t colon = rest.rfind(':');
  unsigned port = 80;
  std::string host(rest.substr(0, colon));
  if (colon != absl::string_view::npos &&
      (!absl::SimpleAtoi(rest.substr(colon + 1), &port) || port == 0 || port > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat("URL ", url, ": bad port"));
  }
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("URL ", url, ": the host must be an IP address or localhost"));
  }
  return ApiClient(host, static_cast<unsigned short>(port), std::move(api_key));
}

absl::StatusOr<ApiClient::Response> ApiClient::Call(const std::string& method,
                                                    const std::string& target,
                                                    const std::optional<Json>& body) const {
  Response response;
  std::string error_body;
  absl::Status s = Stream(method, target, body, [&](const Json& line) {
    response.body = line;
    return true;
  });
  if (!s.ok()) return s;
  return response;
}

absl::Status ApiClient::Stream(const std::string& method, const std::string& target,
                               const std::optional<Json>& body,
                               const std::function<bool(const Json&)>& on_line) const {
  std::optional<std::string> bytes;
  if (body) bytes = body->dump();
  return Exchange(method, target, bytes, "application/json", on_line);
}

absl::Status ApiClient::CallBytes(const std::string& method, const std::string& target,
                                  const std::string& bytes) const {
  return Exchange(method, target, bytes, "application/octet-stream",
                  [](const Json&) { return true; });
}

absl::Status ApiClient::Exchange(const std::string& method, const std::string& target,
                                 const std::optional<std::string>& body,
                                 const std::string& content_type,
                                 const std::function<bool(const Json&)>& on_line) const {
  asio::io_context io;
  tcp::socket socket(io);
  boost::system::error_code ec;
  tcp::endpoint endpoint(asio::ip::make_address(host_), port_);
  socket.connect(endpoint, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot reach brig serve at ", host_, ":", port_,
                                               ": ", ec.message(), " (is it running?)"));
  }
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, host_);
  req.set(http::field::authorization, "Bearer " + key_);
  req.set(http::field::connection, "close");
  if (body) {
    req.set(http::field::content_type, content_type);
    req.body() = *body;
  }
  req.prepare_payload();
  http::write(socket, req, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("send to brig serve: ", ec.message()));

  boost::beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  std::string pending;
  bool stopped = false;
  auto deliver = [&](absl::string_view data) {
    pending.append(data.data(), data.size());
    size_t nl;
    while (!stopped && (nl = pending.find('\n')) != std::string::npos) {
      Json line = Json::parse(pending.substr(0, nl), nullptr, /*allow_exceptions=*/false);
      pending.erase(0, nl + 1);
      if (!line.is_discarded() && !on_line(line)) stopped = true;
    }
  };
  auto on_chunk = [&](std::uint64_t, boost::beast::string_view data,
                      boost::system::error_code&) -> std::size_t {
    deliver(absl::string_view(data.data(), data.size()));
    return data.size();
  };
  parser.on_chunk_body(on_chunk);
  http::read_header(socket, buffer, parser, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("read from brig serve: ", ec.message()));
  while (!stopped && !parser.is_done()) {
    http::read_some(socket, buffer, parser, ec);
    if (ec == http::error::end_of_stream) break;
    if (ec) return absl::UnavailableError(absl::StrCat("read from brig serve: ", ec.message()));
  }
  int status = static_cast<int>(parser.get().result_int());
  if (status >= 400) return HttpError(status, parser.get().body());
  if (!parser.chunked() && !stopped && !parser.get().body().empty()) {
    deliver(parser.get().body() + "\n");
  }
  return absl::OkStatus();
}

}  // namespace brig
