#include "server/commands.h"

#include <algorithm>
#include <array>
#include <limits>

#include "absl/strings/escaping.h"
#include "protocol/client.h"
#include "server/agent_session.h"

namespace brig::server {
namespace {

using protocol::AgentConnection;
using protocol::Message;
using protocol::MessageType;
using Clock = std::chrono::steady_clock;

Json ExecBody(const ExecRequest& r) {
  Json body = {{"argv", r.argv}, {"env", r.env}, {"cwd", r.cwd},
               {"user", r.user}, {"tag", r.tag}, {"stdin", r.stdin_open}};
  if (r.timeout.count() > 0) body["timeout_ms"] = r.timeout.count();
  if (r.pty) body["pty"] = {{"rows", r.pty->first}, {"cols", r.pty->second}};
  return body;
}

// Sends exec and waits for `started`. An error before it (a bad request) fails the call; one
// with a channel (the command could not be executed) is returned to become a line.
struct Started {
  uint32_t channel;
  int pid;
  std::optional<Json> exec_error;
};
absl::StatusOr<Started> Exec(AgentSession& s, const ExecRequest& request) {
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
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
  BRIG_ASSIGN_OR_RETURN(Started started, Exec(s, request));
  return Json{{"pid", started.pid}, {"tag", request.tag}};
}

absl::Status RunProcess(const std::string& agent_socket, const ExecRequest& request,
                        const StreamControl& control, const LineSink& sink) {
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
  BRIG_ASSIGN_OR_RETURN(Started started, Exec(s, request));
  if (!sink({{"type", "start"}, {"pid", started.pid}})) return absl::OkStatus();
  if (started.exec_error && !sink(*started.exec_error)) return absl::OkStatus();
  return s.Pump(started.channel, control, sink);
}

absl::Status AttachProcess(const std::string& agent_socket, int pid, uint64_t offset, bool follow,
                           const StreamControl& control, const LineSink& sink) {
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
  BRIG_ASSIGN_OR_RETURN(uint32_t channel, s.ChannelOf(pid));
  BRIG_RETURN_IF_ERROR(
      s.Send(MessageType::kAttach, channel, {{"offset", offset}, {"follow", follow}}));
  return s.Pump(channel, control, sink);
}

absl::StatusOr<Json> ListProcesses(const std::string& agent_socket) {
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
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
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
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
  return ProcessRequest(agent_socket, pid, MessageType::kSignal, Json{{"signal", signal}}.dump());
}

absl::Status ResizeTerminal(const std::string& agent_socket, int pid, int rows, int cols) {
  return ProcessRequest(agent_socket, pid, MessageType::kResize,
                        Json{{"rows", rows}, {"cols", cols}}.dump());
}

absl::StatusOr<Json> WaitProcess(const std::string& agent_socket, int pid,
                                 std::optional<Clock::time_point> deadline) {
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
  BRIG_ASSIGN_OR_RETURN(uint32_t channel, s.ChannelOf(pid));
  // Attaching past the end replays nothing and then reports the exit.
  BRIG_RETURN_IF_ERROR(
      s.Send(MessageType::kAttach, channel, {{"offset", std::numeric_limits<uint64_t>::max()}}));
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
