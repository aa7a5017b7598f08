#include "server/api.h"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstring>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/agent_session.h"
#include "server/commands.h"
#include "server/files.h"
#include "server/gzip.h"
#include "server/interpreter.h"

namespace brig::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kMaxRequestTimeoutS = 86400;
constexpr std::chrono::seconds kDefaultRequestTimeout{60};
constexpr int64_t kMaxSandboxTimeoutS = 2592000;  // 30 days
constexpr size_t kMaxMetadataKeys = 64;

// ---- Reading JSON bodies ------------------------------------------------------------------

// Typed access to a request body's fields. Absent and null fields leave the output alone;
// every present field must have the right type and range.
class Fields {
 public:
  explicit Fields(const Json& body) : body_(body) {}

  absl::Status OnlyKnown(std::initializer_list<absl::string_view> known) const {
    for (auto& [key, value] : body_.items()) {
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        return absl::InvalidArgumentError(absl::StrCat("unknown field \"", key, "\""));
      }
    }
    return absl::OkStatus();
  }

  bool Has(const char* key) const { return body_.contains(key) && !body_[key].is_null(); }

  absl::Status String(const char* key, std::string* out) const {
    if (!Has(key)) return absl::OkStatus();
    if (!body_[key].is_string()) return TypeError(key, "a string");
    *out = body_[key].get<std::string>();
    return absl::OkStatus();
  }

  absl::Status Bool(const char* key, bool* out) const {
    if (!Has(key)) return absl::OkStatus();
    if (!body_[key].is_boolean()) return TypeError(key, "a boolean");
    *out = body_[key].get<bool>();
    return absl::OkStatus();
  }

  absl::Status Number(const char* key, double* out, double min, double max) const {
    if (!Has(key)) return absl::OkStatus();
    if (!body_[key].is_number()) return TypeError(key, "a number");
    double v = body_[key].get<double>();
    if (!(v >= min && v <= max)) return RangeError(key, min, max);
    *out = v;
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status Integer(const char* key, T* out, int64_t min, int64_t max) const {
    if (!Has(key)) return absl::OkStatus();
    const Json& v = body_[key];
    if (!v.is_number_integer()) return TypeError(key, "an integer");
    if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(max)
                               : (v.get<int64_t>() < min || v.get<int64_t>() > max)) {
      return RangeError(key, static_cast<double>(min), static_cast<double>(max));
    }
    *out = static_cast<T>(v.get<int64_t>());
    if (static_cast<int64_t>(*out) < min) return RangeError(key, min, max);
    return absl::OkStatus();
  }

  absl::Status Strings(const char* key, std::vector<std::string>* out) const {
    if (!Has(key)) return absl::OkStatus();
    const Json& v = body_[key];
    if (!v.is_array()) return TypeError(key, "an array of strings");
    out->clear();
    for (const Json& item : v) {
      if (!item.is_string()) return TypeError(key, "an array of strings");
      out->push_back(item.get<std::string>());
    }
    return absl::OkStatus();
  }

  absl::Status Map(const char* key, StringMap* out) const {
    if (!Has(key)) return absl::OkStatus();
    const Json& v = body_[key];
    if (!v.is_object()) return TypeError(key, "an object of strings");
    out->clear();
    for (auto& [k, item] : v.items()) {
      if (!item.is_string()) return TypeError(absl::StrCat(key, ".", k), "a string");
      (*out)[k] = item.get<std::string>();
    }
    return absl::OkStatus();
  }

 private:
  static absl::Status TypeError(absl::string_view key, absl::string_view want) {
    return absl::InvalidArgumentError(absl::StrCat("field \"", key, "\" must be ", want));
  }
  static absl::Status RangeError(absl::string_view key, double min, double max) {
    return absl::InvalidArgumentError(
        absl::StrCat("field \"", key, "\" must be between ", min, " and ", max));
  }
  const Json& body_;
};

absl::StatusOr<Json> ParseObject(const std::string& body) {
  if (body.empty()) return Json::object();
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError("the body is not valid JSON");
  if (!j.is_object()) return absl::InvalidArgumentError("the body must be a JSON object");
  return j;
}

