#include "server/http_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace brig::server {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
namespace websocket = boost::beast::websocket;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

constexpr size_t kHeaderLimit = 16u << 10;
constexpr size_t kBodyLimit = 1u << 20;
constexpr std::chrono::seconds kReadRequestTimeout{30};
constexpr std::chrono::seconds kWriteTimeout{60};

// Shuts down sockets whose current read or write overstays its deadline, which makes the
// blocked call return. (Asio's blocking calls ignore SO_RCVTIMEO.)
class Watchdog {
 public:
  Watchdog() : thread_([this] { Loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Arm(int fd, Clock::duration within) {
    std::lock_guard<std::mutex> lock(mu_);
    deadlines_[fd] = Clock::now() + within;
    cv_.notify_all();
  }
  void Disarm(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    deadlines_.erase(fd);
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!done_) {
      auto next = Clock::now() + std::chrono::seconds(1);
      for (auto it = deadlines_.begin(); it != deadlines_.end();) {
        if (it->second <= Clock::now()) {
          ::shutdown(it->first, SHUT_RDWR);
          it = deadlines_.erase(it);
        } else {
          next = std::min(next, it->second);
          ++it;
        }
      }
      cv_.wait_until(lock, next);
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, Clock::time_point> deadlines_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the rest exists
};

// Arms the watchdog for one blocking call.
class Guarded {
 public:
  Guarded(Watchdog& w, int fd, Clock::duration within) : w_(w), fd_(fd) { w_.Arm(fd, within); }
  ~Guarded() { w_.Disarm(fd_); }

 private:
  Watchdog& w_;
  int fd_;
};

std::string PercentDecode(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    int value = 0;
    if (s[i] == '%' && i + 2 < s.size() && absl::SimpleHexAtoi(s.substr(i + 1, 2), &value)) {
      out.push_back(static_cast<char>(value));
      i += 2;
    } else if (s[i] == '+') {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// A WebSocket session: reads client messages and the handler's descriptor on one event loop,
// and writes queued messages one at a time.
class WebSocketLoop final : public WebSocket {
 public:
  WebSocketLoop(websocket::stream<tcp::socket>& ws, asio::io_context& loop,
                const WebSocketHandlers& handlers)
      : ws_(ws), loop_(loop), handlers_(handlers), watch_(loop) {}

  void Run() {
    boost::system::error_code ec;
    if (handlers_.watch_fd >= 0) {
      watch_.assign(::dup(handlers_.watch_fd), ec);
      if (!ec) WaitReadable();
    }
    ReadNext();
    loop_.run();
  }

  void Send(std::string data, bool binary) override {
    if (closing_) return;
    queued_bytes_ += data.size();
    if (queued_bytes_ > kMaxQueuedBytes) {  // the client does not read: drop it
      loop_.stop();
      return;
    }
    queue_.push_back({std::move(data), binary});
    if (!writing_) WriteNext();
  }

  void Close() override {
    closing_ = true;
    if (!writing_) CloseNow();
  }

 private:
  void ReadNext() {
    ws_.async_read(in_, [this](boost::system::error_code ec, size_t) {
      if (ec) {  // the client closed (or broke) the connection
        loop_.stop();
        return;
      }
      auto data = in_.cdata();
      handlers_.on_message(*this,
                           absl::string_view(static_cast<const char*>(data.data()), data.size()),
                           ws_.got_binary());
      in_.consume(in_.size());
      ReadNext();
    });
  }

  void WaitReadable() {
    watch_.async_wait(asio::posix::stream_descriptor::wait_read,
                      [this](boost::system::error_code ec) {
                        if (ec || closing_) return;
                        handlers_.on_readable(*this);
                        WaitReadable();
                      });
  }

  void WriteNext() {
    if (queue_.empty()) {
      writing_ = false;
      if (closing_) CloseNow();
      return;
    }
    writing_ = true;
    ws_.binary(queue_.front().second);
    ws_.async_write(asio::buffer(queue_.front().first),
                    [this](boost::system::error_code ec, size_t) {
                      queued_bytes_ -= queue_.front().first.size();
                      queue_.pop_front();
                      if (ec) {
                        loop_.stop();
                        return;
                      }
                      WriteNext();
                    });
  }

  void CloseNow() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ec;
    watch_.close(ec);
    ws_.async_close(websocket::close_code::normal,
                    [this](boost::system::error_code) { loop_.stop(); });
  }

  websocket::stream<tcp::socket>& ws_;
  asio::io_context& loop_;
  const WebSocketHandlers& handlers_;
  asio::posix::stream_descriptor watch_;
  boost::beast::flat_buffer in_;
  static constexpr size_t kMaxQueuedBytes = 16u << 20;
  std::deque<std::pair<std::string, bool>> queue_;
  size_t queued_bytes_ = 0;
  bool writing_ = false, closing_ = false, closed_ = false;
};

class Connection final : public Responder {
 public:
  Connection(tcp::socket socket, Watchdog& watchdog)
      : socket_(std::move(socket)), watchdog_(watchdog) {}

  // Serves requests until the client closes, an error, or a response that ends the connection.
  void Serve(const Handler& handler, const BodyStreams& body_streams) {
    boost::beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::empty_body> header;
      header.header_limit(kHeaderLimit);
      header.body_limit(std::numeric_limits<std::uint64_t>::max());
      boost::system::error_code ec;
      {
        Guarded guard(watchdog_, fd(), kReadRequestTimeout);
        http::read_header(socket_, buffer, header, ec);
      }
      if (!ec) {
        keep_alive_ = header.get().keep_alive();
        version_ = header.get().version();
      }
      if (IsClosed(ec) || (ec && !header.got_some())) return;
      if (ec) {
        keep_alive_ = false;
        if (ec == http::error::header_limit) {
          Send(431, {{"code", 431}, {"message", "the headers are over 16 KiB"}});
        } else {
          Send(400, {{"code", 400}, {"message", "malformed HTTP request: " + ec.message()}});
        }
        return;
      }
      responded_ = streaming_ = false;
      status_ = 0;
      HttpRequest request = ToRequest(header.get());
      upgrade_.reset();
      if (websocket::is_upgrade(header.get())) upgrade_ = header.get();  // the header is moved on
      bool body_done = true;
      if (body_streams(request.method, request.path)) {
        http::request_parser<http::buffer_body> body(std::move(header));
        bool failed = false;
        request.read_body = [&](char* out, size_t size) -> absl::StatusOr<size_t> {
          if (body.is_done() || size == 0) return 0;
          body.get().body().data = out;
          body.get().body().size = size;
          boost::system::error_code read_ec;
          Guarded guard(watchdog_, fd(), kReadRequestTimeout);
          http::read(socket_, buffer, body, read_ec);
          if (read_ec == http::error::need_buffer) read_ec = {};
          if (read_ec) {
            failed = true;
            return absl::InvalidArgumentError("reading the body: " + read_ec.message());
          }
          return size - body.get().body().size;
        };
        handler(request, *this);
        body_done = body.is_done() && !failed;
      } else {
        // The limit is checked here: the header was read before the route was known.
        if (header.content_length() && *header.content_length() > kBodyLimit) {
          keep_alive_ = false;
          Send(413, {{"code", 413}, {"message", "the body is over 1 MiB"}});
          return;
        }
        http::request_parser<http::string_body> whole(std::move(header));
        whole.body_limit(kBodyLimit);
        {
          Guarded guard(watchdog_, fd(), kReadRequestTimeout);
          http::read(socket_, buffer, whole, ec);
        }
        if (ec == http::error::body_limit) {
          keep_alive_ = false;
          Send(413, {{"code", 413}, {"message", "the body is over 1 MiB"}});
          return;
        }
        if (ec) {
          keep_alive_ = false;
          if (!IsClosed(ec)) {
            Send(400, {{"code", 400}, {"message", "malformed HTTP request: " + ec.message()}});
          }
          return;
        }
        request.body = whole.get().body();
        handler(request, *this);
      }
      upgrade_.reset();
      // A body left unread cannot be skipped on a kept-alive connection.
      if (!body_done) keep_alive_ = false;
      if (streaming_) {
        EndStream();
      } else if (!responded_) {
        Send(500, {{"code", 500}, {"message", "no response"}});
      }
      if (!keep_alive_ || broken_) return;
    }
  }

  int status() const override { return status_; }

  void Send(int status, const Json& body) override {
    if (responded_ || streaming_) return;
    responded_ = true;
    status_ = status;
    http::response<http::string_body> res{static_cast<http::status>(status), version_};
    res.set(http::field::server, "brig");
    res.keep_alive(keep_alive_);
    if (status != 204) {
      res.set(http::field::content_type, "application/json");
      res.body() = body.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    }
    res.prepare_payload();
    boost::system::error_code ec;
    Guarded guard(watchdog_, fd(), kWriteTimeout);
    http::write(socket_, res, ec);
    if (ec) broken_ = true;
  }

  bool WriteLine(const Json& line) override {
    if (!streaming_ && !StartBytes("application/x-ndjson", "")) return false;
    return WriteBytes(line.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n");
  }

  bool StartBytes(const std::string& content_type, const std::string& content_encoding) override {
    if (broken_ || responded_ || streaming_) return false;
    streaming_ = true;
    status_ = 200;
    http::response<http::empty_body> res{http::status::ok, version_};
    res.set(http::field::server, "brig");
    res.set(http::field::content_type, content_type);
    if (!content_encoding.empty()) res.set(http::field::content_encoding, content_encoding);
    res.keep_alive(keep_alive_);
    res.chunked(true);
    http::response_serializer<http::empty_body> serializer{res};
    boost::system::error_code ec;
    Guarded guard(watchdog_, fd(), kWriteTimeout);
    http::write_header(socket_, serializer, ec);
    if (ec) broken_ = true;
    return !broken_;
  }

  bool WriteBytes(absl::string_view bytes) override {
    if (broken_ || !streaming_) return false;
    if (bytes.empty()) return true;  // an empty chunk would end the response
    boost::system::error_code ec;
    Guarded guard(watchdog_, fd(), kWriteTimeout);
    asio::write(socket_, http::make_chunk(asio::buffer(bytes.data(), bytes.size())), ec);
    if (ec) broken_ = true;
    return !broken_;
  }

  bool IsWebSocketUpgrade() const override { return upgrade_.has_value(); }

  bool RunWebSocket(const WebSocketHandlers& handlers) override {
    if (!IsWebSocketUpgrade() || responded_ || streaming_) return false;
    responded_ = broken_ = true;  // the connection ends with the session
    status_ = 101;
    // The session runs its own event loop: move the socket onto it.
    asio::io_context loop;
    boost::system::error_code ec;
    tcp::endpoint local = socket_.local_endpoint(ec);
    // A second descriptor of the same socket; the connection's own closes with it as usual.
    int fd = ::dup(socket_.native_handle());
    if (ec || fd < 0) return false;
    websocket::stream<tcp::socket> ws{tcp::socket(loop)};
    ws.next_layer().assign(local.protocol(), fd, ec);
    if (ec) return false;
    ws.read_message_max(1u << 20);
    {
      Guarded guard(watchdog_, fd, kReadRequestTimeout);
      ws.accept(*upgrade_, ec);
    }
    if (ec) return true;
    WebSocketLoop session(ws, loop, handlers);
    session.Run();
    return true;
  }

  void Abort() override {
    broken_ = true;
    ::shutdown(fd(), SHUT_RDWR);
  }

  bool ClientGone() override {
    pollfd p = {fd(), POLLRDHUP, 0};
    return broken_ || (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)));
  }

  int fd() { return socket_.native_handle(); }

 private:
  void EndStream() {
    if (broken_) return;
    boost::system::error_code ec;
    Guarded guard(watchdog_, fd(), kWriteTimeout);
    asio::write(socket_, http::make_chunk_last(), ec);
    if (ec) broken_ = true;
  }

  static bool IsClosed(const boost::system::error_code& ec) {
    return ec == http::error::end_of_stream || ec == asio::error::eof ||
           ec == asio::error::connection_reset;
  }

  static HttpRequest ToRequest(const http::request<http::empty_body>& req) {
    HttpRequest out;
    out.method = std::string(req.method_string());
    absl::string_view target(req.target().data(), req.target().size());
    size_t q = target.find('?');
    out.path = PercentDecode(target.substr(0, q));
    if (q != absl::string_view::npos) {
      for (absl::string_view pair : absl::StrSplit(target.substr(q + 1), '&', absl::SkipEmpty())) {
        size_t eq = pair.find('=');
        out.query[PercentDecode(pair.substr(0, eq))] =
            eq == absl::string_view::npos ? "" : PercentDecode(pair.substr(eq + 1));
      }
    }
    if (auto it = req.find(http::field::authorization); it != req.end()) {
      out.authorization = std::string(it->value());
    }
    if (auto it = req.find("X-API-Key"); it != req.end()) out.api_key = std::string(it->value());
    if (auto it = req.find(http::field::accept_encoding); it != req.end()) {
      out.accept_encoding = std::string(it->value());
    }
    if (auto it = req.find(http::field::content_encoding); it != req.end()) {
      out.content_encoding = std::string(it->value());
    }
    return out;
  }

  tcp::socket socket_;
  Watchdog& watchdog_;
  std::optional<http::request<http::empty_body>> upgrade_;  // a WebSocket upgrade request
  unsigned version_ = 11;
  bool keep_alive_ = true;
  bool responded_ = false;
  bool streaming_ = false;
  bool broken_ = false;
  int status_ = 0;
};

}  // namespace

class HttpServer::Impl {
 public:
  Impl(Handler handler, BodyStreams body_streams, size_t max_connections)
      : handler_(std::move(handler)),
        body_streams_(std::move(body_streams)),
        max_connections_(max_connections),
        acceptor_(io_) {}

