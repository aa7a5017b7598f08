// The client subcommands: create, ls, exec, kill, timeout, logs and run --remote, each one or
// two calls of the HTTP API (docs/api.md) through ApiClient.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/files.h"
#include "cli/api_client.h"
#include "cli/commands.h"
#include "cli/units.h"
#include "engine/sandbox.h"

namespace brig {
namespace {

using Json = nlohmann::json;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "brig: %s\n", std::string(status.message()).c_str());
  return kExitBrigError;
}

std::string FirstOf(const std::string& flag, const char* env, const std::string& file) {
  if (!flag.empty()) return flag;
  if (const char* v = std::getenv(env); v != nullptr && *v != '\0') return v;
  absl::StatusOr<std::string> text = ReadFile(file);
  return text.ok() ? std::string(absl::StripAsciiWhitespace(*text)) : "";
}

}  // namespace

absl::StatusOr<ApiClient> ConnectToDaemon(const RemoteFlags& remote) {
  std::string url = FirstOf(remote.url, "BRIG_URL", remote.state_dir + "/url");
  std::string key = FirstOf(remote.api_key, "BRIG_API_KEY", remote.state_dir + "/api-key");
  if (url.empty()) url = "http://127.0.0.1:7878";
  if (key.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no API key: pass --api-key, set BRIG_API_KEY, or run as root with the daemon's state "
        "dir (",
        remote.state_dir, "/api-key)"));
  }
  return ApiClient::Create(url, key);
}