bool IsEnvName(absl::string_view name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

absl::Status CheckEnv(const StringMap& env) {
  for (auto& [name, value] : env) {
    if (!IsEnvName(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("env: \"", name, "\" is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"));
    }
    if (value.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("env: ", name, " contains a NUL byte"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
  if (!ok) return absl::InvalidArgumentError("field \"name\" must be 1-64 of [A-Za-z0-9._-]");
  return absl::OkStatus();
}

absl::Status CheckMetadata(const StringMap& metadata) {
  if (metadata.size() > kMaxMetadataKeys) {
    return absl::InvalidArgumentError("metadata: at most 64 keys");
  }
  for (auto& [key, value] : metadata) {
    if (key.empty() || key.size() > 128 || value.size() > 1024) {
      return absl::InvalidArgumentError(
          "metadata: keys must be 1-128 bytes and values at most 1024 bytes");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CreateRequest> ParseCreate(const Json& body) {
  Fields f(body);
  BRIG_RETURN_IF_ERROR(f.OnlyKnown(
      {"template", "name", "cpus", "memory_mb", "disk_mb", "pids", "env", "metadata", "timeout"}));
  CreateRequest r;
  BRIG_RETURN_IF_ERROR(f.String("template", &r.template_name));
  BRIG_RETURN_IF_ERROR(f.String("name", &r.name));
  if (f.Has("name")) BRIG_RETURN_IF_ERROR(CheckName(r.name));
  BRIG_RETURN_IF_ERROR(f.Number("cpus", &r.cpus, 0, 1024));
  if (r.cpus != 0 && r.cpus < 0.01) {
    return absl::InvalidArgumentError("field \"cpus\" must be 0 (no limit) or 0.01-1024");
  }
  BRIG_RETURN_IF_ERROR(f.Integer("memory_mb", &r.memory_mb, 16, 1 << 20));
  BRIG_RETURN_IF_ERROR(f.Integer("disk_mb", &r.disk_mb, 1, 1 << 20));
  BRIG_RETURN_IF_ERROR(f.Integer("pids", &r.pids, 2, 65536));
  BRIG_RETURN_IF_ERROR(f.Map("env", &r.env));
  BRIG_RETURN_IF_ERROR(CheckEnv(r.env));
  BRIG_RETURN_IF_ERROR(f.Map("metadata", &r.metadata));
  BRIG_RETURN_IF_ERROR(CheckMetadata(r.metadata));
  int64_t timeout = r.timeout.count();
  BRIG_RETURN_IF_ERROR(f.Integer("timeout", &timeout, 1, kMaxSandboxTimeoutS));
  r.timeout = std::chrono::seconds(timeout);
  return r;
}

// {"rows": N, "cols": N}, each 1-10000.
absl::StatusOr<std::pair<int, int>> ParseTerminalSize(const Json& body) {
  Fields f(body);
  BRIG_RETURN_IF_ERROR(f.OnlyKnown({"rows", "cols"}));
  if (!f.Has("rows") || !f.Has("cols")) {
    return absl::InvalidArgumentError("a terminal size needs \"rows\" and \"cols\"");
  }
  int rows = 0, cols = 0;
  BRIG_RETURN_IF_ERROR(f.Integer("rows", &rows, 1, 10000));
  BRIG_RETURN_IF_ERROR(f.Integer("cols", &cols, 1, 10000));
  return std::make_pair(rows, cols);
}

struct CommandRequest {
  ExecRequest exec;
  bool background = false;
};

absl::StatusOr<CommandRequest> ParseCommand(const Json& body, const StringMap& sandbox_env) {
  Fields f(body);
  BRIG_RETURN_IF_ERROR(f.OnlyKnown(
      {"cmd", "argv", "env", "cwd", "user", "timeout", "background", "stdin", "tag", "pty"}));
  CommandRequest r;
  if (f.Has("cmd") == f.Has("argv")) {
    return absl::InvalidArgumentError("give exactly one of \"cmd\" and \"argv\"");
  }
  if (f.Has("cmd")) {
    std::string cmd;
    BRIG_RETURN_IF_ERROR(f.String("cmd", &cmd));
    r.exec.argv = {"/bin/bash", "-l", "-c", cmd};
  } else {
    BRIG_RETURN_IF_ERROR(f.Strings("argv", &r.exec.argv));
    if (r.exec.argv.empty()) return absl::InvalidArgumentError("field \"argv\" is empty");
  }
  StringMap env = sandbox_env, extra;
  BRIG_RETURN_IF_ERROR(f.Map("env", &extra));
  BRIG_RETURN_IF_ERROR(CheckEnv(extra));
  for (auto& [k, v] : extra) env[k] = v;
  for (auto& [k, v] : env) r.exec.env.push_back(absl::StrCat(k, "=", v));
  BRIG_RETURN_IF_ERROR(f.String("cwd", &r.exec.cwd));
  BRIG_RETURN_IF_ERROR(f.String("user", &r.exec.user));
  if (r.exec.user != "user" && r.exec.user != "root") {
    return absl::InvalidArgumentError("field \"user\" must be \"user\" or \"root\"");
  }
  double timeout = 0;
  BRIG_RETURN_IF_ERROR(f.Number("timeout", &timeout, 0, kMaxSandboxTimeoutS));
  r.exec.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  BRIG_RETURN_IF_ERROR(f.Bool("background", &r.background));
  BRIG_RETURN_IF_ERROR(f.Bool("stdin", &r.exec.stdin_open));
  BRIG_RETURN_IF_ERROR(f.String("tag", &r.exec.tag));
  if (f.Has("pty")) {
    if (!body["pty"].is_object()) {
      return absl::InvalidArgumentError("field \"pty\" must be {\"rows\": N, \"cols\": N}");
    }
    BRIG_ASSIGN_OR_RETURN(r.exec.pty, ParseTerminalSize(body["pty"]));
  }
  return r;
}

absl::StatusOr<int> ParseSignal(const Json& body) {
  Fields f(body);
  BRIG_RETURN_IF_ERROR(f.OnlyKnown({"signal"}));
  if (!f.Has("signal")) return absl::InvalidArgumentError("field \"signal\" is required");
  const Json& v = body["signal"];
  if (v.is_number_integer()) {
    int64_t n = v.get<int64_t>();
    if (n < 1 || n > 64) return absl::InvalidArgumentError("field \"signal\" must be 1-64");
    return static_cast<int>(n);
  }
  if (!v.is_string()) {
    return absl::InvalidArgumentError("field \"signal\" must be a name or a number");
  }
  std::string name = v.get<std::string>();
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  for (int n = 1; n < NSIG; ++n) {
    const char* abbrev = sigabbrev_np(n);
    if (abbrev != nullptr && name == abbrev) return n;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown signal \"", v.get<std::string>(), "\""));
}

absl::StatusOr<ListQuery> ParseListQuery(const std::map<std::string, std::string>& query) {
  ListQuery q;
  for (auto& [key, value] : query) {
    if (key == "state") {
      for (absl::string_view name : absl::StrSplit(value, ',', absl::SkipEmpty())) {
        std::optional<SandboxState> state = ParseState(name);
        if (!state) return absl::InvalidArgumentError(absl::StrCat("unknown state \"", name, "\""));
        q.states.insert(*state);
      }
    } else if (key == "name") {
      q.name = value;
    } else if (key == "limit") {
      if (!absl::SimpleAtoi(value, &q.limit) || q.limit < 1 || q.limit > 1000) {
        return absl::InvalidArgumentError("limit must be 1-1000");
      }
    } else if (key == "cursor") {
      q.cursor = value;
    } else if (key.rfind("metadata.", 0) == 0 && key.size() > 9) {
      q.metadata[key.substr(9)] = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown query parameter \"", key, "\""));
    }
  }
  return q;
}

std::string Timestamp(int64_t ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(ms), absl::UTCTimeZone());
}

Json SandboxJson(const SandboxRecord& r) {
  auto time_or_null = [](int64_t ms) { return ms > 0 ? Json(Timestamp(ms)) : Json(nullptr); };
  Json j = {{"id", r.id},
            {"name", r.name.empty() ? Json(nullptr) : Json(r.name)},
            {"template", r.template_name},
            {"state", StateName(r.state)},
            {"reason", r.reason.empty() ? Json(nullptr) : Json(r.reason)},
            {"cpus", r.cpus},
            {"memory_mb", r.memory_mb},
            {"disk_mb", r.disk_mb},
            {"pids", r.pids},
            {"env", r.env},
            {"metadata", r.metadata},
            {"created_at", Timestamp(r.created_ms)},
            {"expires_at", time_or_null(r.expires_ms)},
            {"ended_at", time_or_null(r.ended_ms)}};
  if (r.state == SandboxState::kPaused) j["remaining_s"] = r.remaining_ms / 1000.0;
  return j;
}

Json ErrorJson(int code, absl::string_view message) {
  return {{"code", code}, {"message", std::string(message)}};
}

absl::StatusOr<int> ParsePid(const std::string& text) {
  int pid = 0;
  if (!absl::SimpleAtoi(text, &pid) || pid <= 0) {
    return absl::NotFoundError(absl::StrCat("no process with pid \"", text, "\""));
  }
  return pid;
}

// ---- Routing ------------------------------------------------------------------------------

// One request on its way through: the route's path parameters and the request's own timeout.
struct Call {
  const HttpRequest& request;
  Responder& out;
  std::map<std::string, std::string> params;  // {id}, {pid}
  std::map<std::string, std::string> query;   // without request_timeout
  std::optional<Clock::time_point> deadline;  // the request timeout
  Metrics* metrics = nullptr;
};

}  // namespace

int HttpStatusOf(const absl::Status& status) {
  if (int code = HttpStatusFromPayload(status); code >= 400 && code <= 599) return code;
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kDeadlineExceeded:
      return 408;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

namespace {

using Action = absl::Status (*)(SandboxManager&, Call&);

void SendStatus(Responder& out, const absl::Status& status) {
  int code = HttpStatusOf(status);
  out.Send(code, ErrorJson(code, status.message()));
}

absl::Status NoQuery(const Call& c) {
  if (!c.query.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown query parameter \"", c.query.begin()->first, "\""));
  }
  return absl::OkStatus();
}

absl::Status CreateSandbox(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(Json body, ParseObject(c.request.body));
  BRIG_ASSIGN_OR_RETURN(CreateRequest request, ParseCreate(body));
  auto start = Clock::now();
  BRIG_ASSIGN_OR_RETURN(SandboxManager::Created created, m.Create(request));
  if (created.created && c.metrics) c.metrics->ObserveCreate(Clock::now() - start);
  c.out.Send(created.created ? 201 : 200, SandboxJson(created.record));
  return absl::OkStatus();
}

absl::Status ListSandboxes(SandboxManager& m, Call& c) {
  BRIG_ASSIGN_OR_RETURN(ListQuery query, ParseListQuery(c.query));
  BRIG_ASSIGN_OR_RETURN(ListPage page, m.List(query));
  Json list = Json::array();
  for (const SandboxRecord& r : page.sandboxes) list.push_back(SandboxJson(r));
  c.out.Send(200,
             {{"sandboxes", std::move(list)},
              {"next_cursor", page.next_cursor.empty() ? Json(nullptr) : Json(page.next_cursor)}});
  return absl::OkStatus();
}

absl::Status GetSandbox(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(SandboxRecord r, m.Get(c.params["id"]));
  c.out.Send(200, SandboxJson(r));
  return absl::OkStatus();
}

absl::Status KillSandbox(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_RETURN_IF_ERROR(m.Kill(c.params["id"]));
  c.out.Send(204, nullptr);
  return absl::OkStatus();
}

absl::Status SetSandboxTimeout(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(Json body, ParseObject(c.request.body));
  Fields f(body);
  BRIG_RETURN_IF_ERROR(f.OnlyKnown({"timeout"}));
  if (!f.Has("timeout")) return absl::InvalidArgumentError("field \"timeout\" is required");
  int64_t seconds = 0;
  BRIG_RETURN_IF_ERROR(f.Integer("timeout", &seconds, 1, kMaxSandboxTimeoutS));
  BRIG_ASSIGN_OR_RETURN(SandboxRecord r,
                        m.SetTimeout(c.params["id"], std::chrono::seconds(seconds)));
  c.out.Send(200, SandboxJson(r));
  return absl::OkStatus();
}

// Its resource samples: query `start` and `end` (ms since the epoch; default the last hour).
absl::Status SandboxMetrics(SandboxManager& m, Call& c) {
  const int64_t now = absl::ToUnixMillis(absl::Now());
  int64_t from = now - 3600 * 1000, to = now;
  for (auto& [key, value] : c.query) {
    int64_t* field = key == "start" ? &from : key == "end" ? &to : nullptr;
    if (field == nullptr || !absl::SimpleAtoi(value, field)) {
      return absl::InvalidArgumentError(
          absl::StrCat("query \"", key, "\": only start and end, in ms since the epoch"));
    }
  }
  BRIG_ASSIGN_OR_RETURN(SandboxRecord r, m.Get(c.params["id"]));
  BRIG_ASSIGN_OR_RETURN(std::vector<MetricSample> samples, m.Metrics(c.params["id"], from, to));
  Json list = Json::array();
  for (const MetricSample& s : samples) {
    list.push_back({{"timestamp", Timestamp(s.ms)},
                    {"cpu_percent", s.cpu_percent},
                    {"cpu_usec", s.cpu_usec},
                    {"memory_bytes", s.memory_bytes},
                    {"memory_peak_bytes", s.memory_peak_bytes},
                    {"disk_used_bytes", s.disk_used_bytes},
                    {"pids", s.pids}});
  }
  c.out.Send(200, {{"metrics", list},
                   {"cpus", r.cpus},
                   {"memory_limit_bytes", r.memory_mb << 20},
                   {"disk_limit_bytes", r.disk_mb << 20}});
  return absl::OkStatus();
}

absl::Status PauseSandbox(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(SandboxRecord r, m.Pause(c.params["id"]));
  c.out.Send(200, SandboxJson(r));
  return absl::OkStatus();
}

absl::Status ResumeSandbox(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(SandboxRecord r, m.Resume(c.params["id"]));
  c.out.Send(200, SandboxJson(r));
  return absl::OkStatus();
}

StreamControl ControlOf(Call& c) {
  return {c.deadline, [&out = c.out] { return out.ClientGone(); }};
}

LineSink SinkOf(Call& c) {
  return [&out = c.out](const Json& line) { return out.WriteLine(line); };
}

absl::Status RunCommand(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(SandboxManager::CommandTarget target, m.CommandTargetOf(c.params["id"]));
  BRIG_ASSIGN_OR_RETURN(Json body, ParseObject(c.request.body));
  BRIG_ASSIGN_OR_RETURN(CommandRequest request, ParseCommand(body, target.env));
  if (request.background) {
    BRIG_ASSIGN_OR_RETURN(Json started, StartProcess(target.agent_socket, request.exec));
    c.out.Send(200, started);
    return absl::OkStatus();
  }
  return RunProcess(target.agent_socket, request.exec, ControlOf(c), SinkOf(c));
}

absl::Status ListCommands(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(SandboxManager::CommandTarget target, m.CommandTargetOf(c.params["id"]));
  BRIG_ASSIGN_OR_RETURN(Json list, ListProcesses(target.agent_socket));
  c.out.Send(200, list);
  return absl::OkStatus();
}

// The process a /commands/{pid} route is about: its sandbox's agent and its pid.
struct ProcessTarget {
  std::string agent_socket;
  int pid;
};
absl::StatusOr<ProcessTarget> ProcessOf(SandboxManager& m, Call& c) {
  BRIG_ASSIGN_OR_RETURN(SandboxManager::CommandTarget target, m.CommandTargetOf(c.params["id"]));
  BRIG_ASSIGN_OR_RETURN(int pid, ParsePid(c.params["pid"]));
  return ProcessTarget{std::move(target.agent_socket), pid};
}

absl::Status CommandOutput(SandboxManager& m, Call& c) {
  uint64_t offset = 0;
  bool follow = true;
  for (auto& [key, value] : c.query) {
    if (key == "offset") {
      if (!absl::SimpleAtoi(value, &offset)) {
        return absl::InvalidArgumentError("offset must be a byte count");
      }
    } else if (key == "follow") {
      if (value != "true" && value != "false") {
        return absl::InvalidArgumentError("follow must be true or false");
      }
      follow = value == "true";
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown query parameter \"", key, "\""));
    }
  }
  BRIG_ASSIGN_OR_RETURN(ProcessTarget process, ProcessOf(m, c));
  const std::string& socket = process.agent_socket;
  const int pid = process.pid;
  return AttachProcess(socket, pid, offset, follow, ControlOf(c), SinkOf(c));
}

