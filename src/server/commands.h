// Commands in a running sandbox, through its agent (docs/agent-protocol.md): what the routes
// under /v1/sandboxes/{id}/commands do, as agent messages. Output is turned into the API's
// output lines (docs/api.md, "Output lines").
//
// Each call opens its own connection to the agent, so calls share nothing and a client that
// goes away drops only its own connection; the process keeps running. Processes are named by
// their pid inside the sandbox.
//
// Thread-safety: free functions without shared state; call from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "nlohmann/json.hpp"

namespace brig::server {

using Json = nlohmann::json;

struct ExecRequest {
  std::vector<std::string> argv;
  std::vector<std::string> env;          // NAME=VALUE, over the sandbox's defaults
  std::string cwd;                       // empty: the user's home
  std::string user = "user";             // "user" or "root"
  std::chrono::milliseconds timeout{0};  // 0: none; then the process group is killed
  bool stdin_open = false;
  std::string tag;
  // Run it on a pseudo-terminal of this size (rows, cols): output comes as stdout, stdin is
  // always open and typed into the terminal.
  std::optional<std::pair<int, int>> pty;
};

// How long a stream may go on, and how to notice that its reader left.
struct StreamControl {
  std::optional<std::chrono::steady_clock::time_point> deadline;  // the request timeout
  std::function<bool()> reader_gone;                              // polled while idle
};

// Receives output lines in order; returns false when it cannot deliver any more (the client
// went away), which ends the stream.
using LineSink = std::function<bool(const Json& line)>;

// Starts a process and returns {"pid", "tag"} once it runs.
absl::StatusOr<Json> StartProcess(const std::string& agent_socket, const ExecRequest& request);

// Starts a process and streams its lines, from `start` to `exit`. A stream cut short by the
// request timeout ends with an `error` line of code 408; the process keeps running.
absl::Status RunProcess(const std::string& agent_socket, const ExecRequest& request,
                        const StreamControl& control, const LineSink& sink);

// Streams a process's held output from byte `offset`; then follows it until it exits, or
// (follow = false) ends with an `end` line.
absl::Status AttachProcess(const std::string& agent_socket, int pid, uint64_t offset, bool follow,
                           const StreamControl& control, const LineSink& sink);

// {"processes": [...]} as in docs/api.md.
absl::StatusOr<Json> ListProcesses(const std::string& agent_socket);

absl::Status WriteStdin(const std::string& agent_socket, int pid, absl::string_view bytes);
absl::Status CloseStdin(const std::string& agent_socket, int pid);
absl::Status SignalProcess(const std::string& agent_socket, int pid, int signal);
// Sets the terminal size of a process started with a pty (it gets SIGWINCH).
absl::Status ResizeTerminal(const std::string& agent_socket, int pid, int rows, int cols);

// Waits for the process to exit: {"exit_code"} or {"signal"} (and "timed_out").
// DeadlineExceeded when `deadline` passes first.
absl::StatusOr<Json> WaitProcess(const std::string& agent_socket, int pid,
                                 std::optional<std::chrono::steady_clock::time_point> deadline);

// Checks that the agent answers (the sandbox finished setting itself up).
absl::Status Hello(const std::string& agent_socket, std::chrono::milliseconds timeout);

}  // namespace brig::server
