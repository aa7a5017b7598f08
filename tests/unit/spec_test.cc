#include "engine/spec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace brig {
namespace {

ProcessSpec Command(std::vector<std::string> argv) {
  ProcessSpec p;
  p.argv = std::move(argv);
  return p;
}

TEST(SandboxId, TwentyLowercaseAlphanumerics) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    std::string id = NewSandboxId();
    ASSERT_EQ(id.size(), 20u);
    EXPECT_TRUE(std::all_of(id.begin(), id.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    })) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);  // 36^20 ids: a collision here means a broken generator
}

TEST(Validate, AcceptsDefaults) {
  EXPECT_TRUE(Validate(SandboxSpec{}, Command({"/bin/true"})).ok());
}

TEST(Validate, RejectsEachBadField) {
  auto invalid = [](SandboxSpec s, ProcessSpec p) {
    absl::Status st = Validate(s, p);
    return st.code() == absl::StatusCode::kInvalidArgument && !st.message().empty();
  };
  SandboxSpec s;
  EXPECT_TRUE(invalid(s, Command({})));
  EXPECT_TRUE(invalid(s, Command({""})));
  EXPECT_TRUE(invalid(s, Command({std::string("a\0b", 3)})));
  ProcessSpec bad_env = Command({"true"});
  bad_env.env = {"NOEQUALS"};
  EXPECT_TRUE(invalid(s, bad_env));
  bad_env.env = {"=value"};
  EXPECT_TRUE(invalid(s, bad_env));
  ProcessSpec rel = Command({"true"});
  rel.workdir = "relative/dir";
  EXPECT_TRUE(invalid(s, rel));

  SandboxSpec t;
  t.id = "UPPERCASE-not-valid!";
  EXPECT_TRUE(invalid(t, Command({"true"})));
  t = {};
  t.template_name = "../etc";
  EXPECT_TRUE(invalid(t, Command({"true"})));
  t = {};
  t.limits.memory_bytes = 1024;
  EXPECT_TRUE(invalid(t, Command({"true"})));
  t = {};
  t.limits.cpus = -1;
  EXPECT_TRUE(invalid(t, Command({"true"})));
  t = {};
  t.limits.pids = 0;
  EXPECT_TRUE(invalid(t, Command({"true"})));
  t = {};
  t.limits.disk_bytes = 100;
  EXPECT_TRUE(invalid(t, Command({"true"})));
  t = {};
  t.timeout = std::chrono::milliseconds(0);
  EXPECT_TRUE(invalid(t, Command({"true"})));
}

TEST(BuildEnvironment, DefaultsPerUserAndOverrides) {
  ProcessSpec p = Command({"true"});
  std::vector<std::string> env = BuildEnvironment(p, "host1");
  auto has = [&](const std::string& kv) {
    return std::find(env.begin(), env.end(), kv) != env.end();
  };
  EXPECT_TRUE(has("HOME=/home/user"));
  EXPECT_TRUE(has("USER=user"));
  EXPECT_TRUE(has("HOSTNAME=host1"));

  p.user = SandboxUser::kRoot;
  p.env = {"HOME=/elsewhere", "EXTRA=1=2"};
  env = BuildEnvironment(p, "host1");
  EXPECT_TRUE(has("USER=root"));
  EXPECT_TRUE(has("HOME=/elsewhere"));
  EXPECT_FALSE(has("HOME=/root"));
  EXPECT_TRUE(has("EXTRA=1=2"));
  EXPECT_EQ(std::count_if(env.begin(), env.end(),
                          [](const std::string& e) { return e.rfind("HOME=", 0) == 0; }),
            1);
}

}  // namespace
}  // namespace brig