absl::Status CommandStdin(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(ProcessTarget process, ProcessOf(m, c));
  const std::string& socket = process.agent_socket;
  const int pid = process.pid;
  BRIG_RETURN_IF_ERROR(WriteStdin(socket, pid, c.request.body));
  c.out.Send(204, nullptr);
  return absl::OkStatus();
}

absl::Status CommandCloseStdin(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(ProcessTarget process, ProcessOf(m, c));
  const std::string& socket = process.agent_socket;
  const int pid = process.pid;
  BRIG_RETURN_IF_ERROR(CloseStdin(socket, pid));
  c.out.Send(204, nullptr);
  return absl::OkStatus();
}

absl::Status CommandSignal(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(ProcessTarget process, ProcessOf(m, c));
  const std::string& socket = process.agent_socket;
  const int pid = process.pid;
  BRIG_ASSIGN_OR_RETURN(Json body, ParseObject(c.request.body));
  BRIG_ASSIGN_OR_RETURN(int signal, ParseSignal(body));
  BRIG_RETURN_IF_ERROR(SignalProcess(socket, pid, signal));
  c.out.Send(204, nullptr);
  return absl::OkStatus();
}

absl::Status CommandResize(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(ProcessTarget process, ProcessOf(m, c));
  const std::string& socket = process.agent_socket;
  const int pid = process.pid;
  BRIG_ASSIGN_OR_RETURN(Json body, ParseObject(c.request.body));
  BRIG_ASSIGN_OR_RETURN(auto size, ParseTerminalSize(body));
  BRIG_RETURN_IF_ERROR(ResizeTerminal(socket, pid, size.first, size.second));
  c.out.Send(204, nullptr);
  return absl::OkStatus();
}

