// Long-lived sandboxes: the agent as PID 1, driven over the agent protocol on its socket.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "engine/sandbox.h"
#include "protocol/client.h"
#include "support/sandbox_fixture.h"

namespace brig::testing {
namespace {

using protocol::Message;
using protocol::MessageType;
using Json = nlohmann::json;

// A test client over the library's connection: JSON helpers and output collection.
class AgentClient {
 public:
  explicit AgentClient(const std::string& path) {
    auto c = protocol::AgentConnection::Connect(path);
    if (c.ok()) connection_.emplace(std::move(*c));
  }
  bool connected() const { return connection_.has_value(); }

  void Send(MessageType type, uint32_t channel, const std::string& payload) {
    ASSERT_TRUE(connection_.has_value());
    ASSERT_TRUE(connection_->Send({type, 0, channel, payload}).ok());
  }
  void SendJson(MessageType type, uint32_t channel, const Json& body) {
    Send(type, channel, body.dump());
  }
  std::optional<Message> Next(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    return connection_ ? connection_->Next(timeout) : std::nullopt;
  }

  // Collects a process's output per stream until its exit message, which is returned.
  Json UntilExit(uint32_t channel, std::string* out, std::string* err = nullptr,
                 std::vector<uint64_t>* offsets = nullptr) {
    while (std::optional<Message> m = Next()) {
      if (m->channel != channel) continue;
      if (m->type == MessageType::kOutput) {
        if (offsets) offsets->push_back(protocol::OutputOffset(*m));
        std::string data(protocol::OutputBytes(*m));
        if (m->flags == 1 && out) *out += data;
        if (m->flags == 2 && err) *err += data;
      } else if (m->type == MessageType::kExited) {
        return Json::parse(m->payload);
      }
    }
    return Json();
  }

  // Sends exec and returns the new process's channel (0 on error).
  uint32_t Exec(const Json& request) {
    SendJson(MessageType::kExec, 0, request);
    std::optional<Message> m = Next();
    if (!m || m->type != MessageType::kStarted) return 0;
    return m->channel;
  }

 private:
  std::optional<protocol::AgentConnection> connection_;
};

// Connects and writes `bytes` as they are; returns whether the agent then closed the
// connection without answering.
bool AgentHangsUpOn(const std::string& path, const std::string& bytes) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  bool hung_up = false;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size())) {
    pollfd p = {fd, POLLIN, 0};
    char byte;
    hung_up = poll(&p, 1, 2000) == 1 && read(fd, &byte, 1) == 0;
  }
  close(fd);
  return hung_up;
}

class AgentTest : public EngineTestBase {
 protected:
  void SetUp() override {
    EngineTestBase::SetUp();
    if (IsSkipped()) return;
    socket_path_ = socket_dir_.path() + "/agent.sock";
    AgentOptions options;
    options.socket_path = socket_path_;
    options.binary = BRIG_BINARY;
    auto sandbox = engine_->LaunchAgent({}, options);
    ASSERT_TRUE(sandbox.ok()) << sandbox.status();
    sandbox_ = std::move(*sandbox);
  }
  // A detached sandbox is the test's to clean up, whatever the test's outcome.
  void TearDown() override {
    if (detached_pid_ > 0) {
      kill(detached_pid_, SIGKILL);
      waitpid(detached_pid_, nullptr, 0);
      EXPECT_TRUE(engine_->cgroups().RemoveStale("brig-sb-" + detached_id_).ok());
      unlink(socket_path_.c_str());
    }
  }
  std::unique_ptr<Sandbox> sandbox_;
  TempDir socket_dir_;
  std::string socket_path_;
  pid_t detached_pid_ = -1;
  std::string detached_id_;
};

