// Benchmark: long-lived sandboxes through the engine and the agent protocol, in-process (the
// daemon's HTTP layer will add its own cost on top):
//   create -> first byte of `echo hi` -> kill  (LaunchAgent, connect, exec, first output, destroy)
//   command round trip on a running sandbox    (exec /bin/true -> exited)
// Reports p50/p95/p99.
//
// Usage: agent_roundtrip [--iterations N] [--state-dir DIR] [--brig PATH]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/sandbox.h"
#include "protocol/client.h"
#include "stats.h"

namespace {

using brig::protocol::AgentConnection;
using brig::protocol::Message;
using brig::protocol::MessageType;
using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point from) {
  return std::chrono::duration<double, std::milli>(Clock::now() - from).count();
}

// Waits for `type` on `channel` (any channel when 0); false on timeout or protocol error.
bool Await(AgentConnection& c, MessageType type, uint32_t* channel) {
  while (std::optional<Message> m = c.Next()) {
    if (m->type == type && (*channel == 0 || m->channel == *channel)) {
      *channel = m->channel;
      return true;
    }
    if (m->type == MessageType::kError) return false;
  }
  return false;
}

bool Exec(AgentConnection& c, const char* argv_json, MessageType until) {
  std::string request = std::string(R"({"argv":)") + argv_json + "}";
  if (!c.Send({MessageType::kExec, 0, 0, request}).ok()) return false;
  uint32_t channel = 0;
  return Await(c, MessageType::kStarted, &channel) && Await(c, until, &channel);
}

}  // namespace

int main(int argc, char** argv) {
  const auto [iterations, state_dir, brig_binary] = brig::bench::ParseFlags(argc, argv);
  auto engine = brig::Engine::Open(state_dir);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", std::string(engine.status().message()).c_str());
    return 1;
  }
  brig::AgentOptions options;
  options.socket_path = state_dir + "/bench-agent.sock";
  options.binary = brig_binary;

  std::vector<double> create, roundtrip;
  int create_errors = 0, roundtrip_errors = 0;
  for (int i = 0; i < iterations + 5; ++i) {
    auto start = Clock::now();
    auto sandbox = (*engine)->LaunchAgent({}, options);
    bool ok = sandbox.ok();
    std::optional<AgentConnection> conn;
    // The agent listens before it exists as a process: connect succeeds at once, and requests
    // wait in the socket until the agent reads them.
    if (ok) {
      auto c = AgentConnection::Connect(options.socket_path);
      ok = c.ok();
      if (ok) conn.emplace(std::move(*c));
    }
    ok = ok && Exec(*conn, R"(["/bin/echo","hi"])", MessageType::kOutput);
    if (ok) sandbox->reset();
    double t = Ms(start);
    if (!ok)
      ++create_errors;
    else if (i >= 5)
      create.push_back(t);
  }

  auto sandbox = (*engine)->LaunchAgent({}, options);
  auto conn = sandbox.ok() ? AgentConnection::Connect(options.socket_path)
                           : absl::StatusOr<AgentConnection>(sandbox.status());
  for (int i = 0; conn.ok() && i < iterations + 5; ++i) {
    auto start = Clock::now();
    bool ok = Exec(*conn, R"(["/bin/true"])", MessageType::kExited);
    double t = Ms(start);
    if (!ok)
      ++roundtrip_errors;
    else if (i >= 5)
      roundtrip.push_back(t);
  }
  if (!conn.ok()) roundtrip_errors = iterations;

  // Pause + resume of that sandbox (an idle agent and nothing else: the freezer's floor).
  std::vector<double> pause, resume;
  int pause_errors = 0;
  for (int i = 0; sandbox.ok() && i < iterations; ++i) {
    auto start = Clock::now();
    bool ok = (*sandbox)->Pause().ok();
    pause.push_back(Ms(start));
    start = Clock::now();
    ok = (*sandbox)->Resume().ok() && ok;
    resume.push_back(Ms(start));
    if (!ok) ++pause_errors;
  }

  brig::bench::PrintHeader("workload");
  brig::bench::PrintRow("long-lived: create → first byte of `echo hi` → kill", create,
                        create_errors);
  brig::bench::PrintRow("command round trip on a running sandbox (`/bin/true`)", roundtrip,
                        roundtrip_errors);
  brig::bench::PrintRow("pause (freeze, until frozen)", pause, pause_errors);
  brig::bench::PrintRow("resume (thaw, until thawed)", resume, pause_errors);
  return create_errors == 0 && roundtrip_errors == 0 && pause_errors == 0 ? 0 : 1;
}