// A process's terminal over a WebSocket (browser terminals, e.g. xterm.js): binary messages
// from the client are its stdin, text messages are JSON commands ({"type": "resize", "rows",
// "cols"} or {"type": "signal", "signal"}); its output comes as binary messages from `offset`
// on, and its end as a text message {"type": "exit", ...} before a normal close.
absl::Status CommandWebSocket(SandboxManager& m, Call& c) {
  uint64_t offset = 0;
  for (auto& [key, value] : c.query) {
    if (key != "offset" || !absl::SimpleAtoi(value, &offset)) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown or bad query parameter \"", key, "\" (only offset)"));
    }
  }
  if (!c.out.IsWebSocketUpgrade()) {
    return absl::InvalidArgumentError("this route is a WebSocket: send Upgrade: websocket");
  }
  BRIG_ASSIGN_OR_RETURN(ProcessTarget process, ProcessOf(m, c));
  const std::string& socket = process.agent_socket;
  const int pid = process.pid;
  BRIG_ASSIGN_OR_RETURN(AgentSession session, AgentSession::Open(socket));
  BRIG_ASSIGN_OR_RETURN(uint32_t channel, session.ChannelOf(pid));
  BRIG_RETURN_IF_ERROR(session.Send(protocol::MessageType::kAttach, channel, {{"offset", offset}}));
  using protocol::MessageType;
  WebSocketHandlers handlers;
  handlers.watch_fd = session.fd();
  handlers.on_message = [&](WebSocket& ws, absl::string_view data, bool binary) {
    if (binary) {
      (void)session.SendRaw({MessageType::kStdin, 0, channel, std::string(data)});
      return;
    }
    Json command = Json::parse(data, nullptr, /*allow_exceptions=*/false);
    std::string type = command.is_object() ? command.value("type", "") : "";
    if (type == "resize" && command["rows"].is_number_unsigned() &&
        command["cols"].is_number_unsigned()) {
      (void)session.Send(MessageType::kResize, channel,
                         {{"rows", command["rows"]}, {"cols", command["cols"]}});
    } else if (type == "signal" && command["signal"].is_number_integer()) {
      (void)session.Send(MessageType::kSignal, channel, {{"signal", command["signal"]}});
    } else {
      ws.Send(Json{{"type", "error"},
                   {"code", 400},
                   {"message", "text messages are {\"type\": \"resize\"|\"signal\", ...}"}}
                  .dump(),
              false);
    }
  };
  handlers.on_readable = [&](WebSocket& ws) {
    while (std::optional<protocol::Message> msg = session.Poll()) {
      if (msg->channel != channel) continue;
      if (msg->type == MessageType::kOutput) {
        ws.Send(std::string(protocol::OutputBytes(*msg)), true);
        continue;
      }
      Json line = ParseBody(*msg);
      if (msg->type == MessageType::kExited) {
        line["type"] = "exit";
        ws.Send(line.dump(), false);
        ws.Close();
        return;
      }
      if (msg->type == MessageType::kTruncated) line["type"] = "truncated";
      if (msg->type == MessageType::kError) line["type"] = "error";
      if (line.contains("type")) ws.Send(line.dump(), false);
    }
    if (session.closed()) {
      ws.Send(Json{{"type", "error"}, {"code", 503}, {"message", "the sandbox's agent went away"}}
                  .dump(),
              false);
      ws.Close();
    }
  };
  if (!c.out.RunWebSocket(handlers)) {
    return absl::InvalidArgumentError("the WebSocket upgrade could not be accepted");
  }
  return absl::OkStatus();
}

