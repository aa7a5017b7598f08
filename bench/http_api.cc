// Benchmark: long-lived sandboxes through brig serve's HTTP API, against the same work done
// in-process through the engine and the agent protocol (the peer: what the daemon itself costs
// is the difference). Interleaved, one of each per iteration:
//   create → first byte of `echo hi` → kill   (POST /v1/sandboxes, POST .../commands streamed
//                                              until the first stdout line, DELETE)
//   command round trip on a running sandbox   (POST .../commands `/bin/true` until `exit`)
// Starts its own `brig serve` on a free loopback port. Reports p50/p95/p99 and the ratios.
//
// Usage: http_api [--iterations N] [--state-dir DIR] [--brig PATH]
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/strings/ascii.h"
#include "base/files.h"
#include "cli/api_client.h"
#include "engine/sandbox.h"
#include "protocol/client.h"
#include "stats.h"

namespace {

using brig::ApiClient;
using brig::protocol::AgentConnection;
using brig::protocol::MessageType;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

double Ms(Clock::time_point from) {
  return std::chrono::duration<double, std::milli>(Clock::now() - from).count();
}

// Runs `argv` through the API until a line of `until_type`; false on any error.
bool RunUntil(const ApiClient& api, const std::string& id, const char* argv_json,
              const char* until_type) {
  bool seen = false;
  absl::Status s = api.Stream("POST", "/v1/sandboxes/" + id + "/commands",
                              Json{{"argv", Json::parse(argv_json)}}, [&](const Json& line) {
                                seen = line.value("type", "") == until_type;
                                return !seen;
                              });
  return s.ok() && seen;
}

bool HttpLifecycle(const ApiClient& api) {
  auto created = api.Call("POST", "/v1/sandboxes", Json::object());
  if (!created.ok()) return false;
  std::string id = created->body.value("id", "");
  bool ok = RunUntil(api, id, R"(["/bin/echo","hi"])", "stdout");
  return api.Call("DELETE", "/v1/sandboxes/" + id).ok() && ok;
}

// The peer: the same lifecycle in-process.
bool EngineLifecycle(const brig::Engine& engine, const brig::AgentOptions& options) {
  auto sandbox = engine.LaunchAgent({}, options);
  if (!sandbox.ok()) return false;
  auto conn = AgentConnection::Connect(options.socket_path);
  if (!conn.ok() ||
      !conn->Send({MessageType::kExec, 0, 0, R"({"argv":["/bin/echo","hi"]})"}).ok()) {
    return false;
  }
  while (auto m = conn->Next()) {
    if (m->type == MessageType::kOutput) return true;
    if (m->type == MessageType::kError) return false;
  }
  return false;
}

bool EngineRoundTrip(AgentConnection& conn) {
  if (!conn.Send({MessageType::kExec, 0, 0, R"({"argv":["/bin/true"]})"}).ok()) return false;
  while (auto m = conn.Next()) {
    if (m->type == MessageType::kExited) return true;
    if (m->type == MessageType::kError) return false;
  }
  return false;
}

struct Daemon {
  pid_t pid = -1;
  ~Daemon() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  const auto [iterations, state_dir, brig_binary] = brig::bench::ParseFlags(argc, argv);
  auto engine = brig::Engine::Open(state_dir);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  ::unlink((state_dir + "/url").c_str());
  Daemon daemon;
  std::string state_flag = "--state-dir=" + state_dir;
  const char* args[] = {brig_binary.c_str(), state_flag.c_str(), "serve",
                        "--listen",          "127.0.0.1:0",      nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  if (posix_spawn(&daemon.pid, brig_binary.c_str(), &actions, nullptr,
                  const_cast<char* const*>(args), environ) != 0) {
    std::perror("posix_spawn brig serve");
    return 1;
  }
  absl::StatusOr<std::string> url;
  for (int i = 0; i < 200 && !(url = brig::ReadFile(state_dir + "/url")).ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto key = brig::ReadFile(state_dir + "/api-key");
  if (!url.ok() || !key.ok()) {
    std::fprintf(stderr, "brig serve did not start\n");
    return 1;
  }
  auto api = ApiClient::Create(std::string(absl::StripAsciiWhitespace(*url)),
                               std::string(absl::StripAsciiWhitespace(*key)));
  if (!api.ok()) return 1;
  brig::AgentOptions options{state_dir + "/bench-peer.sock", brig_binary};

  std::vector<double> http_create, engine_create, http_trip, engine_trip;
  int http_errors = 0, engine_errors = 0, trip_errors = 0;
  constexpr int kWarmup = 5;
  for (int i = 0; i < iterations + kWarmup; ++i) {
    auto start = Clock::now();
    bool ok = HttpLifecycle(*api);
    double t = Ms(start);
    if (!ok) ++http_errors;
    if (ok && i >= kWarmup) http_create.push_back(t);
    start = Clock::now();
    ok = EngineLifecycle(**engine, options);
    t = Ms(start);
    if (!ok) ++engine_errors;
    if (ok && i >= kWarmup) engine_create.push_back(t);
  }

  auto created = api->Call("POST", "/v1/sandboxes", Json::object());
  auto peer = (*engine)->LaunchAgent({}, options);
  auto conn = peer.ok() ? AgentConnection::Connect(options.socket_path)
                        : absl::StatusOr<AgentConnection>(peer.status());
  std::string id = created.ok() ? created->body.value("id", "") : "";
  for (int i = 0; created.ok() && conn.ok() && i < iterations + kWarmup; ++i) {
    auto start = Clock::now();
    bool ok = RunUntil(*api, id, R"(["/bin/true"])", "exit");
    double t = Ms(start);
    if (ok && i >= kWarmup) http_trip.push_back(t);
    start = Clock::now();
    ok = EngineRoundTrip(*conn) && ok;
    t = Ms(start);
    if (ok && i >= kWarmup) engine_trip.push_back(t);
    if (!ok) ++trip_errors;
  }
  if (!created.ok() || !conn.ok()) trip_errors = iterations;
  if (created.ok()) (void)api->Call("DELETE", "/v1/sandboxes/" + id);

  brig::bench::PrintHeader("workload");
  brig::bench::PrintRow("HTTP: create → first byte of `echo hi` → kill", http_create, http_errors);
  brig::bench::PrintRow("peer, in-process engine: the same", engine_create, engine_errors);
  brig::bench::PrintRow("HTTP: command round trip (`/bin/true`)", http_trip, trip_errors);
  brig::bench::PrintRow("peer, in-process agent connection: the same", engine_trip, trip_errors);
  std::printf("\nratio HTTP / in-process, p50: lifecycle %.2f, round trip %.2f\n",
              brig::bench::Percentile(http_create, 50) / brig::bench::Percentile(engine_create, 50),
              brig::bench::Percentile(http_trip, 50) / brig::bench::Percentile(engine_trip, 50));
  return http_errors == 0 && engine_errors == 0 && trip_errors == 0 ? 0 : 1;
}
