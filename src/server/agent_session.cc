#include "server/agent_session.h"

#include <algorithm>
#include <array>
#include <optional>

#include "absl/strings/escaping.h"
#include "server/files.h"

namespace brig::server {

using protocol::AgentConnection;
using protocol::Message;
using protocol::MessageType;
using Clock = std::chrono::steady_clock;

namespace {

// How often an idle stream checks its reader and its deadline.
constexpr std::chrono::milliseconds kIdleSlice{250};

// Length of the longest prefix of `s` made of whole, well-formed UTF-8 sequences. `*invalid`
// is set when it stops at a malformed byte rather than at a sequence cut off by the end.
size_t Utf8Prefix(absl::string_view s, bool* invalid) {
  *invalid = false;
  size_t i = 0;
  while (i < s.size()) {
    auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    unsigned char c = b(0);
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      *invalid = true;
      return i;
    }
    for (size_t k = 1; k < len; ++k) {
      if (i + k >= s.size()) return i;  // cut off: the rest may come in the next read
      unsigned char min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
      if (b(k) < min || b(k) > max) {
        *invalid = true;
        return i;
      }
    }
    i += len;
  }
  return i;
}

// Turns agent events into output lines, holding back a UTF-8 character split between reads.
class LineMaker {
 public:
  std::optional<Json> Output(const Message& m) {
    size_t stream = m.flags == 2 ? 1 : 0;
    std::string& held = held_[stream];
    if (held.empty()) held_offset_[stream] = protocol::OutputOffset(m);
    absl::string_view bytes = protocol::OutputBytes(m);
    held.append(bytes.data(), bytes.size());
    bool invalid = false;
    size_t text = Utf8Prefix(held, &invalid);
    if (invalid) return Take(stream, held.size(), /*as_text=*/false);
    if (text == 0) return std::nullopt;
    return Take(stream, text, /*as_text=*/true);
  }
  // What is still held, at the end of a stream.
  std::vector<Json> Flush() {
    std::vector<Json> lines;
    for (size_t stream = 0; stream < 2; ++stream) {
      if (!held_[stream].empty()) lines.push_back(Take(stream, held_[stream].size(), false));
    }
    return lines;
  }

 private:
  Json Take(size_t stream, size_t n, bool as_text) {
    std::string& held = held_[stream];
    Json line = {{"type", stream == 0 ? "stdout" : "stderr"}, {"offset", held_offset_[stream]}};
    absl::string_view bytes = absl::string_view(held).substr(0, n);
    if (as_text) {
      line["data"] = std::string(bytes);
    } else {
      line["data_b64"] = absl::Base64Escape(bytes);
    }
    held.erase(0, n);
    held_offset_[stream] += n;
    return line;
  }
  std::array<std::string, 2> held_;
  std::array<uint64_t, 2> held_offset_ = {0, 0};
};

}  // namespace

absl::Status StatusFromAgentError(const Json& body) {
  int code = body.value("code", 500);
  std::string message = body.value("message", std::string("agent error"));
  absl::Status status;
  switch (code) {
    case 400:
      status = absl::InvalidArgumentError(message);
      break;
    case 403:
      status = absl::PermissionDeniedError(message);
      break;
    case 404:
      status = absl::NotFoundError(message);
      break;
    case 409:
      status = absl::FailedPreconditionError(message);
      break;
    case 507:
      status = absl::ResourceExhaustedError(message);
      break;
    default:
      status = absl::InternalError(message);
  }
  return WithHttpStatus(status, code);
}

Json ParseBody(const Message& m) {
  Json body = Json::parse(m.payload, nullptr, /*allow_exceptions=*/false);
  return body.is_object() ? body : Json::object();
}

absl::StatusOr<AgentSession> AgentSession::Open(const std::string& socket) {
  absl::StatusOr<AgentConnection> c = AgentConnection::Connect(socket);
  if (!c.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the sandbox's agent does not answer: ", c.status().message()));
  }
  return AgentSession(std::move(*c));
}

