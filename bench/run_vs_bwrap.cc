// Benchmark: one-shot sandbox start-to-exit, `brig run -- /bin/true` against bubblewrap's
// `bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc /bin/true`, measured side by
// side (interleaved, same machine, same moment) and reported as a Markdown table of
// p50/p95/p99 with the ratio of brig's p50 to bwrap's.
//
// Usage: run_vs_bwrap [--iterations N] [--brig PATH] [--state-dir DIR]
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "stats.h"

extern char** environ;

namespace {

struct Peer {
  std::string name;
  std::vector<std::string> argv;
  std::vector<double> ms;
  int errors = 0;
};

// Runs argv to completion with stdout/stderr discarded; returns wall milliseconds, or -1.
double TimeOnce(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  auto start = std::chrono::steady_clock::now();
  pid_t pid;
  int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  auto end = std::chrono::steady_clock::now();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return std::chrono::duration<double, std::milli>(end - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const auto [iterations, state_dir, brig_binary] = brig::bench::ParseFlags(argc, argv);
  std::vector<Peer> peers = {
      {"brig run", {brig_binary, "--state-dir", state_dir, "run", "--", "/bin/true"}, {}, 0},
      {"bwrap --unshare-all",
       {"/usr/bin/bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc",
        "/proc", "/bin/true"},
       {},
       0},
  };
  for (Peer& p : peers) {
    if (access(p.argv[0].c_str(), X_OK) != 0) {
      std::fprintf(stderr, "cannot run %s: %s\n", p.argv[0].c_str(), std::strerror(errno));
      return 1;
    }
    for (int w = 0; w < 10; ++w) TimeOnce(p.argv);  // warm caches, build brig's template
  }
  for (int i = 0; i < iterations; ++i) {
    for (Peer& p : peers) {
      double ms = TimeOnce(p.argv);
      if (ms < 0)
        ++p.errors;
      else
        p.ms.push_back(ms);
    }
  }
  brig::bench::PrintHeader("workload: start → exit of /bin/true");
  for (const Peer& p : peers) brig::bench::PrintRow(p.name, p.ms, p.errors);
  double ratio =
      brig::bench::Percentile(peers[0].ms, 50) / brig::bench::Percentile(peers[1].ms, 50);
  std::printf("\nbrig p50 / bwrap p50 = %.2f\n", ratio);
  return peers[0].errors == 0 && peers[1].errors == 0 ? 0 : 1;
}
