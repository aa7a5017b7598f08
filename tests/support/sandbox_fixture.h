// A state directory shared by the tests of one binary (the base template is built once), and
// helpers to run commands in sandboxes through `brig run`.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>

#include "engine/sandbox.h"
#include "nlohmann/json.hpp"
#include "support/process.h"

namespace brig::testing {

class SandboxTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (state_ == nullptr) state_ = std::make_unique<TempDir>();
  }
  static void TearDownTestSuite() {}
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (namespaces, cgroups)";
  }
  static const std::string& state_dir() { return state_->path(); }

  Result Sandboxed(const std::vector<std::string>& command,
                   const std::vector<std::string>& flags = {}, const std::string& input = "") {
    return BrigRun(state_dir(), flags, command, input);
  }
  // `bash -c script` in a sandbox.
  Result Bash(const std::string& script, const std::vector<std::string>& flags = {}) {
    return Sandboxed({"/bin/bash", "-c", script}, flags);
  }
  Result Python(const std::string& code, const std::vector<std::string>& flags = {}) {
    return Sandboxed({"/usr/bin/python3", "-c", code}, flags);
  }
  // Runs with --stats-file and returns the parsed stats.
  nlohmann::json RunWithStats(const std::vector<std::string>& command,
                              std::vector<std::string> flags, Result* result) {
    TempDir dir;
    std::string path = dir.path() + "/stats.json";
    flags.push_back("--stats-file");
    flags.push_back(path);
    *result = Sandboxed(command, flags);
    std::string text = ReadText(path);
    return text.empty() ? nlohmann::json() : nlohmann::json::parse(text);
  }

 private:
  static inline std::unique_ptr<TempDir> state_;  // removed when the test binary exits
};

// A SandboxTest with an Engine on the shared state directory.
class EngineTestBase : public SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped()) return;
    auto engine = Engine::Open(state_dir());
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
  }
  std::unique_ptr<Engine> engine_;
};

}  // namespace brig::testing