absl::Status AgentSession::Send(MessageType type, uint32_t channel, const Json& body) {
  return conn_.Send({type, 0, channel, body.dump()});
}

absl::Status AgentSession::SendRaw(const Message& m) { return conn_.Send(m); }

absl::StatusOr<Message> AgentSession::Reply(std::chrono::milliseconds timeout) {
  std::optional<Message> m = conn_.Next(timeout);
  if (!m) return AgentGone();
  return std::move(*m);
}

std::optional<Message> AgentSession::Poll() { return conn_.Next(std::chrono::milliseconds(0)); }

absl::Status AgentSession::AgentGone() const {
  return conn_.closed() ? absl::UnavailableError("the sandbox's agent closed the connection")
                        : absl::DeadlineExceededError("the sandbox's agent did not answer");
}

absl::StatusOr<uint32_t> AgentSession::ChannelOf(int pid) {
  BRIG_ASSIGN_OR_RETURN(Json list, List());
  std::optional<uint32_t> found;
  bool found_running = false;
  for (const Json& p : list["processes"]) {
    if (p.value("pid", -1) != pid) continue;
    bool running = p.value("running", false);
    if (!found || (running && !found_running) || running == found_running) {
      found = p.value("channel", 0u);
      found_running = running;
    }
  }
  if (!found) return absl::NotFoundError(absl::StrCat("no process with pid ", pid));
  return *found;
}

absl::StatusOr<Json> AgentSession::List() {
  BRIG_RETURN_IF_ERROR(Send(MessageType::kList, 0, Json::object()));
  for (;;) {
    BRIG_ASSIGN_OR_RETURN(Message m, Reply());
    if (m.type == MessageType::kProcessList) return ParseBody(m);
    if (m.type == MessageType::kError) return StatusFromAgentError(ParseBody(m));
  }
}

absl::Status AgentSession::Pump(uint32_t channel, const StreamControl& control,
                                const LineSink& sink) {
  LineMaker lines;
  auto deliver_held = [&] {
    for (const Json& line : lines.Flush()) {
      if (!sink(line)) return false;
    }
    return true;
  };
  for (;;) {
    auto slice = kIdleSlice;
    if (control.deadline) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*control.deadline - Clock::now());
      if (left.count() <= 0) {
        if (deliver_held()) {
          sink({{"type", "error"},
                {"code", 408},
                {"message", "the request timeout passed; the process keeps running"}});
        }
        return absl::OkStatus();
      }
      slice = std::min(slice, left);
    }
    std::optional<Message> m = conn_.Next(slice);
    if (!m) {
      if (conn_.closed()) {
        if (deliver_held()) {
          sink({{"type", "error"},
                {"code", 503},
                {"message", "the sandbox's agent went away (was the sandbox stopped?)"}});
        }
        return absl::OkStatus();
      }
      if (control.reader_gone && control.reader_gone()) return absl::OkStatus();
      continue;
    }
    if (m->channel != channel) continue;
    std::optional<Json> line;
    bool last = false;
    switch (m->type) {
      case MessageType::kOutput:
        line = lines.Output(*m);
        break;
      case MessageType::kTruncated:
        line = ParseBody(*m);
        (*line)["type"] = "truncated";
        break;
      case MessageType::kError:
        line = ParseBody(*m);
        (*line)["type"] = "error";
        break;
      case MessageType::kExited:
        line = ParseBody(*m);
        (*line)["type"] = "exit";
        last = true;
        break;
      case MessageType::kCaughtUp:
        line = ParseBody(*m);
        (*line)["type"] = "end";
        last = true;
        break;
      default:
        break;
    }
    if (last && !deliver_held()) return absl::OkStatus();
    if (line && !sink(*line)) return absl::OkStatus();
    if (last) return absl::OkStatus();
  }
}

}  // namespace brig::server