  absl::Status Listen(const std::string& listen) {
    size_t colon = listen.rfind(':');
    unsigned port = 0;
    if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
        port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("--listen ", listen, ": expected HOST:PORT, e.g. 127.0.0.1:7878"));
    }
    std::string host = listen.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    if (host == "localhost") host = "127.0.0.1";
    boost::system::error_code ec;
    asio::ip::address address = asio::ip::make_address(host, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("--listen ", listen, ": ", host, " is not an IP address"));
    }
    tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return absl::UnavailableError(absl::StrCat("listen on ", listen, ": ", ec.message()));
    tcp::endpoint bound = acceptor_.local_endpoint();
    address_ = bound.address().is_v6()
                   ? absl::StrCat("[", bound.address().to_string(), "]:", bound.port())
                   : absl::StrCat(bound.address().to_string(), ":", bound.port());
    accept_thread_ = std::thread([this] { AcceptLoop(); });
    return absl::OkStatus();
  }

  void Stop() {
    if (stopped_.exchange(true)) return;
    ::shutdown(acceptor_.native_handle(), SHUT_RDWR);  // wakes the blocked accept
    if (accept_thread_.joinable()) accept_thread_.join();
    std::unique_lock<std::mutex> lock(mu_);
    for (int fd : open_) ::shutdown(fd, SHUT_RDWR);
    drained_.wait(lock, [&] { return open_.empty(); });
  }

  const std::string& address() const { return address_; }

 private:
  void AcceptLoop() {
    while (!stopped_) {
      boost::system::error_code ec;
      tcp::socket socket(io_);
      acceptor_.accept(socket, ec);
      if (ec) {
        if (stopped_) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // e.g. out of fds
        continue;
      }
      socket.set_option(tcp::no_delay(true), ec);
      auto connection = std::make_shared<Connection>(std::move(socket), watchdog_);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (open_.size() >= max_connections_ || stopped_) {
          connection->Send(503, {{"code", 503}, {"message", "too many connections"}});
          continue;
        }
        open_.insert(connection->fd());
      }
      std::thread([this, connection]() mutable {
        connection->Serve(handler_, body_streams_);
        std::lock_guard<std::mutex> lock(mu_);
        open_.erase(connection->fd());
        connection.reset();  // closes the socket before Stop() may see the set empty
        drained_.notify_all();
      }).detach();
    }
  }

  Handler handler_;
  BodyStreams body_streams_;
  size_t max_connections_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::string address_;
  Watchdog watchdog_;
  std::atomic<bool> stopped_{false};
  std::thread accept_thread_;
  std::mutex mu_;
  std::condition_variable drained_;
  std::set<int> open_;  // sockets of live connections
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() { Stop(); }

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& listen,
                                                              Handler handler,
                                                              BodyStreams body_streams,
                                                              size_t max_connections) {
  auto impl = std::make_unique<Impl>(std::move(handler), std::move(body_streams), max_connections);
  BRIG_RETURN_IF_ERROR(impl->Listen(listen));
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

const std::string& HttpServer::address() const { return impl_->address(); }
void HttpServer::Stop() { impl_->Stop(); }

}  // namespace brig::server
