#include "server/interpreter.h"

#include <signal.h>
#include <sys/random.h>

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "server/agent_session.h"

namespace brig::server {
namespace {

using protocol::Message;
using protocol::MessageType;
using Clock = std::chrono::steady_clock;

constexpr char kKernel[] = "/opt/brig/kernel.py";
constexpr char kContextTag[] = "brig:context:";
constexpr char kZygoteTag[] = "brig:zygote:";
// After an interrupt, how long the kernel gets to report it before the stream ends anyway.
constexpr std::chrono::seconds kInterruptGrace{5};

absl::Status CheckLanguage(const std::string& language) {
  if (language != "python" && language != "bash" && language != "javascript") {
    return absl::InvalidArgumentError(
        absl::StrCat("language \"", language, "\" is not supported (python, javascript, bash)"));
  }
  return absl::OkStatus();
}

std::string NewContextId() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char random[12];
  (void)!::getrandom(random, sizeof random, 0);
  std::string id;
  for (unsigned char r : random) id += kAlphabet[r % 36];
  return id;
}

// The newest running process whose tag is `tag`: its channel, or 0.
uint32_t RunningWithTag(const Json& list, const std::string& tag) {
  uint32_t channel = 0;
  for (const Json& p : list["processes"]) {
    if (p.value("tag", "") == tag && p.value("running", false)) channel = p.value("channel", 0u);
  }
  return channel;
}

// One lock per sandbox (by agent socket): its zygote starts once.
std::mutex& ZygoteLock(const std::string& agent_socket) {
  static std::mutex registry_mu;
  static std::map<std::string, std::unique_ptr<std::mutex>> locks;
  std::lock_guard<std::mutex> lock(registry_mu);
  auto& m = locks[agent_socket];
  if (!m) m = std::make_unique<std::mutex>();
  return *m;
}

// The channel of the language's zygote, started on first use.
absl::StatusOr<uint32_t> EnsureZygote(AgentSession& s, const std::string& agent_socket,
                                      const std::string& language) {
  std::lock_guard<std::mutex> lock(ZygoteLock(agent_socket));
  const std::string tag = kZygoteTag + language;
  BRIG_ASSIGN_OR_RETURN(Json list, s.List());
  if (uint32_t channel = RunningWithTag(list, tag)) return channel;
  BRIG_RETURN_IF_ERROR(s.Send(MessageType::kExec, 0,
                              {{"argv", {"/usr/bin/python3", kKernel, "zygote"}},
                               {"zygote", true},
                               {"tag", tag},
                               {"env", {"PYTHONUNBUFFERED=1"}}}));
  for (;;) {
    BRIG_ASSIGN_OR_RETURN(Message m, s.Reply());
    if (m.type == MessageType::kStarted) return m.channel;
    if (m.type == MessageType::kError) return StatusFromAgentError(ParseBody(m));
  }
}

Json ContextJson(const Json& process) {
  // tag: brig:context:<id>:<language>
  std::vector<std::string> parts = absl::StrSplit(process.value("tag", ""), ':');
  return {{"id", parts.size() == 4 ? parts[2] : ""},
          {"language", parts.size() == 4 ? parts[3] : ""},
          {"pid", process.value("pid", -1)},
          {"running", process.value("running", false)}};
}

absl::StatusOr<Json> StartContext(AgentSession& s, const std::string& agent_socket,
                                  const ContextRequest& request) {
  BRIG_RETURN_IF_ERROR(CheckLanguage(request.language));
  // Every language's context is a kernel forked from the Python zygote (a bash context drives
  // a bash of its own).
  BRIG_ASSIGN_OR_RETURN(uint32_t zygote, EnsureZygote(s, agent_socket, "python"));
  const std::string id = request.id.empty() ? NewContextId() : request.id;
  const std::string tag = absl::StrCat(kContextTag, id, ":", request.language);
  BRIG_RETURN_IF_ERROR(s.Send(MessageType::kExec, 0,
                              {{"fork", zygote},
                               {"tag", tag},
                               {"cwd", request.cwd},
                               {"env", request.env},
                               {"language", request.language},
                               {"stdin", true}}));
  for (;;) {
    BRIG_ASSIGN_OR_RETURN(Message m, s.Reply());
    if (m.type == MessageType::kError) return StatusFromAgentError(ParseBody(m));
    if (m.type != MessageType::kStarted) continue;
    return Json{{"id", id},
                {"language", request.language},
                {"cwd", request.cwd},
                {"pid", ParseBody(m).value("pid", -1)},
                {"running", true}};
  }
}

// The running context's channel (the newest, if a restart's old process still runs), or
// NotFound.
absl::StatusOr<uint32_t> ContextChannel(AgentSession& s, const std::string& id) {
  BRIG_ASSIGN_OR_RETURN(Json list, s.List());
  uint32_t channel = 0;
  for (const Json& p : list["processes"]) {
    const std::string tag = p.value("tag", "");
    if (absl::StartsWith(tag, absl::StrCat(kContextTag, id, ":")) && p.value("running", false)) {
      channel = std::max(channel, p.value("channel", 0u));
    }
  }
  if (channel == 0) return absl::NotFoundError(absl::StrCat("no running context ", id));
  return channel;
}

// Kills a context's process and waits until the agent has reaped it, so that an answer
// never races the old process.
absl::Status KillAndWait(AgentSession& s, uint32_t channel) {
  BRIG_RETURN_IF_ERROR(s.Send(MessageType::kSignal, channel, {{"signal", SIGKILL}}));
  BRIG_RETURN_IF_ERROR(
      s.Send(MessageType::kAttach, channel, {{"offset", std::numeric_limits<uint64_t>::max()}}));
  for (;;) {
    BRIG_ASSIGN_OR_RETURN(Message m, s.Reply());
    if (m.channel != channel) continue;
    if (m.type == MessageType::kExited) return absl::OkStatus();
    if (m.type == MessageType::kError) return StatusFromAgentError(ParseBody(m));
  }
}

}  // namespace

