// The CLI's subcommands. Each takes its parsed flags and returns the process exit code;
// messages for people go to stderr as "brig: …".
#pragma once

#include <string>
#include <vector>

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
};
int RunCommand(const RunFlags& flags);

int GcCommand(const std::string& state_dir);
int CheckCommand(const std::string& state_dir);

}  // namespace brig