absl::Status CommandWait(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(ProcessTarget process, ProcessOf(m, c));
  const std::string& socket = process.agent_socket;
  const int pid = process.pid;
  BRIG_ASSIGN_OR_RETURN(Json exit, WaitProcess(socket, pid, c.deadline));
  c.out.Send(200, exit);
  return absl::OkStatus();
}

// ---- Files ----

// The query of a files route: only `allowed` keys; `path` required.
absl::Status CheckQuery(const Call& c, std::initializer_list<absl::string_view> allowed) {
  for (auto& [key, value] : c.query) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown query parameter \"", key, "\""));
    }
  }
  if (!c.query.count("path") || c.query.at("path").empty()) {
    return absl::InvalidArgumentError("the query parameter \"path\" is required");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> UserParam(const std::string& user) {
  if (user.empty()) return std::string("user");
  if (user != "user" && user != "root") {
    return absl::InvalidArgumentError("user must be \"user\" or \"root\"");
  }
  return user;
}

std::string QueryValue(const Call& c, const std::string& key) {
  auto it = c.query.find(key);
  return it == c.query.end() ? "" : it->second;
}

bool Accepts(absl::string_view header, absl::string_view coding) {
  for (absl::string_view part : absl::StrSplit(header, ',')) {
    part = absl::StripAsciiWhitespace(part.substr(0, part.find(';')));
    if (absl::EqualsIgnoreCase(part, coding)) return true;
  }
  return false;
}

absl::Status Download(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(CheckQuery(c, {"path", "user"}));
  BRIG_ASSIGN_OR_RETURN(std::string user, UserParam(QueryValue(c, "user")));
  BRIG_ASSIGN_OR_RETURN(SandboxManager::CommandTarget target, m.CommandTargetOf(c.params["id"]));
  const bool gzip = Accepts(c.request.accept_encoding, "gzip");
  bool responding = false;  // the response started (with the first byte)
  auto start = [&] {
    responding = true;
    return c.out.StartBytes("application/octet-stream", gzip ? "gzip" : "");
  };
  std::optional<GzipWriter> compress;
  auto to_client = [&c](absl::string_view bytes) { return c.out.WriteBytes(bytes); };
  if (gzip) compress.emplace(to_client);
  bool read_any = false;
  absl::Status s = ReadFileTo(
      target.agent_socket, QueryValue(c, "path"), user,
      [&](absl::string_view bytes) {
        if (!responding && !start()) return false;
        return compress ? compress->Write(bytes) : to_client(bytes);
      },
      &read_any);
  if (!s.ok() && !responding) return s;
  if (!s.ok()) {
    c.out.Abort();
    return absl::OkStatus();
  }
  if (!responding) start();  // an empty file
  if (compress) compress->Finish();
  return absl::OkStatus();
}

absl::Status Upload(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(CheckQuery(c, {"path", "user", "mode"}));
  BRIG_ASSIGN_OR_RETURN(std::string user, UserParam(QueryValue(c, "user")));
  int mode = 0644;
  if (std::string text = QueryValue(c, "mode"); !text.empty()) {
    char* end = nullptr;
    long value = std::strtol(text.c_str(), &end, 8);
    if (*end != '\0' || value < 0 || value > 07777) {
      return absl::InvalidArgumentError("mode must be octal permission bits, e.g. 0644");
    }
    mode = static_cast<int>(value);
  }
  BRIG_ASSIGN_OR_RETURN(SandboxManager::CommandTarget target, m.CommandTargetOf(c.params["id"]));
  ByteSource body = [&c](char* out, size_t size) { return c.request.read_body(out, size); };
  if (absl::EqualsIgnoreCase(c.request.content_encoding, "gzip")) {
    body = GunzipSource(body);
  } else if (!c.request.content_encoding.empty() &&
             !absl::EqualsIgnoreCase(c.request.content_encoding, "identity")) {
    return absl::InvalidArgumentError("Content-Encoding must be gzip or identity");
  }
  BRIG_ASSIGN_OR_RETURN(
      Json entry, WriteFileFrom(target.agent_socket, QueryValue(c, "path"), user, mode, body));
  c.out.Send(200, entry);
  return absl::OkStatus();
}

// stat, list, remove: the query names the path.
absl::Status FileQueryOp(SandboxManager& m, Call& c, const char* op) {
  const bool list = std::string(op) == "list";
  BRIG_RETURN_IF_ERROR(list ? CheckQuery(c, {"path", "user", "depth"})
                            : CheckQuery(c, {"path", "user"}));
  BRIG_ASSIGN_OR_RETURN(std::string user, UserParam(QueryValue(c, "user")));
  Json request = {{"op", op}, {"path", QueryValue(c, "path")}, {"user", user}};
  if (list) {
    int depth = 1;
    if (std::string text = QueryValue(c, "depth");
        !text.empty() && (!absl::SimpleAtoi(text, &depth) || depth < 1 || depth > 16)) {
      return absl::InvalidArgumentError("depth must be 1-16");
    }
    request["depth"] = depth;
  }
  BRIG_ASSIGN_OR_RETURN(SandboxManager::CommandTarget target, m.CommandTargetOf(c.params["id"]));
  BRIG_ASSIGN_OR_RETURN(Json result, FileOperation(target.agent_socket, request));
  if (std::string(op) == "remove") {
    c.out.Send(204, nullptr);
  } else {
    c.out.Send(200, result);
  }
  return absl::OkStatus();
}

absl::Status StatFile(SandboxManager& m, Call& c) { return FileQueryOp(m, c, "stat"); }
absl::Status ListFiles(SandboxManager& m, Call& c) { return FileQueryOp(m, c, "list"); }
absl::Status RemoveFile(SandboxManager& m, Call& c) { return FileQueryOp(m, c, "remove"); }

// mkdir, move: the body names the paths.
absl::Status FileBodyOp(SandboxManager& m, Call& c, const char* op) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(Json body, ParseObject(c.request.body));
  Fields f(body);
  const bool move = std::string(op) == "move";
  BRIG_RETURN_IF_ERROR(move ? f.OnlyKnown({"from", "to", "user"}) : f.OnlyKnown({"path", "user"}));
  std::string path, to, user;
  BRIG_RETURN_IF_ERROR(f.String(move ? "from" : "path", &path));
  BRIG_RETURN_IF_ERROR(f.String("to", &to));
  BRIG_RETURN_IF_ERROR(f.String("user", &user));
  if (path.empty() || (move && to.empty())) {
    return absl::InvalidArgumentError(move ? "move needs \"from\" and \"to\""
                                           : "mkdir needs \"path\"");
  }
  BRIG_ASSIGN_OR_RETURN(user, UserParam(user));
  Json request = {{"op", op}, {"path", path}, {"user", user}};
  if (move) request["to"] = to;
  BRIG_ASSIGN_OR_RETURN(SandboxManager::CommandTarget target, m.CommandTargetOf(c.params["id"]));
  BRIG_ASSIGN_OR_RETURN(Json result, FileOperation(target.agent_socket, request));
  c.out.Send(200, result);
  return absl::OkStatus();
}