TEST_F(AgentTest, RunsCommandsAndStreamsOutput) {
  AgentClient c(socket_path_);
  ASSERT_TRUE(c.connected());
  c.SendJson(MessageType::kHello, 0, {{"version", 1}});
  std::optional<Message> hello = c.Next();
  ASSERT_TRUE(hello && hello->type == MessageType::kHelloReply);
  EXPECT_EQ(Json::parse(hello->payload)["pid"], 1) << "the agent is the sandbox's PID 1";

  SCOPED_TRACE("exec");
  c.SendJson(MessageType::kExec, 0,
             {{"argv", {"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}}, {"tag", "t1"}});
  std::optional<Message> started = c.Next();
  ASSERT_TRUE(started && started->type == MessageType::kStarted);
  EXPECT_EQ(Json::parse(started->payload)["tag"], "t1");
  std::string out, err;
  Json exited = c.UntilExit(started->channel, &out, &err);
  EXPECT_EQ(out, "out\n");
  EXPECT_EQ(err, "err\n");
  EXPECT_EQ(exited["exit_code"], 3);
}

TEST_F(AgentTest, CommandsRunSandboxed) {
  AgentClient c(socket_path_);
  uint32_t ch = c.Exec({{"argv",
                         {"/bin/sh", "-c",
                          "id -un; grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status; "
                          "echo $HOME $HOSTNAME; pwd"}}});
  ASSERT_NE(ch, 0u);
  std::string out;
  EXPECT_EQ(c.UntilExit(ch, &out)["exit_code"], 0);
  EXPECT_NE(out.find("user\n"), std::string::npos) << out;
  EXPECT_NE(out.find("Seccomp:\t2"), std::string::npos) << out;
  EXPECT_NE(out.find("NoNewPrivs:\t1"), std::string::npos) << out;
  EXPECT_NE(out.find("CapEff:\t0000000000000000"), std::string::npos) << out;
  EXPECT_NE(out.find("/home/user " + sandbox_->id()), std::string::npos) << out;
  uint32_t root = c.Exec({{"argv", {"/usr/bin/id", "-u"}}, {"user", "root"}, {"cwd", "/tmp"}});
  std::string root_out;
  c.UntilExit(root, &root_out);
  EXPECT_EQ(root_out, "0\n");
}

TEST_F(AgentTest, StdinReachesTheProcess) {
  AgentClient c(socket_path_);
  uint32_t ch = c.Exec({{"argv", {"/bin/cat"}}, {"stdin", true}});
  ASSERT_NE(ch, 0u);
  c.Send(MessageType::kStdin, ch, "hello ");
  c.Send(MessageType::kStdin, ch, "world");
  c.Send(MessageType::kCloseStdin, ch, "");
  std::string out;
  EXPECT_EQ(c.UntilExit(ch, &out)["exit_code"], 0);
  EXPECT_EQ(out, "hello world");
  // Without "stdin": true, the command sees end-of-file at once.
  uint32_t no_stdin = c.Exec({{"argv", {"/bin/cat"}}});
  std::string nothing;
  EXPECT_EQ(c.UntilExit(no_stdin, &nothing)["exit_code"], 0);
  EXPECT_EQ(nothing, "");
}

TEST_F(AgentTest, ReattachResumesFromAnOffset) {
  uint32_t ch;
  {
    AgentClient first(socket_path_);
    ch = first.Exec({{"argv", {"/bin/sh", "-c", "printf abcdef; sleep 0.3; printf ghi"}}});
    ASSERT_NE(ch, 0u);
    std::optional<Message> m = first.Next();  // "abcdef", then the client goes away
    ASSERT_TRUE(m && m->type == MessageType::kOutput);
  }
  // Dropping the stream did not kill the process; a new client resumes from byte 3.
  AgentClient second(socket_path_);
  second.SendJson(MessageType::kAttach, ch, {{"offset", 3}});
  std::string out;
  std::vector<uint64_t> offsets;
  Json exited = second.UntilExit(ch, &out, nullptr, &offsets);
  EXPECT_EQ(exited["exit_code"], 0);
  EXPECT_EQ(out, "defghi");
  ASSERT_FALSE(offsets.empty());
  EXPECT_EQ(offsets.front(), 3u);
}

TEST_F(AgentTest, SignalsAndErrors) {
  AgentClient c(socket_path_);
  uint32_t ch = c.Exec({{"argv", {"/bin/sleep", "100"}}});
  ASSERT_NE(ch, 0u);
  c.SendJson(MessageType::kSignal, ch, {{"signal", SIGTERM}});
  EXPECT_EQ(c.UntilExit(ch, nullptr)["signal"], SIGTERM);

  c.SendJson(MessageType::kSignal, 999, {{"signal", SIGTERM}});
  std::optional<Message> e = c.Next();
  ASSERT_TRUE(e && e->type == MessageType::kError);
  EXPECT_EQ(Json::parse(e->payload)["code"], 404);

  c.SendJson(MessageType::kExec, 0, {{"argv", "not-an-array"}});
  e = c.Next();
  ASSERT_TRUE(e && e->type == MessageType::kError);
  EXPECT_EQ(Json::parse(e->payload)["code"], 400);

  c.SendJson(MessageType::kExec, 0, {{"argv", {"/bin/true"}}, {"tag", 42}});  // tag: a number
  e = c.Next();
  ASSERT_TRUE(e && e->type == MessageType::kError);
  EXPECT_EQ(Json::parse(e->payload)["code"], 400);

  c.SendJson(MessageType::kExec, 0, {{"argv", {"no-such-command"}}});
  std::optional<Message> failed = c.Next();
  ASSERT_TRUE(failed && failed->type == MessageType::kError);
  EXPECT_EQ(Json::parse(failed->payload)["code"], 404);
  std::optional<Message> started = c.Next();
  ASSERT_TRUE(started && started->type == MessageType::kStarted);
  EXPECT_EQ(c.UntilExit(started->channel, nullptr)["exit_code"], 127);

  // A malformed frame ends that connection only.
  EXPECT_TRUE(AgentHangsUpOn(socket_path_, std::string(16, '\xff')));
  c.SendJson(MessageType::kList, 0, Json::object());
  std::optional<Message> list = c.Next();
  ASSERT_TRUE(list.has_value());
  ASSERT_EQ(list->type, MessageType::kProcessList) << list->payload;
  EXPECT_EQ(Json::parse(list->payload)["processes"].size(), 2u) << "sleep and no-such-command";
}

TEST_F(AgentTest, SignalsToPidOneFromOutsideReachEveryProcess) {
  AgentClient c(socket_path_);
  uint32_t first = c.Exec({{"argv", {"/bin/sleep", "100"}}});
  uint32_t second = c.Exec({{"argv", {"/bin/sleep", "101"}}});
  ASSERT_NE(first, 0u);
  ASSERT_NE(second, 0u);
  ASSERT_TRUE(sandbox_->Signal(SIGTERM).ok());
  // The two exits may come in either order.
  std::map<uint32_t, Json> exits;
  while (exits.size() < 2) {
    std::optional<Message> m = c.Next();
    ASSERT_TRUE(m.has_value()) << "an exit is missing";
    if (m->type == MessageType::kExited) exits[m->channel] = Json::parse(m->payload);
  }
  EXPECT_EQ(exits[first]["signal"], SIGTERM);
  EXPECT_EQ(exits[second]["signal"], SIGTERM);
  // The agent itself lives on.
  uint32_t after = c.Exec({{"argv", {"/bin/echo", "still here"}}});
  std::string out;
  EXPECT_EQ(c.UntilExit(after, &out)["exit_code"], 0);
  EXPECT_EQ(out, "still here\n");
}

TEST_F(AgentTest, TimeoutKillsTheWholeProcessGroup) {
  AgentClient c(socket_path_);
  auto start = std::chrono::steady_clock::now();
  uint32_t ch = c.Exec({{"argv", {"/bin/sh", "-c", "sleep 300 & sleep 301"}}, {"timeout_ms", 300}});
  ASSERT_NE(ch, 0u);
  Json exit = c.UntilExit(ch, nullptr);
  EXPECT_EQ(exit["signal"], SIGKILL) << exit;
  EXPECT_EQ(exit["timed_out"], true) << exit;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // The background sleep was in its group: nothing is left running.
  uint32_t check = c.Exec({{"argv", {"/bin/sh", "-c", "ps -eo args | grep -c '^sleep 30[01]'"}}});
  std::string out;
  c.UntilExit(check, &out);
  EXPECT_EQ(out, "0\n");
  c.SendJson(MessageType::kExec, 0, {{"argv", {"/bin/true"}}, {"timeout_ms", -1}});
  std::optional<Message> e = c.Next();
  ASSERT_TRUE(e && e->type == MessageType::kError);
  EXPECT_EQ(Json::parse(e->payload)["code"], 400);
}

TEST_F(AgentTest, AttachWithoutFollowEndsAtTheHeldOutput) {
  AgentClient c(socket_path_);
  uint32_t ch = c.Exec({{"argv", {"/bin/sh", "-c", "echo abc; exec sleep 100"}}, {"tag", "t"}});
  ASSERT_NE(ch, 0u);
  std::optional<Message> m = c.Next();
  ASSERT_TRUE(m && m->type == MessageType::kOutput);
  AgentClient other(socket_path_);
  other.SendJson(MessageType::kAttach, ch, {{"offset", 1}, {"follow", false}});
  m = other.Next();
  ASSERT_TRUE(m && m->type == MessageType::kOutput);
  EXPECT_EQ(protocol::OutputBytes(*m), "bc\n");
  m = other.Next();
  ASSERT_TRUE(m && m->type == MessageType::kCaughtUp);
  EXPECT_EQ(Json::parse(m->payload)["offset"], 4);
  c.SendJson(MessageType::kSignal, ch, {{"signal", SIGKILL}});
  EXPECT_EQ(c.UntilExit(ch, nullptr)["signal"], SIGKILL);
  EXPECT_FALSE(other.Next(std::chrono::milliseconds(200)).has_value()) << "it did not follow";
}

TEST_F(AgentTest, ForgetsTheOldestExitedProcesses) {
  AgentClient c(socket_path_);
  uint32_t first = 0;
  for (int i = 0; i < 70; ++i) {
    uint32_t ch = c.Exec({{"argv", {"/bin/true"}}});
    ASSERT_NE(ch, 0u);
    if (first == 0) first = ch;
    ASSERT_EQ(c.UntilExit(ch, nullptr)["exit_code"], 0);
  }
  c.SendJson(MessageType::kList, 0, Json::object());
  std::optional<Message> list = c.Next();
  ASSERT_TRUE(list && list->type == MessageType::kProcessList);
  EXPECT_EQ(Json::parse(list->payload)["processes"].size(), 64u);
  c.SendJson(MessageType::kAttach, first, {{"offset", 0}});
  std::optional<Message> gone = c.Next();
  ASSERT_TRUE(gone && gone->type == MessageType::kError);
  EXPECT_EQ(Json::parse(gone->payload)["code"], 404);
}

TEST_F(AgentTest, OutlivesItsLauncherOnceDetached) {
  detached_pid_ = sandbox_->init_pid();
  detached_id_ = sandbox_->id();
  {
    AgentClient c(socket_path_);
    ASSERT_NE(c.Exec({{"argv", {"/bin/sleep", "100"}}, {"tag", "survivor"}}), 0u);
  }
  sandbox_->Detach();
  sandbox_.reset();  // the launcher's handle is gone; the sandbox is not
  AgentClient again(socket_path_);
  ASSERT_TRUE(again.connected());
  again.SendJson(MessageType::kList, 0, Json::object());
  std::optional<Message> list = again.Next();
  ASSERT_TRUE(list && list->type == MessageType::kProcessList);
  Json processes = Json::parse(list->payload)["processes"];
  ASSERT_EQ(processes.size(), 1u);
  EXPECT_EQ(processes[0]["tag"], "survivor");
  EXPECT_TRUE(processes[0]["running"]);
  EXPECT_FALSE(CgroupsNamed("brig-sb-" + detached_id_).empty()) << "its cgroups stay";
}

TEST_F(AgentTest, TakeoverFindsItsProcessesAndCanKillIt) {
  // A restarted daemon: the sandbox was detached by one launcher and is adopted by the next.
  pid_t pid = sandbox_->init_pid();
  std::string id = sandbox_->id();
  std::string marker = UniqueMarker();
  {
    AgentClient c(socket_path_);
    ASSERT_NE(
        c.Exec({{"argv", {"/usr/bin/python3", "-c", "import time; time.sleep(100)", marker}}}), 0u);
  }
  ASSERT_TRUE(WaitFor([&] { return !PidsWithArgument(marker).empty(); }));
  sandbox_->Detach();
  sandbox_.reset();

  EXPECT_EQ(engine_->Adopt("wrongid0000000000000", pid, socket_path_).status().code(),
            absl::StatusCode::kNotFound);
  auto adopted = engine_->Adopt(id, pid, socket_path_);
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  AgentClient c(socket_path_);
  c.SendJson(MessageType::kList, 0, Json::object());
  std::optional<Message> list = c.Next();
  ASSERT_TRUE(list && list->type == MessageType::kProcessList);
  EXPECT_EQ(Json::parse(list->payload)["processes"].size(), 1u);

  ASSERT_TRUE((*adopted)->Kill().ok());
  (*adopted)->Wait();
  adopted->reset();
  EXPECT_TRUE(PidsWithArgument(marker).empty());
  EXPECT_TRUE(CgroupsNamed("brig-sb-" + id).empty());
  EXPECT_FALSE(std::filesystem::exists(socket_path_));
  EXPECT_EQ(engine_->Adopt(id, pid, socket_path_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(AgentTest, PauseFreezesAndResumeContinues) {
  AgentClient c(socket_path_);
  uint32_t ch = c.Exec(
      {{"argv", {"/bin/sh", "-c", "i=0; while :; do i=$((i+1)); echo $i; sleep 0.02; done"}}});
  ASSERT_NE(ch, 0u);
  auto last_count = [&](std::chrono::milliseconds window) {
    long last = -1;
    auto until = std::chrono::steady_clock::now() + window;
    while (std::chrono::steady_clock::now() < until) {
      std::optional<Message> m = c.Next(std::chrono::milliseconds(20));
      if (!m || m->type != MessageType::kOutput) continue;
      std::string text(protocol::OutputBytes(*m));
      size_t end = text.find_last_of('\n');
      size_t start = text.find_last_of('\n', end == 0 ? 0 : end - 1);
      last = std::stol(text.substr(start == std::string::npos ? 0 : start + 1));
    }
    return last;
  };
  long before = last_count(std::chrono::milliseconds(300));
  ASSERT_GT(before, 0);
  ASSERT_TRUE(sandbox_->Pause().ok());
  EXPECT_TRUE(sandbox_->paused());
  long drained = last_count(std::chrono::milliseconds(100));  // what was already in flight
  EXPECT_EQ(last_count(std::chrono::milliseconds(400)), -1) << "no output while paused";
  ASSERT_TRUE(sandbox_->Resume().ok());
  long after = last_count(std::chrono::milliseconds(300));
  EXPECT_GT(after, std::max(before, drained)) << "the same loop went on counting";
  EXPECT_LT(after, std::max(before, drained) + 40) << "it did not run while paused";

  // The same process, by its pid, is still the one running.
  c.SendJson(MessageType::kList, 0, Json::object());
  std::optional<Message> list;
  do {
    list = c.Next();
  } while (list && list->type != MessageType::kProcessList);
  ASSERT_TRUE(list.has_value());
  Json processes = Json::parse(list->payload)["processes"];
  ASSERT_EQ(processes.size(), 1u);
  EXPECT_TRUE(processes[0]["running"]);

  // Killing a paused sandbox works too.
  ASSERT_TRUE(sandbox_->Pause().ok());
  ASSERT_TRUE(sandbox_->Kill().ok());
  sandbox_->Wait();
}

TEST_F(AgentTest, TerminalRunsAnInteractivePythonAndResizes) {
  AgentClient c(socket_path_);
  uint32_t ch =
      c.Exec({{"argv", {"/usr/bin/python3", "-q", "-i"}}, {"pty", {{"rows", 24}, {"cols", 80}}}});
  ASSERT_NE(ch, 0u);
  // Reads terminal output until `needle` appears (or 10 s pass).
  std::string screen;
  auto read_until = [&](const std::string& needle) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (screen.find(needle) == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      std::optional<Message> m = c.Next(std::chrono::milliseconds(200));
      if (m && m->type == MessageType::kOutput && m->channel == ch) {
        EXPECT_EQ(m->flags, 1) << "a terminal has one output stream";
        screen += std::string(protocol::OutputBytes(*m));
      }
    }
    return screen.find(needle) != std::string::npos;
  };
  ASSERT_TRUE(read_until(">>> ")) << screen;
  c.Send(MessageType::kStdin, ch,
         "import os, sys, shutil; print(os.isatty(0), 6 * 7, shutil.get_terminal_size())\n");
  EXPECT_TRUE(read_until("True 42 os.terminal_size(columns=80, lines=24)")) << screen;
  c.SendJson(MessageType::kResize, ch, {{"rows", 40}, {"cols", 120}});
  c.Send(MessageType::kStdin, ch,
         "print(os.get_terminal_size(0)); print(os.getsid(0) == os.getpid())\n");
  EXPECT_TRUE(read_until("os.terminal_size(columns=120, lines=40)")) << screen;
  EXPECT_TRUE(read_until("True\r\n")) << "its own session, with the terminal as controlling tty";
  c.Send(MessageType::kStdin, ch, "exit(5)\n");
  EXPECT_EQ(c.UntilExit(ch, nullptr)["exit_code"], 5);

  c.SendJson(MessageType::kExec, 0, {{"argv", {"/bin/sh"}}, {"pty", {{"rows", 0}, {"cols", 80}}}});
  std::optional<Message> bad = c.Next();
  ASSERT_TRUE(bad && bad->type == MessageType::kError);
  EXPECT_EQ(Json::parse(bad->payload)["code"], 400);
}

}  // namespace
}  // namespace brig::testing
