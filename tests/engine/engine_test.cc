// The engine through its C++ API: outcomes, stdio, signals, kill, cleanup, concurrency.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "engine/landlock.h"
#include "engine/sandbox.h"
#include "support/sandbox_fixture.h"

namespace brig::testing {
namespace {

// A pipe whose read end collects what the sandbox writes, after the sandbox is gone.
struct Capture {
  int fds[2] = {-1, -1};
  Capture() { EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0); }
  ~Capture() {
    if (fds[0] >= 0) close(fds[0]);
    if (fds[1] >= 0) close(fds[1]);
  }
  int write_end() const { return fds[1]; }
  std::string Drain() {
    close(fds[1]);
    fds[1] = -1;
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }
};

class EngineTest : public EngineTestBase {
 protected:
  ProcessSpec Command(std::vector<std::string> argv, Capture* out = nullptr) {
    ProcessSpec p;
    p.argv = std::move(argv);
    if (out != nullptr) p.stdio[1] = p.stdio[2] = out->write_end();
    return p;
  }
};

TEST_F(EngineTest, CapturesOutputAndExitCode) {
  Capture out;
  auto sandbox = engine_->Launch({}, Command({"/bin/sh", "-c", "echo hello; exit 7"}, &out));
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  RunOutcome outcome = (*sandbox)->Wait();
  EXPECT_EQ(outcome.kind, RunOutcome::Kind::kExited);
  EXPECT_EQ(outcome.exit_code, 7);
  EXPECT_EQ(ExitCodeFor(outcome), 7);
  sandbox->reset();
  EXPECT_EQ(out.Drain(), "hello\n");
}

TEST_F(EngineTest, CgroupLivesExactlyAsLongAsTheSandbox) {
  auto sandbox = engine_->Launch({}, Command({"/bin/sleep", "0.3"}));
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  std::vector<std::string> paths = (*sandbox)->cgroup().Paths();
  ASSERT_FALSE(paths.empty());
  for (const std::string& p : paths) EXPECT_TRUE(std::filesystem::exists(p)) << p;
  EXPECT_TRUE(WaitFor([&] { return !ReadText(paths.front() + "/cgroup.procs").empty(); }))
      << "PID 1 joins its cgroup";
  RunOutcome outcome = (*sandbox)->Wait();
  EXPECT_EQ(outcome.kind, RunOutcome::Kind::kExited);
  EXPECT_GT(outcome.usage.cpu_usec, 0u);
  for (const std::string& p : paths) EXPECT_FALSE(std::filesystem::exists(p)) << p;
}

TEST_F(EngineTest, KillEndsEveryProcess) {
  std::string marker = UniqueMarker();
  auto sandbox = engine_->Launch(
      {}, Command({"/bin/bash", "-c",
                   "(setsid /usr/bin/python3 -c 'import time; time.sleep(99)' " + marker +
                       " &); /usr/bin/python3 -c 'import time; time.sleep(99)' " + marker}));
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  ASSERT_TRUE(WaitFor([&] { return PidsWithArgument(marker).size() == 2; }));
  ASSERT_TRUE((*sandbox)->Kill().ok());
  RunOutcome outcome = (*sandbox)->Wait();
  EXPECT_EQ(outcome.kind, RunOutcome::Kind::kSignaled);
  EXPECT_EQ(outcome.signal, SIGKILL);
  EXPECT_TRUE(PidsWithArgument(marker).empty());
}

TEST_F(EngineTest, SignalsReachTheCommand) {
  Capture out;
  auto sandbox = engine_->Launch({}, Command({"/bin/bash", "-c",
                                              "trap 'echo got-term; exit 42' TERM; echo ready; "
                                              "while :; do sleep 0.05; done"},
                                             &out));
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE((*sandbox)->Signal(SIGTERM).ok());
  RunOutcome outcome = (*sandbox)->Wait();
  EXPECT_EQ(outcome.kind, RunOutcome::Kind::kExited);
  EXPECT_EQ(outcome.exit_code, 42);
  sandbox->reset();
  EXPECT_NE(out.Drain().find("got-term"), std::string::npos);
}

TEST_F(EngineTest, OneShotSandboxesCannotBePaused) {
  auto sandbox = engine_->Launch({}, Command({"/bin/sleep", "10"}));
  ASSERT_TRUE(sandbox.ok());
  absl::Status paused = (*sandbox)->Pause();
  EXPECT_EQ(paused.code(), absl::StatusCode::kFailedPrecondition) << paused;
  EXPECT_FALSE((*sandbox)->paused());
  ASSERT_TRUE((*sandbox)->Kill().ok());
  EXPECT_EQ((*sandbox)->Wait().kind, RunOutcome::Kind::kSignaled);
}

TEST_F(EngineTest, ExecFailuresAreReported) {
  auto missing = engine_->Launch({}, Command({"no-such-command-anywhere"}));
  ASSERT_TRUE(missing.ok()) << missing.status();
  RunOutcome a = (*missing)->Wait();
  EXPECT_EQ(a.kind, RunOutcome::Kind::kExecFailed);
  EXPECT_EQ(a.error.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ExitCodeFor(a), kExitNotFound);

  auto not_executable = engine_->Launch({}, Command({"/etc/passwd"}));
  ASSERT_TRUE(not_executable.ok());
  RunOutcome b = (*not_executable)->Wait();
  EXPECT_EQ(b.kind, RunOutcome::Kind::kExecFailed);
  EXPECT_EQ(ExitCodeFor(b), kExitNotExecutable);
}

TEST_F(EngineTest, BadSpecsCreateNothing) {
  const std::string mine = "brig-run-" + std::to_string(getpid()) + "-";
  SandboxSpec bad_limits;
  bad_limits.limits.memory_bytes = 1;
  EXPECT_EQ(engine_->Launch(bad_limits, Command({"/bin/true"})).status().code(),
            absl::StatusCode::kInvalidArgument);
  SandboxSpec bad_template;
  bad_template.template_name = "no-such-template";
  EXPECT_EQ(engine_->Launch(bad_template, Command({"/bin/true"})).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(engine_->Launch({}, Command({})).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CgroupsNamed(mine).empty());
}

TEST_F(EngineTest, WorkdirUserAndEnvironment) {
  Capture out;
  ProcessSpec p = Command({"/bin/sh", "-c", "echo $(id -un) $(pwd) $GREETING $HOME"}, &out);
  p.user = SandboxUser::kRoot;
  p.workdir = "/tmp";
  p.env = {"GREETING=hi"};
  auto sandbox = engine_->Launch({}, p);
  ASSERT_TRUE(sandbox.ok());
  EXPECT_EQ((*sandbox)->Wait().exit_code, 0);
  sandbox->reset();
  EXPECT_EQ(out.Drain(), "root /tmp hi /root\n");
}

TEST_F(EngineTest, DiskLimitBoundsTheWritableLayer) {
  Capture out;
  SandboxSpec spec;
  spec.limits.disk_bytes = 16ull << 20;
  auto sandbox = engine_->Launch(spec, Command({"/bin/sh", "-c",
                                                "dd if=/dev/zero of=/tmp/big bs=1M count=64 2>&1; "
                                                "ls -s --block-size=1M /tmp/big"},
                                               &out));
  ASSERT_TRUE(sandbox.ok());
  (*sandbox)->Wait();
  sandbox->reset();
  std::string text = out.Drain();
  EXPECT_NE(text.find("No space left on device"), std::string::npos) << text;
  EXPECT_LE(std::stoi(text.substr(text.rfind('\n', text.size() - 2) + 1)), 16) << text;
}

TEST_F(EngineTest, LandlockConfinesToSandboxTree) {
  if (LandlockAbi() == 0) GTEST_SKIP() << "kernel without Landlock";
  // Hand the sandbox a descriptor of a host directory as its stdin: the mount namespace alone
  // would let it list that directory through /proc/self/fd/0; Landlock must refuse.
  TempDir host_dir;
  ASSERT_EQ(close(open((host_dir.path() + "/secret").c_str(), O_CREAT | O_WRONLY, 0644)), 0);
  int dir_fd = open(host_dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir_fd, 0);
  chmod(host_dir.path().c_str(), 0755);
  Capture out;
  ProcessSpec p = Command(
      {"/bin/sh", "-c", "ls /proc/self/fd/0/; echo rc=$?; ls / >/dev/null; echo root=$?"}, &out);
  p.stdio[0] = dir_fd;
  p.user = SandboxUser::kRoot;
  auto sandbox = engine_->Launch({}, p);
  close(dir_fd);
  ASSERT_TRUE(sandbox.ok());
  (*sandbox)->Wait();
  sandbox->reset();
  std::string text = out.Drain();
  EXPECT_EQ(text.find("secret"), std::string::npos) << text;
  EXPECT_NE(text.find("Permission denied"), std::string::npos) << text;
  EXPECT_NE(text.find("rc=2"), std::string::npos) << text;
  EXPECT_NE(text.find("root=0"), std::string::npos) << text;
}

TEST_F(EngineTest, ManySandboxesAtOnce) {
  constexpr int kCount = 16;
  std::vector<std::thread> threads;
  std::vector<int> codes(kCount, -1);
  std::vector<std::string> ids(kCount);
  for (int i = 0; i < kCount; ++i) {
    threads.emplace_back([&, i] {
      auto sandbox = engine_->Launch({}, Command({"/bin/sh", "-c", "exit " + std::to_string(i)}));
      if (!sandbox.ok()) return;
      ids[i] = (*sandbox)->id();
      codes[i] = (*sandbox)->Wait().exit_code;
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(codes[i], i);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()), ids.end());
}

}  // namespace
}  // namespace brig::testing