absl::Status MakeDir(SandboxManager& m, Call& c) { return FileBodyOp(m, c, "mkdir"); }
absl::Status MoveFile(SandboxManager& m, Call& c) { return FileBodyOp(m, c, "move"); }

absl::Status WatchFiles(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(CheckQuery(c, {"path", "user", "recursive"}));
  BRIG_ASSIGN_OR_RETURN(std::string user, UserParam(QueryValue(c, "user")));
  std::string recursive = QueryValue(c, "recursive");
  if (!recursive.empty() && recursive != "true" && recursive != "false") {
    return absl::InvalidArgumentError("recursive must be true or false");
  }
  BRIG_ASSIGN_OR_RETURN(SandboxManager::CommandTarget target, m.CommandTargetOf(c.params["id"]));
  return WatchDirectory(target.agent_socket, QueryValue(c, "path"), user, recursive == "true",
                        ControlOf(c), SinkOf(c));
}

// ---- Code interpreter ----

std::vector<std::string> EnvList(const StringMap& env) {
  std::vector<std::string> out;
  for (auto& [k, v] : env) out.push_back(absl::StrCat(k, "=", v));
  return out;
}

absl::Status CreateCodeContext(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(Json body, ParseObject(c.request.body));
  Fields f(body);
  BRIG_RETURN_IF_ERROR(f.OnlyKnown({"language", "cwd", "env"}));
  ContextRequest request;
  StringMap env;
  BRIG_RETURN_IF_ERROR(f.String("language", &request.language));
  BRIG_RETURN_IF_ERROR(f.String("cwd", &request.cwd));
  BRIG_RETURN_IF_ERROR(f.Map("env", &env));
  BRIG_RETURN_IF_ERROR(CheckEnv(env));
  if (!request.cwd.empty() && request.cwd[0] != '/') {
    return absl::InvalidArgumentError("field \"cwd\" must be an absolute path");
  }
  BRIG_ASSIGN_OR_RETURN(SandboxManager::CommandTarget target, m.CommandTargetOf(c.params["id"]));
  if (!request.cwd.empty()) {
    absl::StatusOr<Json> dir = FileOperation(
        target.agent_socket, {{"op", "stat"}, {"path", request.cwd}, {"user", "user"}});
    if (!dir.ok() || (*dir)["type"] != "dir") {
      return absl::InvalidArgumentError(
          absl::StrCat("field \"cwd\": ", request.cwd, " is not a directory in the sandbox"));
    }
  }
  StringMap all = target.env;
  for (auto& [k, v] : env) all[k] = v;
  request.env = EnvList(all);
  BRIG_ASSIGN_OR_RETURN(Json context, CreateContext(target.agent_socket, request));
  c.out.Send(201, context);
  return absl::OkStatus();
}

