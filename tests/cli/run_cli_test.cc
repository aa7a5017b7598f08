// `brig run` as a user meets it: flags, exit codes, messages, stdio.
#include "support/sandbox_fixture.h"

namespace brig::testing {
namespace {

class RunCli : public SandboxTest {};

TEST_F(RunCli, ExitCodesFollowTheCommand) {
  EXPECT_EQ(Bash("exit 7").exit_code, 7);
  EXPECT_EQ(Bash("kill -TERM $$").exit_code, 128 + 15);
  EXPECT_EQ(Bash("kill -KILL $$").exit_code, 128 + 9);
  Result missing = Sandboxed({"no-such-command"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_NE(missing.err.find("no-such-command: command not found"), std::string::npos);
  EXPECT_EQ(Sandboxed({"/etc/passwd"}).exit_code, 126);
}

TEST_F(RunCli, StreamsStdio) {
  Result r = Sandboxed({"/bin/sh", "-c", "cat; echo to-err >&2; echo to-err-path > /dev/stderr"},
                       {}, "from stdin\n");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "from stdin\n");
  EXPECT_EQ(r.err, "to-err\nto-err-path\n");
}

TEST_F(RunCli, FlagsReachTheCommand) {
  Result r = Bash("echo $(id -un):$(pwd):$A:$B",
                  {"--env", "A=1", "-e", "B=two words", "--workdir", "/tmp", "--user", "root"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "root:/tmp:1:two words\n");
  Result user = Bash("echo $(id -u):$(id -g):$HOME:$(pwd)");
  EXPECT_EQ(user.out, "1000:1000:/home/user:/home/user\n");
  Result plain =
      RunProgram({BRIG_BINARY, "--state-dir", state_dir(), "run", "/bin/echo", "a", "-n"});
  EXPECT_EQ(plain.out, "a -n\n") << "without --, everything after the command is its own";
}

TEST_F(RunCli, BadInputIsRefusedClearly) {
  struct Case {
    std::vector<std::string> flags, command;
    const char* message;
  };
  std::vector<Case> cases = {
      {{"--memory", "lots"}, {"/bin/true"}, "invalid size"},
      {{"--memory", "1K"}, {"/bin/true"}, "memory limit"},
      {{"--disk", "12Q"}, {"/bin/true"}, "invalid size unit"},
      {{"--timeout", "soon"}, {"/bin/true"}, "invalid duration"},
      {{"--user", "bob"}, {"/bin/true"}, "--user must be"},
      {{"--cpus", "-2"}, {"/bin/true"}, "cpus must be"},
      {{"--pids", "0"}, {"/bin/true"}, "pids must be"},
      {{"--env", "NOEQUALS"}, {"/bin/true"}, "NAME=VALUE"},
      {{"--workdir", "relative"}, {"/bin/true"}, "absolute"},
      {{}, {}, "no command"},
      {{"--frobnicate"}, {"/bin/true"}, "frobnicate"},
  };
  for (const Case& c : cases) {
    Result r = BrigRun(state_dir(), c.flags, c.command);
    EXPECT_EQ(r.exit_code, 125) << c.message;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.rfind("brig: ", 0), 0u) << r.err;
    EXPECT_TRUE(CgroupsNamed("brig-run-" + std::to_string(r.pid) + "-").empty()) << c.message;
  }
  Result no_sub = RunProgram({BRIG_BINARY});
  EXPECT_EQ(no_sub.exit_code, 125);
}

TEST_F(RunCli, TimeoutAndOomHaveTheirOwnCodes) {
  Result t = Sandboxed({"/bin/sleep", "30"}, {"--timeout", "300ms"});
  EXPECT_EQ(t.exit_code, 124);
  EXPECT_NE(t.err.find("timed out after 300ms"), std::string::npos) << t.err;
  Result m = Sandboxed({"/usr/bin/python3", "-c", "b = b'x' * (300 << 20)"}, {"--memory", "48M"});
  EXPECT_EQ(m.exit_code, 123);
  EXPECT_NE(m.err.find("out of memory"), std::string::npos) << m.err;
}

TEST_F(RunCli, StatsFileDescribesTheRun) {
  Result r;
  nlohmann::json stats = RunWithStats({"/bin/sh", "-c", "exit 3"}, {}, &r);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(stats["outcome"], "exited");
  EXPECT_EQ(stats["exit_code"], 3);
  EXPECT_EQ(stats["id"].get<std::string>().size(), 20u);
  EXPECT_GT(stats["wall_ms"].get<double>(), 0);
}

TEST_F(RunCli, CheckReportsAWorkingHost) {
  Result r = RunProgram({BRIG_BINARY, "--state-dir", state_dir(), "check"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cgroups: cgroup v"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sandbox: ok"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace brig::testing
