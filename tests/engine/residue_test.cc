// 200 sandboxes, some of them killed while being set up and some hanging until their timeout:
// afterwards nothing of them is left on the host.
#include <signal.h>
#include <sys/wait.h>

#include <filesystem>
#include <random>
#include <set>
#include <thread>

#include "support/sandbox_fixture.h"

namespace brig::testing {
namespace {

std::set<std::string> ListDir(const std::string& path, const std::string& prefix = "") {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.insert(name);
  }
  return names;
}

// Namespaces in use by any process on the host, by inode.
std::set<std::string> LiveNamespaces() {
  std::set<std::string> all;
  std::error_code ec;
  for (const auto& proc : std::filesystem::directory_iterator("/proc", ec)) {
    for (const char* kind : {"user", "mnt", "pid", "net"}) {
      std::error_code link_ec;
      auto target = std::filesystem::read_symlink(proc.path() / "ns" / kind, link_ec);
      if (!link_ec) all.insert(target.string());
    }
  }
  return all;
}

class Residue : public SandboxTest {};

TEST_F(Residue, NoResidueAfter200Runs) {
  // One run first, so the template and the state dir's fixed files exist.
  ASSERT_EQ(Sandboxed({"/bin/true"}).exit_code, 0);
  const int mounts = CountMounts();
  const std::set<std::string> tmp = ListDir("/tmp", "brig");
  const std::set<std::string> state = ListDir(state_dir());
  const std::set<std::string> namespaces = LiveNamespaces();
  const std::string marker = UniqueMarker();
  std::mt19937 rng(12345);

  int ok = 0, timed_out = 0, killed = 0;
  for (int i = 0; i < 200; ++i) {
    if (i % 8 == 3) {
      // Hangs until its timeout.
      Result r = Sandboxed({"/bin/bash", "-c", "sleep 1000", marker}, {"--timeout", "100ms"});
      timed_out += r.exit_code == 124;
    } else if (i % 8 == 5) {
      // The launcher is SIGKILLed somewhere in the middle of setting up.
      pid_t brig = Spawn({BRIG_BINARY, "--state-dir", state_dir(), "run", "--", "/bin/bash", "-c",
                          "sleep 1000", marker});
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 8000));
      kill(brig, SIGKILL);
      waitpid(brig, nullptr, 0);
      ++killed;
    } else {
      ok += Sandboxed({"/bin/true"}).exit_code == 0;
    }
  }
  EXPECT_EQ(ok, 150);
  EXPECT_EQ(timed_out, 25);
  EXPECT_EQ(killed, 25);

  // Killed launchers leave their cgroup directories for the next start to sweep.
  Result gc = RunProgram({BRIG_BINARY, "--state-dir", state_dir(), "gc"});
  ASSERT_EQ(gc.exit_code, 0) << gc.err;
  EXPECT_TRUE(WaitFor([&] { return PidsWithArgument(marker).empty(); }))
      << "sandbox processes left running";
  EXPECT_EQ(CgroupsNamed("brig-run-"), std::vector<std::string>{});
  EXPECT_EQ(CountMounts(), mounts);
  EXPECT_EQ(ListDir("/tmp", "brig"), tmp);
  EXPECT_EQ(ListDir(state_dir()), state);
  EXPECT_TRUE(ListDir(state_dir() + "/mnt").empty());
  // Namespaces die with their last process; allow the kernel a moment to free them.
  EXPECT_TRUE(WaitFor([&] {
    std::set<std::string> now = LiveNamespaces();
    return std::includes(namespaces.begin(), namespaces.end(), now.begin(), now.end());
  })) << "namespaces of sandboxes are still alive";
}

}  // namespace
}  // namespace brig::testing
