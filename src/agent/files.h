// File operations of the agent (docs/agent-protocol.md, "Files"): run inside the sandbox, so
// every path resolves in the sandbox's own root (its mount namespace has no way back to the
// host's tree), and as the requesting sandbox user, through the file-system identity (setfsuid,
// setfsgid): permissions are checked as that user and what is created belongs to them. Opens
// refuse /proc magic links (openat2 RESOLVE_NO_MAGICLINKS), so a symlink planted in the sandbox
// cannot make the agent hand out its own descriptors.
//
// Errors carry an HTTP-like code (404 missing, 400 wrong kind, 403 denied, 409 exists,
// 507 no space) in FileError, for the agent's `error` message.
//
// Thread-safety: the agent is single-threaded, and AsUser changes that thread's identity.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "engine/spec.h"
#include "nlohmann/json.hpp"

namespace brig::agent {

using Json = nlohmann::json;

// The HTTP-like code for a failed file operation's Status.
int FileErrorCode(const absl::Status& status);

// Switches the file-system identity to `user` for its lifetime.
class AsUser {
 public:
  explicit AsUser(SandboxUser user);
  ~AsUser();
  AsUser(const AsUser&) = delete;
  AsUser& operator=(const AsUser&) = delete;
};

// An absolute path: relative ones are taken from the user's home ("~" works too).
std::string ResolvePath(const std::string& path, SandboxUser user);

// lstat as an entry: {name, path, type, size, mode, permissions, owner, group, modified_at,
// symlink_target}.
absl::StatusOr<Json> StatEntry(const std::string& path);
// The entries below `dir`, down to `depth` levels, sorted by path.
absl::StatusOr<std::vector<Json>> ListEntries(const std::string& dir, int depth);
// mkdir -p; the result is the directory's entry.
absl::Status MakeDirectories(const std::string& path, mode_t mode = 0755);
absl::Status Move(const std::string& from, const std::string& to);
// rm -r.
absl::Status Remove(const std::string& path);

// Opens a regular file for reading.
absl::StatusOr<UniqueFd> OpenForRead(const std::string& path);

// A file being written: bytes go to a hidden file beside the target, which Commit() renames
// into place (so readers never see half a file); destroying it uncommitted removes it.
class PendingWrite {
 public:
  static absl::StatusOr<PendingWrite> Start(const std::string& path, mode_t mode);
  PendingWrite(PendingWrite&&) = default;
  PendingWrite& operator=(PendingWrite&&) = default;
  ~PendingWrite();

  absl::Status Append(absl::string_view bytes);
  absl::Status Commit();
  const std::string& path() const { return path_; }

 private:
  PendingWrite(std::string path, std::string temp, UniqueFd fd)
      : path_(std::move(path)), temp_(std::move(temp)), fd_(std::move(fd)) {}
  std::string path_, temp_;
  UniqueFd fd_;
};

}  // namespace brig::agent
