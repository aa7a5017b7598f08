// Files in a running sandbox, through its agent (docs/agent-protocol.md, "Files"): what the
// routes under /v1/sandboxes/{id}/files do, as agent messages. Transfers stream in both
// directions; nothing holds a whole file in memory.
//
// Thread-safety: free functions without shared state; each call opens its own agent
// connection.
#pragma once

#include <functional>
#include <string>

#include "base/status.h"
#include "nlohmann/json.hpp"
#include "server/commands.h"

namespace brig::server {

// stat, list (`depth`), mkdir, move (`to`), remove: the agent's answer (an entry, or
// {"entries": [...]}, or {}).
absl::StatusOr<Json> FileOperation(const std::string& agent_socket, const Json& request);

// Streams a file's bytes to `sink` (false: stop). An error before the first byte (missing,
// a directory, denied) is returned; `started` says whether any byte was delivered.
absl::Status ReadFileTo(const std::string& agent_socket, const std::string& path,
                        const std::string& user, const std::function<bool(absl::string_view)>& sink,
                        bool* started);

// Source of bytes to write: fills the buffer, returns how many (0 at the end).
using ByteSource = std::function<absl::StatusOr<size_t>(char* buffer, size_t size)>;

// Writes a file from `source`, atomically; returns its entry.
absl::StatusOr<Json> WriteFileFrom(const std::string& agent_socket, const std::string& path,
                                   const std::string& user, int mode, const ByteSource& source);

// Streams changes under a directory as lines (docs/api.md, "Files").
absl::Status WatchDirectory(const std::string& agent_socket, const std::string& path,
                            const std::string& user, bool recursive, const StreamControl& control,
                            const LineSink& sink);

// The HTTP status an agent error carries (for file errors that have no absl code of their own,
// such as 507).
int HttpStatusFromPayload(const absl::Status& status);
absl::Status WithHttpStatus(absl::Status status, int http_status);

}  // namespace brig::server
