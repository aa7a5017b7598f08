// The CLI's subcommands. Each takes its parsed flags and returns the process exit code;
// messages for people go to stderr as "brig: …".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace brig {

// The state directory: --state-dir, else $BRIG_STATE_DIR, else /var/lib/brig.
std::string DefaultStateDir();

struct RunFlags {
  std::string state_dir;
  std::string memory = "512M", disk = "1G", timeout, user = "user", workdir, stats_file;
  double cpus = 0;
  unsigned pids = 256;
  std::vector<std::string> env;
  std::vector<std::string> command;
  bool remote = false;  // through brig serve (RemoteRunCommand)
};
int RunCommand(const RunFlags& flags);

struct ServeFlags {
  std::string state_dir;
  std::string listen = "127.0.0.1:7878";
};
int ServeCommand(const ServeFlags& flags);

// Where the client commands find the daemon: --url and --api-key, else $BRIG_URL and
// $BRIG_API_KEY, else <state dir>/url and <state dir>/api-key (written by brig serve), else
// http://127.0.0.1:7878.
struct RemoteFlags {
  std::string state_dir, url, api_key;
  bool json = false;  // machine-readable output
};

class ApiClient;
// The daemon's client for these flags (see RemoteFlags).
absl::StatusOr<ApiClient> ConnectToDaemon(const RemoteFlags& remote);

struct CreateFlags {
  std::string template_name = "base", name, memory = "512M", disk = "1G", timeout = "300s";
  double cpus = 0;
  unsigned pids = 256;
  std::vector<std::string> env, metadata;  // K=V each
};
int CreateCommand(const RemoteFlags& remote, const CreateFlags& flags);

struct ListFlags {
  std::string state;
  std::vector<std::string> metadata;  // K=V each
};
int ListCommand(const RemoteFlags& remote, const ListFlags& flags);

struct ExecFlags {
  std::string id, workdir, user = "user", timeout;
  std::vector<std::string> env;
  bool background = false;
  std::vector<std::string> command;
};
int ExecCommand(const RemoteFlags& remote, const ExecFlags& flags);

int KillCommand(const RemoteFlags& remote, const std::string& id);
int TimeoutCommand(const RemoteFlags& remote, const std::string& id, const std::string& timeout);

struct LogsFlags {
  std::string id;
  int pid = 0;
  uint64_t offset = 0;
  bool follow = false;
};
int LogsCommand(const RemoteFlags& remote, const LogsFlags& flags);

struct ShellFlags {
  std::string id, workdir, user = "user";
  std::vector<std::string> command;  // empty: a login shell
};
// `brig shell`: an interactive terminal in a sandbox.
int ShellCommand(const RemoteFlags& remote, const ShellFlags& flags);

struct CodeFlags {
  std::string id, code, context, language = "python", timeout;
};
// `brig code ID CODE`: runs code in a sandbox's interpreter context; prints output and results.
int CodeCommand(const RemoteFlags& remote, const CodeFlags& flags);

// `brig run --remote`: create a sandbox through the daemon, run the command, kill it.
int RemoteRunCommand(const RemoteFlags& remote, const RunFlags& flags);

int GcCommand(const std::string& state_dir);
int CheckCommand(const std::string& state_dir);

}  // namespace brig