absl::StatusOr<Json> CreateContext(const std::string& agent_socket, const ContextRequest& request) {
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
  return StartContext(s, agent_socket, request);
}

absl::StatusOr<Json> ListContexts(const std::string& agent_socket) {
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
  BRIG_ASSIGN_OR_RETURN(Json list, s.List());
  // The newest process per context id (a restarted context replaces its old process).
  std::map<std::string, Json> contexts;
  for (const Json& p : list["processes"]) {
    if (!absl::StartsWith(p.value("tag", ""), kContextTag)) continue;
    Json c = ContextJson(p);
    contexts[c["id"].get<std::string>()] = c;
  }
  Json out = Json::array();
  for (auto& [id, c] : contexts) out.push_back(c);
  return Json{{"contexts", out}};
}

absl::Status DeleteContext(const std::string& agent_socket, const std::string& id) {
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
  BRIG_ASSIGN_OR_RETURN(uint32_t channel, ContextChannel(s, id));
  return KillAndWait(s, channel);
}

absl::StatusOr<Json> RestartContext(const std::string& agent_socket, const std::string& id,
                                    const std::vector<std::string>& env) {
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
  BRIG_ASSIGN_OR_RETURN(Json list, s.List());
  std::string language;
  for (const Json& p : list["processes"]) {
    Json c = ContextJson(p);
    if (c["id"] == id) language = c["language"].get<std::string>();
  }
  if (language.empty()) return absl::NotFoundError(absl::StrCat("no context ", id));
  if (absl::StatusOr<uint32_t> old = ContextChannel(s, id); old.ok()) {
    BRIG_RETURN_IF_ERROR(KillAndWait(s, *old));
  }
  ContextRequest request;
  request.language = language;
  request.id = id;
  request.env = env;
  return StartContext(s, agent_socket, request);
}

absl::StatusOr<Json> ForkContext(const std::string& agent_socket, const std::string& id) {
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
  BRIG_ASSIGN_OR_RETURN(Json list, s.List());
  std::string language;
  for (const Json& p : list["processes"]) {
    Json c = ContextJson(p);
    if (c["id"] == id && p.value("running", false)) language = c["language"].get<std::string>();
  }
  if (language.empty()) return absl::NotFoundError(absl::StrCat("no running context ", id));
  if (language != "python") {
    return absl::InvalidArgumentError(
        absl::StrCat("only python contexts can be forked (", id, " is ", language, ")"));
  }
  BRIG_ASSIGN_OR_RETURN(uint32_t original, ContextChannel(s, id));
  const std::string copy = NewContextId();
  BRIG_RETURN_IF_ERROR(s.Send(MessageType::kExec, 0,
                              {{"fork", original},
                               {"tag", absl::StrCat(kContextTag, copy, ":", language)},
                               {"language", language},
                               {"stdin", true}}));
  for (;;) {
    BRIG_ASSIGN_OR_RETURN(Message m, s.Reply());
    if (m.type == MessageType::kError) return StatusFromAgentError(ParseBody(m));
    if (m.type != MessageType::kStarted) continue;
    return Json{{"id", copy},
                {"language", language},
                {"pid", ParseBody(m).value("pid", -1)},
                {"running", true},
                {"forked_from", id}};
  }
}