namespace {

absl::StatusOr<Json> PairsToObject(const std::vector<std::string>& pairs, const char* what) {
  Json out = Json::object();
  for (const std::string& pair : pairs) {
    size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", pair, ": expected KEY=VALUE"));
    }
    out[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  return out;
}

absl::StatusOr<int64_t> Seconds(const std::string& text) {
  BRIG_ASSIGN_OR_RETURN(std::chrono::milliseconds ms, ParseDuration(text));
  return std::max<int64_t>(1, (ms.count() + 999) / 1000);
}

absl::StatusOr<Json> CreateBody(const CreateFlags& f) {
  BRIG_ASSIGN_OR_RETURN(uint64_t memory, ParseSize(f.memory));
  BRIG_ASSIGN_OR_RETURN(uint64_t disk, ParseSize(f.disk));
  BRIG_ASSIGN_OR_RETURN(int64_t timeout, Seconds(f.timeout));
  BRIG_ASSIGN_OR_RETURN(Json env, PairsToObject(f.env, "--env"));
  BRIG_ASSIGN_OR_RETURN(Json metadata, PairsToObject(f.metadata, "--meta"));
  Json body = {{"template", f.template_name}, {"cpus", f.cpus},    {"memory_mb", memory >> 20},
               {"disk_mb", disk >> 20},       {"pids", f.pids},    {"env", env},
               {"metadata", metadata},        {"timeout", timeout}};
  if (!f.name.empty()) body["name"] = f.name;
  return body;
}

void WriteAll(int fd, absl::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// Prints an output line's bytes to our stdout or stderr; returns its exit code when it is the
// `exit` line.
struct StreamPrinter {
  std::optional<int> exit_code;
  bool timed_out = false;
  std::string error;

  bool operator()(const Json& line) {
    std::string type = line.value("type", "");
    if (type == "stdout" || type == "stderr") {
      std::string bytes = line.value("data", "");
      if (line.contains("data_b64")) {
        absl::Base64Unescape(line.value("data_b64", ""), &bytes);
      }
      WriteAll(type == "stdout" ? STDOUT_FILENO : STDERR_FILENO, bytes);
    } else if (type == "exit") {
      timed_out = line.value("timed_out", false);
      exit_code =
          line.contains("signal") ? 128 + line.value("signal", 0) : line.value("exit_code", 0);
    } else if (type == "error") {
      error = line.value("message", "");
      std::fprintf(stderr, "brig: %s\n", error.c_str());
    } else if (type == "truncated") {
      std::fprintf(stderr, "brig: output bytes %llu..%llu are no longer held\n",
                   static_cast<unsigned long long>(line.value("from", uint64_t{0})),
                   static_cast<unsigned long long>(line.value("to", uint64_t{0})));
    }
    return true;
  }

  int ExitCode() const {
    if (timed_out) return kExitTimedOut;
    return exit_code.value_or(kExitBrigError);
  }
};

absl::StatusOr<Json> CommandBody(const ExecFlags& f) {
  BRIG_ASSIGN_OR_RETURN(Json env, PairsToObject(f.env, "--env"));
  Json body = {{"argv", f.command}, {"env", env}, {"user", f.user}, {"background", f.background}};
  if (!f.workdir.empty()) body["cwd"] = f.workdir;
  if (!f.timeout.empty()) {
    BRIG_ASSIGN_OR_RETURN(std::chrono::milliseconds ms, ParseDuration(f.timeout));
    body["timeout"] = static_cast<double>(ms.count()) / 1000.0;
  }
  return body;
}

// Runs a command in sandbox `id` and prints its output; returns the CLI's exit code.
int Exec(const ApiClient& client, const RemoteFlags& remote, const ExecFlags& f) {
  if (f.command.empty()) return Fail(absl::InvalidArgumentError("exec: no command given"));
  absl::StatusOr<Json> body = CommandBody(f);
  if (!body.ok()) return Fail(body.status());
  const std::string target = absl::StrCat("/v1/sandboxes/", f.id, "/commands");
  if (f.background) {
    absl::StatusOr<ApiClient::Response> r = client.Call("POST", target, *body);
    if (!r.ok()) return Fail(r.status());
    if (remote.json) {
      std::printf("%s\n", r->body.dump().c_str());
    } else {
      std::printf("%d\n", r->body.value("pid", -1));
    }
    return 0;
  }
  StreamPrinter printer;
  absl::Status s = client.Stream("POST", target, *body, std::ref(printer));
  if (!s.ok()) return Fail(s);
  return printer.ExitCode();
}

std::string Age(const Json& sandbox) {
  return sandbox["created_at"].is_string() ? sandbox["created_at"].get<std::string>() : "";
}

}  // namespace

int CreateCommand(const RemoteFlags& remote, const CreateFlags& flags) {
  auto client = ConnectToDaemon(remote);
  if (!client.ok()) return Fail(client.status());
  auto body = CreateBody(flags);
  if (!body.ok()) return Fail(body.status());
  auto r = client->Call("POST", "/v1/sandboxes", *body);
  if (!r.ok()) return Fail(r.status());
  if (remote.json) {
    std::printf("%s\n", r->body.dump(2).c_str());
  } else {
    std::printf("%s\n", r->body.value("id", "").c_str());
  }
  return 0;
}

int ListCommand(const RemoteFlags& remote, const ListFlags& flags) {
  auto client = ConnectToDaemon(remote);
  if (!client.ok()) return Fail(client.status());
  std::vector<std::string> query = {"limit=1000"};
  if (!flags.state.empty()) query.push_back("state=" + flags.state);
  for (const std::string& m : flags.metadata) query.push_back("metadata." + m);
  auto r = client->Call("GET", "/v1/sandboxes?" + absl::StrJoin(query, "&"));
  if (!r.ok()) return Fail(r.status());
  const Json& list = r->body["sandboxes"];
  if (remote.json) {
    std::printf("%s\n", list.dump(2).c_str());
    return 0;
  }
  std::printf("%-20s  %-16s  %-8s  %-24s  %s\n", "ID", "NAME", "STATE", "CREATED", "REASON");
  for (const Json& s : list) {
    std::string name = s["name"].is_string() ? s["name"].get<std::string>() : "-";
    std::string reason = s["reason"].is_string() ? s["reason"].get<std::string>() : "";
    std::printf("%-20s  %-16s  %-8s  %-24s  %s\n", s.value("id", "").c_str(), name.c_str(),
                s.value("state", "").c_str(), Age(s).c_str(), reason.c_str());
  }
  return 0;
}

int ExecCommand(const RemoteFlags& remote, const ExecFlags& flags) {
  auto client = ConnectToDaemon(remote);
  if (!client.ok()) return Fail(client.status());
  return Exec(*client, remote, flags);
}

int KillCommand(const RemoteFlags& remote, const std::string& id) {
  auto client = ConnectToDaemon(remote);
  if (!client.ok()) return Fail(client.status());
  auto r = client->Call("DELETE", "/v1/sandboxes/" + id);
  if (!r.ok()) return Fail(r.status());
  return 0;
}

int TimeoutCommand(const RemoteFlags& remote, const std::string& id, const std::string& timeout) {
  auto client = ConnectToDaemon(remote);
  if (!client.ok()) return Fail(client.status());
  // A bare number is seconds.
  auto seconds =
      Seconds(std::all_of(timeout.begin(), timeout.end(), ::isdigit) ? timeout + "s" : timeout);
  if (!seconds.ok()) return Fail(seconds.status());
  auto r = client->Call("POST", absl::StrCat("/v1/sandboxes/", id, "/timeout"),
                        Json{{"timeout", *seconds}});
  if (!r.ok()) return Fail(r.status());
  if (remote.json) {
    std::printf("%s\n", r->body.dump(2).c_str());
  } else {
    std::printf("%s expires at %s\n", id.c_str(),
                r->body["expires_at"].is_string() ? r->body["expires_at"].get<std::string>().c_str()
                                                  : "(paused)");
  }
  return 0;
}

int LogsCommand(const RemoteFlags& remote, const LogsFlags& flags) {
  auto client = ConnectToDaemon(remote);
  if (!client.ok()) return Fail(client.status());
  StreamPrinter printer;
  absl::Status s = client->Stream(
      "GET",
      absl::StrCat("/v1/sandboxes/", flags.id, "/commands/", flags.pid,
                   "/output?offset=", flags.offset, "&follow=", flags.follow ? "true" : "false"),
      std::nullopt, std::ref(printer));
  if (!s.ok()) return Fail(s);
  return printer.error.empty() ? 0 : kExitBrigError;
}

int CodeCommand(const RemoteFlags& remote, const CodeFlags& flags) {
  auto client = ConnectToDaemon(remote);
  if (!client.ok()) return Fail(client.status());
  Json body = {{"code", flags.code}, {"language", flags.language}};
  if (!flags.context.empty()) body["context"] = flags.context;
  if (!flags.timeout.empty()) {
    auto ms = ParseDuration(flags.timeout);
    if (!ms.ok()) return Fail(ms.status());
    body["timeout"] = static_cast<double>(ms->count()) / 1000.0;
  }
  bool failed = false;
  absl::Status s =
      client->Stream("POST", "/v1/sandboxes/" + flags.id + "/code", body, [&](const Json& line) {
        if (remote.json) {
          std::printf("%s\n", line.dump().c_str());
          std::fflush(stdout);
        }
        std::string type = line.value("type", "");
        if (type == "error") failed = true;
        if (remote.json) return true;
        if (type == "stdout" || type == "stderr") {
          WriteAll(type == "stdout" ? STDOUT_FILENO : STDERR_FILENO, line.value("text", ""));
        } else if (type == "result" && line["data"].contains("text/plain")) {
          // Pictures and tables need --json; the text form stands in for them here.
          WriteAll(STDOUT_FILENO, line["data"].value("text/plain", "") + "\n");
        } else if (type == "error") {
          std::string trace;
          for (const Json& l : line.value("traceback", Json::array())) {
            if (l.is_string()) trace += l.get<std::string>();
          }
          if (trace.empty()) {
            trace =
                line.value("name", "error") + ": " + line.value("value", line.value("message", ""));
            trace += "\n";
          }
          WriteAll(STDERR_FILENO, trace);
        }
        return true;
      });
  if (!s.ok()) return Fail(s);
  return failed ? 1 : 0;
}

int RemoteRunCommand(const RemoteFlags& remote, const RunFlags& flags) {
  auto client = ConnectToDaemon(remote);
  if (!client.ok()) return Fail(client.status());
  CreateFlags create;
  create.memory = flags.memory;
  create.disk = flags.disk;
  create.cpus = flags.cpus;
  create.pids = flags.pids;
  if (!flags.timeout.empty()) create.timeout = flags.timeout;
  auto body = CreateBody(create);
  if (!body.ok()) return Fail(body.status());
  auto created = client->Call("POST", "/v1/sandboxes", *body);
  if (!created.ok()) return Fail(created.status());
  ExecFlags exec;
  exec.id = created->body.value("id", "");
  exec.env = flags.env;
  exec.workdir = flags.workdir;
  exec.user = flags.user;
  exec.timeout = flags.timeout;
  exec.command = flags.command;
  int code = Exec(*client, remote, exec);
  if (auto killed = client->Call("DELETE", "/v1/sandboxes/" + exec.id); !killed.ok()) {
    std::fprintf(stderr, "brig: kill %s: %s\n", exec.id.c_str(),
                 std::string(killed.status().message()).c_str());
  }
  return code;
}

}  // namespace brig
