// `brig shell ID [-- CMD ARGS]`: an interactive terminal in a sandbox. The command (a login
// shell by default) runs on a pseudo-terminal in the sandbox; this terminal is put in raw mode,
// keystrokes go to the process's stdin, its output is followed from the output route, and a
// SIGWINCH becomes a resize. Leaving the shell restores the terminal and exits with its code.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/escaping.h"
#include "base/unique_fd.h"
#include "cli/api_client.h"
#include "cli/commands.h"
#include "engine/sandbox.h"

namespace brig {
namespace {

using Json = nlohmann::json;

int Fail(const std::string& message) {
  std::fprintf(stderr, "brig: %s\n", message.c_str());
  return kExitBrigError;
}

// Raw mode for the life of the object: every byte goes to the sandbox as typed.
class RawTerminal {
 public:
  explicit RawTerminal(int fd) : fd_(fd) {
    ok_ = ::tcgetattr(fd_, &saved_) == 0;
    if (!ok_) return;
    termios raw = saved_;
    ::cfmakeraw(&raw);
    ::tcsetattr(fd_, TCSANOW, &raw);
  }
  ~RawTerminal() {
    if (ok_) ::tcsetattr(fd_, TCSANOW, &saved_);
  }
  bool ok() const { return ok_; }

 private:
  int fd_;
  termios saved_ = {};
  bool ok_ = false;
};

winsize SizeOf(int fd) {
  winsize ws = {};
  if (::ioctl(fd, TIOCGWINSZ, &ws) != 0 || ws.ws_row == 0 || ws.ws_col == 0) {
    ws.ws_row = 24;
    ws.ws_col = 80;
  }
  return ws;
}

}  // namespace

int ShellCommand(const RemoteFlags& remote, const ShellFlags& flags) {
  if (!::isatty(STDIN_FILENO)) return Fail("shell needs a terminal on stdin (use exec instead)");
  auto client = ConnectToDaemon(remote);
  if (!client.ok()) return Fail(std::string(client.status().message()));
  winsize size = SizeOf(STDIN_FILENO);
  Json env = Json::object();
  const char* term = std::getenv("TERM");
  env["TERM"] = term != nullptr && *term != '\0' ? term : "xterm-256color";
  Json body = {
      {"argv", flags.command.empty() ? std::vector<std::string>{"/bin/bash", "-l"} : flags.command},
      {"env", env},
      {"user", flags.user},
      {"background", true},
      {"pty", {{"rows", size.ws_row}, {"cols", size.ws_col}}}};
  if (!flags.workdir.empty()) body["cwd"] = flags.workdir;
  const std::string commands = "/v1/sandboxes/" + flags.id + "/commands";
  auto started = client->Call("POST", commands, body);
  if (!started.ok()) return Fail(std::string(started.status().message()));
  const std::string process = commands + "/" + std::to_string(started->body.value("pid", 0));

  // SIGWINCH is read from a signalfd by the input loop; blocked before any thread starts.
  sigset_t winch;
  sigemptyset(&winch);
  sigaddset(&winch, SIGWINCH);
  ::pthread_sigmask(SIG_BLOCK, &winch, nullptr);
  UniqueFd resized(::signalfd(-1, &winch, SFD_CLOEXEC | SFD_NONBLOCK));
  int done_pipe[2];
  if (::pipe2(done_pipe, O_CLOEXEC) != 0) return Fail("pipe");
  UniqueFd done_r(done_pipe[0]), done_w(done_pipe[1]);

  RawTerminal raw(STDIN_FILENO);
  std::atomic<int> exit_code{kExitBrigError};
  std::thread output([&] {
    (void)client->Stream("GET", process + "/output", std::nullopt, [&](const Json& line) {
      std::string type = line.value("type", "");
      if (type == "stdout" || type == "stderr") {
        std::string bytes = line.value("data", "");
        if (line.contains("data_b64")) absl::Base64Unescape(line.value("data_b64", ""), &bytes);
        for (size_t done = 0; done < bytes.size();) {
          ssize_t n = ::write(STDOUT_FILENO, bytes.data() + done, bytes.size() - done);
          if (n <= 0) break;
          done += static_cast<size_t>(n);
        }
      } else if (type == "exit") {
        exit_code =
            line.contains("signal") ? 128 + line.value("signal", 0) : line.value("exit_code", 0);
      }
      return true;
    });
    (void)!::write(done_w.get(), "x", 1);
  });

  pollfd fds[3] = {
      {STDIN_FILENO, POLLIN, 0}, {resized.get(), POLLIN, 0}, {done_r.get(), POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 3, -1) < 0 && errno != EINTR) break;
    if (fds[2].revents) break;  // the process ended (or its stream did)
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo si;
      while (::read(resized.get(), &si, sizeof si) == sizeof si) {
      }
      winsize ws = SizeOf(STDIN_FILENO);
      (void)client->Call("POST", process + "/resize",
                         Json{{"rows", ws.ws_row}, {"cols", ws.ws_col}});
    }
    if (fds[0].revents & (POLLIN | POLLHUP)) {
      char buf[4096];
      ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n <= 0) {
        fds[0].fd = -1;  // our stdin ended; the process may go on
        continue;
      }
      (void)client->CallBytes("POST", process + "/stdin", std::string(buf, static_cast<size_t>(n)));
    }
  }
  output.join();
  return exit_code;
}

}  // namespace brig
