// Test support: run a program to completion with captured output, temporary directories, and
// a look at the host (processes, cgroups, mounts) to check that sandboxes leave nothing behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace brig::testing {

struct Result {
  int exit_code = -1;  // 128+N when killed by signal N
  pid_t pid = -1;      // the process that ran
  std::string out, err;
};

// Runs argv (argv[0] absolute) with `input` on stdin; kills it after `timeout`.
Result RunProgram(const std::vector<std::string>& argv, const std::string& input = "",
                  std::chrono::milliseconds timeout = std::chrono::seconds(120));

// `brig --state-dir <state_dir> run <flags...> -- <command...>`.
Result BrigRun(const std::string& state_dir, const std::vector<std::string>& flags,
               const std::vector<std::string>& command, const std::string& input = "");

// Starts argv in the background with stdio on /dev/null; returns its pid (reap with waitpid).
pid_t Spawn(const std::vector<std::string>& argv);

// Polls `predicate` every 10 ms until it holds or `timeout` passes; returns its last value.
bool WaitFor(const std::function<bool()>& predicate,
             std::chrono::milliseconds timeout = std::chrono::seconds(10));

// A fresh directory under /tmp, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Host-side views used to assert isolation and cleanup.
std::vector<pid_t> PidsWithArgument(const std::string& argument);  // by /proc/*/cmdline
std::vector<std::string> CgroupsNamed(const std::string& prefix);  // under /sys/fs/cgroup
std::string ReadText(const std::string& path);
int CountMounts();  // lines in the test process's /proc/self/mountinfo

// A marker unlikely to appear anywhere else: for finding a sandbox's processes from outside.
std::string UniqueMarker();

}  // namespace brig::testing
