// The code interpreter (docs/interpreter.md): stateful contexts in a running sandbox, through
// its agent. Each language has a zygote, a kernel process (src/interpreter/kernel.py) that
// imported the heavy libraries once; a context is a fork of it, so it starts in milliseconds
// with everything loaded. Contexts are ordinary agent processes, found again by their tag
// ("brig:context:<id>:<language>"), so they survive daemon restarts like any process.
//
// Thread-safety: free functions; a per-sandbox lock makes starting its zygote happen once.
#pragma once

#include <string>

#include "base/status.h"
#include "nlohmann/json.hpp"
#include "server/commands.h"

namespace brig::server {

struct ContextRequest {
  std::string language = "python";
  std::string cwd;               // empty: the user's home
  std::vector<std::string> env;  // NAME=VALUE
  std::string id;                // empty: a new id
};

// {"id", "language", "cwd", "pid", "running"}
absl::StatusOr<Json> CreateContext(const std::string& agent_socket, const ContextRequest& request);
absl::StatusOr<Json> ListContexts(const std::string& agent_socket);
absl::Status DeleteContext(const std::string& agent_socket, const std::string& id);
// A fresh context with the same id and `env` (its state is gone; it starts in the home dir).
absl::StatusOr<Json> RestartContext(const std::string& agent_socket, const std::string& id,
                                    const std::vector<std::string>& env);

// A new context that starts as a copy of a running one's whole state (a fork of its process;
// the original is not disturbed). Python contexts only.
absl::StatusOr<Json> ForkContext(const std::string& agent_socket, const std::string& id);

struct CodeRequest {
  std::string code;
  std::string context;  // empty: the language's default context, made on first use
  std::string language = "python";
  std::vector<std::string> env;          // for this execution only
  std::vector<std::string> context_env;  // for the default context, when it is made
  std::chrono::milliseconds timeout{0};
};

// Runs code in a context and streams its lines: stdout, stderr, result, error, then end (with
// the execution count). A timeout or the reader leaving interrupts it (KeyboardInterrupt); the
// context keeps its state.
absl::Status RunCode(const std::string& agent_socket, const CodeRequest& request,
                     const StreamControl& control, const LineSink& sink);

}  // namespace brig::server