absl::Status ListCodeContexts(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(SandboxManager::CommandTarget target, m.CommandTargetOf(c.params["id"]));
  BRIG_ASSIGN_OR_RETURN(Json list, ListContexts(target.agent_socket));
  c.out.Send(200, list);
  return absl::OkStatus();
}

absl::Status DeleteCodeContext(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(SandboxManager::CommandTarget target, m.CommandTargetOf(c.params["id"]));
  BRIG_RETURN_IF_ERROR(DeleteContext(target.agent_socket, c.params["ctx"]));
  c.out.Send(204, nullptr);
  return absl::OkStatus();
}

absl::Status RestartCodeContext(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(SandboxManager::CommandTarget target, m.CommandTargetOf(c.params["id"]));
  BRIG_ASSIGN_OR_RETURN(Json context,
                        RestartContext(target.agent_socket, c.params["ctx"], EnvList(target.env)));
  c.out.Send(200, context);
  return absl::OkStatus();
}

absl::Status ForkCodeContext(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(SandboxManager::CommandTarget target, m.CommandTargetOf(c.params["id"]));
  BRIG_ASSIGN_OR_RETURN(Json context, ForkContext(target.agent_socket, c.params["ctx"]));
  c.out.Send(201, context);
  return absl::OkStatus();
}

absl::Status RunCodeRoute(SandboxManager& m, Call& c) {
  BRIG_RETURN_IF_ERROR(NoQuery(c));
  BRIG_ASSIGN_OR_RETURN(Json body, ParseObject(c.request.body));
  Fields f(body);
  BRIG_RETURN_IF_ERROR(f.OnlyKnown({"code", "context", "language", "env", "timeout"}));
  CodeRequest request;
  if (!f.Has("code")) return absl::InvalidArgumentError("field \"code\" is required");
  BRIG_RETURN_IF_ERROR(f.String("code", &request.code));
  BRIG_RETURN_IF_ERROR(f.String("context", &request.context));
  BRIG_RETURN_IF_ERROR(f.String("language", &request.language));
  StringMap env;
  BRIG_RETURN_IF_ERROR(f.Map("env", &env));
  BRIG_RETURN_IF_ERROR(CheckEnv(env));
  request.env = EnvList(env);
  double timeout = 0;
  BRIG_RETURN_IF_ERROR(f.Number("timeout", &timeout, 0, kMaxSandboxTimeoutS));
  request.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout * 1000));
  BRIG_ASSIGN_OR_RETURN(SandboxManager::CommandTarget target, m.CommandTargetOf(c.params["id"]));
  request.context_env = EnvList(target.env);
  return RunCode(target.agent_socket, request, ControlOf(c), SinkOf(c));
}

struct Route {
  const char* method;
  const char* pattern;  // segments; {name} captures one
  Action action;
  bool streaming;  // no default request timeout
};

constexpr Route kRoutes[] = {
    {"POST", "/v1/sandboxes", CreateSandbox, false},
    {"GET", "/v1/sandboxes", ListSandboxes, false},
    {"GET", "/v1/sandboxes/{id}", GetSandbox, false},
    {"DELETE", "/v1/sandboxes/{id}", KillSandbox, false},
    {"POST", "/v1/sandboxes/{id}/timeout", SetSandboxTimeout, false},
    {"POST", "/v1/sandboxes/{id}/pause", PauseSandbox, false},
    {"GET", "/v1/sandboxes/{id}/metrics", SandboxMetrics, false},
    {"POST", "/v1/sandboxes/{id}/resume", ResumeSandbox, false},
    {"POST", "/v1/sandboxes/{id}/commands", RunCommand, true},
    {"GET", "/v1/sandboxes/{id}/commands", ListCommands, false},
    {"GET", "/v1/sandboxes/{id}/commands/{pid}/output", CommandOutput, true},
    {"POST", "/v1/sandboxes/{id}/commands/{pid}/stdin", CommandStdin, false},
    {"POST", "/v1/sandboxes/{id}/commands/{pid}/stdin/close", CommandCloseStdin, false},
    {"POST", "/v1/sandboxes/{id}/commands/{pid}/signal", CommandSignal, false},
    {"POST", "/v1/sandboxes/{id}/commands/{pid}/resize", CommandResize, false},
    {"GET", "/v1/sandboxes/{id}/commands/{pid}/wait", CommandWait, false},
    {"GET", "/v1/sandboxes/{id}/commands/{pid}/ws", CommandWebSocket, true},
    {"GET", "/v1/sandboxes/{id}/files", Download, true},
    {"PUT", "/v1/sandboxes/{id}/files", Upload, true},
    {"DELETE", "/v1/sandboxes/{id}/files", RemoveFile, false},
    {"GET", "/v1/sandboxes/{id}/files/stat", StatFile, false},
    {"GET", "/v1/sandboxes/{id}/files/list", ListFiles, false},
    {"POST", "/v1/sandboxes/{id}/files/mkdir", MakeDir, false},
    {"POST", "/v1/sandboxes/{id}/files/move", MoveFile, false},
    {"GET", "/v1/sandboxes/{id}/files/watch", WatchFiles, true},
    {"POST", "/v1/sandboxes/{id}/contexts", CreateCodeContext, false},
    {"GET", "/v1/sandboxes/{id}/contexts", ListCodeContexts, false},
    {"DELETE", "/v1/sandboxes/{id}/contexts/{ctx}", DeleteCodeContext, false},
    {"POST", "/v1/sandboxes/{id}/contexts/{ctx}/restart", RestartCodeContext, false},
    {"POST", "/v1/sandboxes/{id}/contexts/{ctx}/fork", ForkCodeContext, false},
    {"POST", "/v1/sandboxes/{id}/code", RunCodeRoute, true},
};