absl::Status RunCode(const std::string& agent_socket, const CodeRequest& request,
                     const StreamControl& control, const LineSink& sink) {
  BRIG_RETURN_IF_ERROR(CheckLanguage(request.language));
  BRIG_ASSIGN_OR_RETURN(AgentSession s, AgentSession::Open(agent_socket));
  const std::string id = request.context.empty() ? "default-" + request.language : request.context;
  absl::StatusOr<uint32_t> found = ContextChannel(s, id);
  if (!found.ok() && request.context.empty()) {
    ContextRequest create;
    create.language = request.language;
    create.id = id;
    create.env = request.context_env;
    BRIG_RETURN_IF_ERROR(StartContext(s, agent_socket, create).status());
    found = ContextChannel(s, id);
  }
  BRIG_RETURN_IF_ERROR(found.status());
  const uint32_t channel = *found;
  // Follow from the end (nothing old), then send the request.
  BRIG_RETURN_IF_ERROR(
      s.Send(MessageType::kAttach, channel, {{"offset", std::numeric_limits<uint64_t>::max()}}));
  Json env = Json::object();
  for (const std::string& kv : request.env) {
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  const std::string execution = NewContextId();
  std::string line = Json{{"id", execution}, {"code", request.code}, {"env", env}}.dump() + "\n";
  BRIG_RETURN_IF_ERROR(s.SendRaw({MessageType::kStdin, 0, channel, line}));

  std::optional<Clock::time_point> deadline = control.deadline;
  if (request.timeout.count() > 0) {
    auto mine = Clock::now() + request.timeout;
    if (!deadline || mine < *deadline) deadline = mine;
  }
  std::optional<Clock::time_point> interrupted;  // when SIGINT was sent
  bool reader_gone = false;
  std::string pending;  // protocol bytes not yet a whole line
  for (;;) {
    if (!interrupted && deadline && Clock::now() >= *deadline) {
      (void)s.Send(MessageType::kSignal, channel, {{"signal", SIGINT}});
      interrupted = Clock::now();
    }
    if (interrupted && Clock::now() - *interrupted > kInterruptGrace) {
      if (!reader_gone) {
        sink({{"type", "error"}, {"code", 408}, {"message", "the execution did not stop"}});
      }
      return absl::OkStatus();
    }
    absl::StatusOr<Message> m = s.Reply(std::chrono::milliseconds(100));
    if (!m.ok()) {
      if (absl::IsUnavailable(m.status())) {
        sink({{"type", "error"}, {"code", 503}, {"message", "the sandbox's agent went away"}});
        return absl::OkStatus();
      }
      if (!interrupted && control.reader_gone && control.reader_gone()) {
        reader_gone = true;  // interrupt it: nobody waits for the result
        (void)s.Send(MessageType::kSignal, channel, {{"signal", SIGINT}});
        interrupted = Clock::now();
      }
      continue;
    }
    if (m->channel != channel) continue;
    if (m->type == MessageType::kExited) {
      if (!reader_gone) {
        sink({{"type", "error"},
              {"name", "ContextDied"},
              {"value", "the context's process ended: restart the context"},
              {"traceback", Json::array()}});
      }
      return absl::OkStatus();
    }
    if (m->type != MessageType::kOutput) continue;
    absl::string_view bytes = protocol::OutputBytes(*m);
    pending.append(bytes.data(), bytes.size());
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      Json message = Json::parse(pending.substr(0, nl), nullptr, /*allow_exceptions=*/false);
      pending.erase(0, nl + 1);
      // Lines between executions (or from a misbehaving kernel) carry no id of ours.
      if (!message.is_object() || !message.contains("id") || message["id"] != execution) {
        continue;
      }
      message.erase("id");
      const bool end = message.contains("type") && message["type"] == "end";
      if (!reader_gone && !sink(message)) reader_gone = true;
      if (end) return absl::OkStatus();
      if (reader_gone && !interrupted) {
        (void)s.Send(MessageType::kSignal, channel, {{"signal", SIGINT}});
        interrupted = Clock::now();
      }
    }
  }
}

}  // namespace brig::server
