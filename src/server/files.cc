#include "server/files.h"

#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "server/agent_session.h"

namespace brig::server {
namespace {

using protocol::Message;
using protocol::MessageType;

constexpr char kHttpStatusPayload[] = "brig.dev/http-status";
// Bytes of an upload per agent frame.
constexpr size_t kUploadChunk = 256u << 10;

}  // namespace

absl::Status WithHttpStatus(absl::Status status, int http_status) {
  status.SetPayload(kHttpStatusPayload, absl::Cord(std::to_string(http_status)));
  return status;
}

int HttpStatusFromPayload(const absl::Status& status) {
  absl::optional<absl::Cord> payload = status.GetPayload(kHttpStatusPayload);
  int code = 0;
  if (payload) (void)absl::SimpleAtoi(std::string(*payload), &code);
  return code;
}

absl::StatusOr<Json> FileOperation(const std::string& agent_socket, const Json& request) {
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
  BRIG_RETURN_IF_ERROR(s.Send(MessageType::kFileOp, 0, request));
  for (;;) {
    BRIG_ASSIGN_OR_RETURN(Message m, s.Reply(std::chrono::seconds(60)));
    if (m.type == MessageType::kFileResult) return ParseBody(m);
    if (m.type == MessageType::kError) return StatusFromAgentError(ParseBody(m));
  }
}

absl::Status ReadFileTo(const std::string& agent_socket, const std::string& path,
                        const std::string& user, const std::function<bool(absl::string_view)>& sink,
                        bool* started) {
  *started = false;
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
  BRIG_RETURN_IF_ERROR(s.Send(MessageType::kFileRead, 0, {{"path", path}, {"user", user}}));
  for (;;) {
    BRIG_ASSIGN_OR_RETURN(Message m, s.Reply(std::chrono::seconds(60)));
    switch (m.type) {
      case MessageType::kFileData:
        *started = true;
        if (!sink(m.payload)) return absl::OkStatus();  // the client left
        break;
      case MessageType::kFileEnd:
        return absl::OkStatus();
      case MessageType::kError:
        return StatusFromAgentError(ParseBody(m));
      default:
        break;
    }
  }
}

absl::StatusOr<Json> WriteFileFrom(const std::string& agent_socket, const std::string& path,
                                   const std::string& user, int mode, const ByteSource& source) {
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
  BRIG_RETURN_IF_ERROR(
      s.Send(MessageType::kFileWrite, 0, {{"path", path}, {"user", user}, {"mode", mode}}));
  std::vector<char> buffer(kUploadChunk);
  for (;;) {
    // The agent answers during an upload only to refuse it (denied, disk full): stop early.
    if (std::optional<Message> m = s.Poll(); m && m->type == MessageType::kError) {
      return StatusFromAgentError(ParseBody(*m));
    }
    BRIG_ASSIGN_OR_RETURN(size_t n, source(buffer.data(), buffer.size()));
    if (n == 0) break;
    BRIG_RETURN_IF_ERROR(s.SendRaw({MessageType::kFileChunk, 0, 0, std::string(buffer.data(), n)}));
  }
  BRIG_RETURN_IF_ERROR(s.Send(MessageType::kFileCommit, 0, Json::object()));
  for (;;) {
    BRIG_ASSIGN_OR_RETURN(Message m, s.Reply(std::chrono::seconds(60)));
    if (m.type == MessageType::kFileResult) return ParseBody(m);
    if (m.type == MessageType::kError) return StatusFromAgentError(ParseBody(m));
  }
}

absl::Status WatchDirectory(const std::string& agent_socket, const std::string& path,
                            const std::string& user, bool recursive, const StreamControl& control,
                            const LineSink& sink) {
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
  BRIG_RETURN_IF_ERROR(
      s.Send(MessageType::kWatch, 0, {{"path", path}, {"user", user}, {"recursive", recursive}}));
  // The first answer says whether the watch started; errors before it are the call's.
  BRIG_ASSIGN_OR_RETURN(Message first, s.Reply());
  if (first.type == MessageType::kError) return StatusFromAgentError(ParseBody(first));
  Json line = ParseBody(first);
  line.erase("path");
  if (!sink(line)) return absl::OkStatus();
  for (;;) {
    auto slice = std::chrono::milliseconds(250);
    if (control.deadline) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*control.deadline -
                                                               std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        sink({{"type", "error"}, {"code", 408}, {"message", "the request timeout passed"}});
        return absl::OkStatus();
      }
      slice = std::min(slice, left);
    }
    absl::StatusOr<Message> m = s.Reply(slice);
    if (!m.ok()) {
      if (absl::IsUnavailable(m.status())) {
        sink({{"type", "error"}, {"code", 503}, {"message", "the sandbox's agent went away"}});
        return absl::OkStatus();
      }
      if (control.reader_gone && control.reader_gone()) return absl::OkStatus();
      continue;
    }
    if (m->type != MessageType::kWatchEvent) continue;
    if (!sink(ParseBody(*m))) return absl::OkStatus();
  }
}

}  // namespace brig::server