bool Match(absl::string_view pattern, const std::vector<std::string>& path,
           std::map<std::string, std::string>* params) {
  std::vector<absl::string_view> want = absl::StrSplit(pattern, '/', absl::SkipEmpty());
  if (want.size() != path.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i].front() == '{') {
      (*params)[std::string(want[i].substr(1, want[i].size() - 2))] = path[i];
    } else if (want[i] != path[i]) {
      return false;
    }
  }
  return true;
}

bool Authenticated(const HttpRequest& r, const ApiKey& key) {
  constexpr absl::string_view kBearer = "Bearer ";
  if (!r.api_key.empty() && key.Matches(r.api_key)) return true;
  absl::string_view auth = r.authorization;
  return auth.size() > kBearer.size() && absl::StartsWithIgnoreCase(auth, kBearer) &&
         key.Matches(auth.substr(kBearer.size()));
}

absl::StatusOr<std::optional<Clock::time_point>> RequestDeadline(
    std::map<std::string, std::string>& query, bool streaming) {
  auto it = query.find("request_timeout");
  if (it == query.end()) {
    if (streaming) return std::nullopt;
    return Clock::now() + kDefaultRequestTimeout;
  }
  double seconds = 0;
  if (!absl::SimpleAtod(it->second, &seconds) || !(seconds > 0) || seconds > kMaxRequestTimeoutS) {
    return absl::InvalidArgumentError("request_timeout must be seconds, 0 < t <= 86400");
  }
  query.erase(it);
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

bool Api::BodyStreams(const std::string& method, const std::string& path) {
  // Uploads: PUT /v1/sandboxes/{id}/files.
  std::vector<absl::string_view> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  return method == "PUT" && parts.size() == 4 && parts[0] == "v1" && parts[1] == "sandboxes" &&
         parts[3] == "files";
}

void Api::Handle(const HttpRequest& request, Responder& out) const {
  if (request.path == "/health") {
    if (request.method == "GET") {
      out.Send(200, {{"status", "ok"}});
    } else {
      out.Send(405, ErrorJson(405, "only GET is allowed on /health"));
    }
    return;
  }
  // Browsers cannot set headers on a WebSocket: it may carry the key as ?api_key=.
  auto query_key = request.query.find("api_key");
  bool by_query = query_key != request.query.end() && out.IsWebSocketUpgrade() &&
                  key_.Matches(query_key->second);
  if (!by_query && !Authenticated(request, key_)) {
    out.Send(401, ErrorJson(401,
                            "missing or wrong API key (Authorization: Bearer <key>, or "
                            "X-API-Key: <key>)"));
    metrics_.CountRequest("(unauthenticated)", request.method, 401);
    return;
  }
  if (request.path == "/metrics" && request.method == "GET") {
    out.StartBytes("text/plain; version=0.0.4; charset=utf-8", "");
    out.WriteBytes(metrics_.Render(sandboxes_.CountByState()));
    return;
  }
  std::vector<std::string> path = absl::StrSplit(request.path, '/', absl::SkipEmpty());
  bool path_known = false;
  for (const Route& route : kRoutes) {
    Call call{request, out, {}, request.query, std::nullopt, &metrics_};
    if (by_query) call.query.erase("api_key");
    if (!Match(route.pattern, path, &call.params)) continue;
    path_known = true;
    if (request.method != route.method) continue;
    absl::StatusOr<std::optional<Clock::time_point>> deadline =
        RequestDeadline(call.query, route.streaming);
    absl::Status status = deadline.status();
    if (status.ok()) {
      call.deadline = *deadline;
      // Everything from a sandbox is untrusted: a field of an unexpected type in what an agent
      // or kernel sent fails this request, never the daemon.
      try {
        status = route.action(sandboxes_, call);
      } catch (const Json::exception& e) {
        status = absl::InternalError(absl::StrCat("unexpected data from the sandbox: ", e.what()));
      }
    }
    // A stream that already started carries its own error lines.
    if (!status.ok()) SendStatus(out, status);
    metrics_.CountRequest(route.pattern, request.method, out.status());
    return;
  }
  if (path_known) {
    out.Send(405,
             ErrorJson(405, absl::StrCat(request.method, " is not allowed on ", request.path)));
  } else {
    out.Send(404, ErrorJson(404, absl::StrCat("no route ", request.path)));
  }
}

}  // namespace brig::server
