#include "server/commands.h"

#include <algorithm>
#include <array>
#include <limits>

#include "absl/strings/escaping.h"
#include "protocol/client.h"

namespace brig::server {
namespace {

using protocol::AgentConnection;
using protocol::Message;
using protocol::MessageType;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kReplyTimeout{10000};
// How often an idle stream checks its reader and its deadline.
constexpr std::chrono::milliseconds kIdleSlice{250};

absl::Status StatusFromAgentError(const Json& body) {
  int code = body.value("code", 500);
  std::string message = body.value("message", std::string("agent error"));
  switch (code) {
    case 400:
      return absl::InvalidArgumentError(message);
    case 404:
      return absl::NotFoundError(message);
    case 409:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

Json ParseBody(const Message& m) {
  Json body = Json::parse(m.payload, nullptr, /*allow_exceptions=*/false);
  return body.is_object() ? body : Json::object();
}

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

class Session {
 public:
  static absl::StatusOr<Session> Open(const std::string& socket) {
    absl::StatusOr<AgentConnection> c = AgentConnection::Connect(socket);
    if (!c.ok()) {
      return absl::UnavailableError(
          absl::StrCat("the sandbox's agent does not answer: ", c.status().message()));
    }
    return Session(std::move(*c));
  }

  absl::Status Send(MessageType type, uint32_t channel, const Json& body) {
    return conn_.Send({type, 0, channel, body.dump()});
  }
  absl::Status SendRaw(const Message& m) { return conn_.Send(m); }

  // The next event, or an error when none comes within the reply timeout.
  absl::StatusOr<Message> Reply() {
    std::optional<Message> m = conn_.Next(kReplyTimeout);
    if (!m) return AgentGone();
    return std::move(*m);
  }

  absl::Status AgentGone() const {
    return conn_.closed() ? absl::UnavailableError("the sandbox's agent closed the connection")
                          : absl::DeadlineExceededError("the sandbox's agent did not answer");
  }

  // The agent's channel of the process with this pid: the running one, else the newest.
  absl::StatusOr<uint32_t> ChannelOf(int pid) {
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

  absl::StatusOr<Json> List() {
    BRIG_RETURN_IF_ERROR(Send(MessageType::kList, 0, Json::object()));
    for (;;) {
      BRIG_ASSIGN_OR_RETURN(Message m, Reply());
      if (m.type == MessageType::kProcessList) return ParseBody(m);
      if (m.type == MessageType::kError) return StatusFromAgentError(ParseBody(m));
    }
  }

  // Delivers the events of `channel` as lines until it exits (or `until_caught_up` and the
  // replay is done), the deadline passes, or the reader leaves.
  absl::Status Pump(uint32_t channel, const StreamControl& control, const LineSink& sink) {
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

 private:
  explicit Session(AgentConnection conn) : conn_(std::move(conn)) {}
  AgentConnection conn_;
};

Json ExecBody(const ExecRequest& r) {
  Json body = {{"argv", r.argv}, {"env", r.env},       {"cwd", r.cwd},
               {"user", r.user}, {"tag", r.tag},       {"stdin", r.stdin_open}};
  if (r.timeout.count() > 0) body["timeout_ms"] = r.timeout.count();
  return body;
}

// Sends exec and waits for `started`. An error before it (a bad request) fails the call; one
// with a channel (the command could not be executed) is returned to become a line.
struct Started {
  uint32_t channel;
  int pid;
  std::optional<Json> exec_error;
};
absl::StatusOr<Started> Exec(Session& s, const ExecRequest& request) {
  BRIG_RETURN_IF_ERROR(s.Send(MessageType::kExec, 0, ExecBody(request)));
  std::optional<Json> exec_error;
  for (;;) {
    BRIG_ASSIGN_OR_RETURN(Message m, s.Reply());
    if (m.type == MessageType::kError) {
      if (m.channel == 0) return StatusFromAgentError(ParseBody(m));
      exec_error = ParseBody(m);
      (*exec_error)["type"] = "error";
    } else if (m.type == MessageType::kStarted) {
      return Started{m.channel, ParseBody(m).value("pid", -1), exec_error};
    }
  }
}

}  // namespace

absl::StatusOr<Json> StartProcess(const std::string& agent_socket, const ExecRequest& request) {
  BRIG_ASSIGN_OR_RETURN(Session s, Session::Open(agent_socket));
  BRIG_ASSIGN_OR_RETURN(Started started, Exec(s, request));
  return Json{{"pid", started.pid}, {"tag", request.tag}};
}

absl::Status RunProcess(const std::string& agent_socket, const ExecRequest& request,
                        const StreamControl& control, const LineSink& sink) {
  BRIG_ASSIGN_OR_RETURN(Session s, Session::Open(agent_socket));
  BRIG_ASSIGN_OR_RETURN(Started started, Exec(s, request));
  if (!sink({{"type", "start"}, {"pid", started.pid}})) return absl::OkStatus();
  if (started.exec_error && !sink(*started.exec_error)) return absl::OkStatus();
  return s.Pump(started.channel, control, sink);
}

absl::Status AttachProcess(const std::string& agent_socket, int pid, uint64_t offset,
                           bool follow, const StreamControl& control, const LineSink& sink) {
  BRIG_ASSIGN_OR_RETURN(Session s, Session::Open(agent_socket));
  BRIG_ASSIGN_OR_RETURN(uint32_t channel, s.ChannelOf(pid));
  BRIG_RETURN_IF_ERROR(
      s.Send(MessageType::kAttach, channel, {{"offset", offset}, {"follow", follow}}));
  return s.Pump(channel, control, sink);
}

absl::StatusOr<Json> ListProcesses(const std::string& agent_socket) {
  BRIG_ASSIGN_OR_RETURN(Session s, Session::Open(agent_socket));
  BRIG_ASSIGN_OR_RETURN(Json list, s.List());
  Json processes = Json::array();
  for (Json& p : list["processes"]) {
    p.erase("channel");
    if (!p.value("running", true) && !p.contains("timed_out")) p["timed_out"] = false;
    processes.push_back(std::move(p));
  }
  return Json{{"processes", std::move(processes)}};
}

namespace {

// Sends one request about a process, then a list, which the agent answers after the request:
// an error for the request arrives first and fails the call.
absl::Status ProcessRequest(const std::string& agent_socket, int pid, MessageType type,
                            absl::string_view payload) {
  BRIG_ASSIGN_OR_RETURN(Session s, Session::Open(agent_socket));
  BRIG_ASSIGN_OR_RETURN(uint32_t channel, s.ChannelOf(pid));
  do {  // stdin larger than one frame goes in several
    size_t n = std::min<size_t>(payload.size(), protocol::kMaxPayload);
    BRIG_RETURN_IF_ERROR(s.SendRaw({type, 0, channel, std::string(payload.substr(0, n))}));
    payload.remove_prefix(n);
  } while (!payload.empty());
  return s.List().status();
}

}  // namespace

absl::Status WriteStdin(const std::string& agent_socket, int pid, absl::string_view bytes) {
  if (bytes.empty()) return absl::OkStatus();
  return ProcessRequest(agent_socket, pid, MessageType::kStdin, bytes);
}

absl::Status CloseStdin(const std::string& agent_socket, int pid) {
  return ProcessRequest(agent_socket, pid, MessageType::kCloseStdin, "");
}

absl::Status SignalProcess(const std::string& agent_socket, int pid, int signal) {
  return ProcessRequest(agent_socket, pid, MessageType::kSignal,
                        Json{{"signal", signal}}.dump());
}

absl::StatusOr<Json> WaitProcess(const std::string& agent_socket, int pid,
                                 std::optional<Clock::time_point> deadline) {
  BRIG_ASSIGN_OR_RETURN(Session s, Session::Open(agent_socket));
  BRIG_ASSIGN_OR_RETURN(uint32_t channel, s.ChannelOf(pid));
  // Attaching past the end replays nothing and then reports the exit.
  BRIG_RETURN_IF_ERROR(s.Send(MessageType::kAttach, channel,
                              {{"offset", std::numeric_limits<uint64_t>::max()}}));
  std::optional<Json> exit;
  StreamControl control{deadline, {}};
  BRIG_RETURN_IF_ERROR(s.Pump(channel, control, [&](const Json& line) {
    if (line.value("type", "") == "exit") exit = line;
    if (line.value("type", "") == "error") exit = line;
    return true;
  }));
  if (!exit) return absl::UnavailableError("the sandbox's agent went away");
  if (exit->value("type", "") == "error") {
    if (exit->value("code", 0) == 408) {
      return absl::DeadlineExceededError("the request timeout passed before the process exited");
    }
    return absl::UnavailableError(exit->value("message", std::string("agent error")));
  }
  exit->erase("type");
  return *exit;
}

absl::Status Hello(const std::string& agent_socket, std::chrono::milliseconds timeout) {
  absl::StatusOr<AgentConnection> c = AgentConnection::Connect(agent_socket);
  if (!c.ok()) return c.status();
  BRIG_RETURN_IF_ERROR(c->Send({MessageType::kHello, 0, 0, Json{{"version", 1}}.dump()}));
  std::optional<Message> m = c->Next(timeout);
  if (!m || m->type != MessageType::kHelloReply) {
    return absl::UnavailableError("the sandbox's agent did not start");
  }
  return absl::OkStatus();
}

}  // namespace brig::server
