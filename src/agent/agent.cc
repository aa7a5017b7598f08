#include "agent/agent.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/numbers.h"
#include "agent/files.h"
#include "base/files.h"
#include "base/unique_fd.h"
#include "engine/command.h"
#include "engine/restricted.h"
#include "nlohmann/json.hpp"
#include "protocol/frame.h"

namespace brig {
namespace {

using protocol::Encode;
using protocol::FrameDecoder;
using protocol::Message;
using protocol::MessageType;
using Json = nlohmann::json;

// Each process keeps its latest output, both streams interleaved, up to this many bytes.
constexpr size_t kRingBytes = 4u << 20;
// A client that falls this far behind is disconnected (it may re-attach from its offset).
constexpr size_t kMaxPendingBytes = 16u << 20;
constexpr size_t kReadChunk = 64u << 10;
// Exited processes stay listed (and re-attachable) until this many newer ones have exited.
constexpr size_t kKeepExited = 64;
constexpr uint16_t kStdout = 1, kStderr = 2;

// Output of one process: byte offsets count both streams together from 0.
class OutputRing {
 public:
  struct Chunk {
    uint64_t offset;
    uint16_t stream;
    std::string data;
  };
  void Append(uint16_t stream, std::string data) {
    uint64_t offset = end_;
    end_ += data.size();
    held_ += data.size();
    chunks_.push_back({offset, stream, std::move(data)});
    while (held_ > kRingBytes && chunks_.size() > 1) {
      held_ -= chunks_.front().data.size();
      chunks_.pop_front();
    }
  }
  uint64_t start() const { return chunks_.empty() ? end_ : chunks_.front().offset; }
  uint64_t end() const { return end_; }
  const std::deque<Chunk>& chunks() const { return chunks_; }

 private:
  std::deque<Chunk> chunks_;
  uint64_t end_ = 0;
  size_t held_ = 0;
};

struct Process {
  uint32_t channel = 0;
  pid_t pid = -1;
  std::string tag;
  std::vector<std::string> argv;
  UniqueFd stdin_w, stdout_r, stderr_r;  // with a terminal: both ends of its other side
  bool terminal = false;
  OutputRing ring;
  bool reaped = false;
  int wait_status = 0;
  // exec's "timeout_ms": when it passes, the process group is killed.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  bool timed_out = false;
  bool exit_announced = false;
  std::set<int> followers;  // connection fds
  // A zygote (exec's "zygote": true): its stdin is this SOCK_SEQPACKET socket, on which it
  // takes fork requests (ForkFromZygote).
  UniqueFd zygote_control;
};

struct Connection {
  UniqueFd fd;
  FrameDecoder decoder;
  std::string pending;  // encoded frames not yet written
  // A file being read (kFileRead): sent as the connection drains, never ahead of it.
  std::optional<UniqueFd> download;
  uint64_t download_sent = 0;
  // A file being written (kFileWrite), and as whom.
  std::optional<agent::PendingWrite> upload;
  SandboxUser upload_user = SandboxUser::kUser;
  bool upload_failed = false;  // chunks after a failure are dropped until the next write
  // A directory being watched (kWatch): inotify, watch descriptor -> path below the root.
  UniqueFd watch;
  std::map<int, std::string> watch_dirs;
  std::string watch_root;  // absolute, no trailing '/' ("" for the root)
  SandboxUser watch_user = SandboxUser::kUser;
  bool watch_recursive = false;
};

Json ErrorBody(int code, const std::string& message) {
  return {{"code", code}, {"message", message}};
}

// The body of `exited` for a reaped process.
Json ExitBody(const Process& p) {
  Json body = Json::object();
  if (WIFEXITED(p.wait_status)) {
    body["exit_code"] = WEXITSTATUS(p.wait_status);
  } else {
    body["signal"] = WTERMSIG(p.wait_status);
  }
  if (p.timed_out) body["timed_out"] = true;
  return body;
}

class Agent {
 public:
  absl::Status Init(int listen_fd, uint64_t open_files);
  void Run();

 private:
  // epoll registration: the fd is the key; what it is comes from these maps.
  void Watch(int fd, uint32_t events);
  void Accept();
  void OnConnectionReadable(int fd);
  void OnConnectionWritable(int fd);
  void CloseConnection(int fd);
  void Send(int fd, MessageType type, uint32_t channel, const Json& body, uint16_t flags = 0);
  void SendRaw(int fd, const Message& message);
  void Handle(int fd, Message message);
  void Dispatch(int fd, Message message);
  void Exec(int fd, const Json& request);
  void ForkFromZygote(int fd, const Json& request);
  // Files (files.h): one operation, a download, an upload, a watch.
  void FileOp(int fd, const Json& request);
  void FileRead(int fd, const Json& request);
  void FileWrite(int fd, const Json& request);
  void FileChunk(int fd, absl::string_view bytes);
  void FileCommit(int fd);
  void StartWatch(int fd, const Json& request);
  void AddWatches(Connection& c, const std::string& dir, const std::string& relative);
  void OnWatchEvents(int inotify_fd);
  void PumpDownload(Connection& c);
  void SendFileError(int fd, const absl::Status& status);
  absl::Status MakePipes(Process& p, UniqueFd* child_ends);  // fills child_ends[0..2]
  absl::Status MakeTerminal(const Json& size, const ProcessSpec& spec, Process& p,
                            UniqueFd (&child_ends)[3]);
  void Attach(int fd, uint32_t channel, uint64_t offset, bool follow);
  void OnOutput(int pipe_fd);
  void OnSignal();
  void MaybeAnnounceExit(Process& p);
  // Kills the process groups whose timeout passed; returns how long until the next one
  // (epoll_wait's timeout, -1 for none).
  int EnforceTimeouts();
  Process* Find(uint32_t channel);

  UniqueFd epoll_, listen_, signals_;
  uint64_t open_files_ = 1024;
  std::string hostname_;
  uint32_t next_channel_ = 1;
  std::map<int, std::unique_ptr<Connection>> connections_;
  std::map<uint32_t, std::unique_ptr<Process>> processes_;
  std::map<int, uint32_t> pipes_;  // output pipe fd -> channel
  std::map<int, int> watches_;     // inotify fd -> connection fd
  std::deque<uint32_t> exited_;    // channels of exited processes, oldest first
};

absl::Status Agent::Init(int listen_fd, uint64_t open_files) {
  listen_.reset(listen_fd);
  open_files_ = open_files;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  hostname_ = host;
  // Nothing inside may trace the agent or read its memory.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  ::fcntl(listen_fd, F_SETFD, FD_CLOEXEC);
  ::fcntl(listen_fd, F_SETFL, O_NONBLOCK);
  sigset_t mask;
  sigfillset(&mask);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  sigemptyset(&mask);
  for (int sig : {SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2}) {
    sigaddset(&mask, sig);
  }
  signals_.reset(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signals_) return ErrnoError("signalfd", "SIGCHLD and the forwarded signals");
  epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_) return ErrnoError("epoll_create1", "");
  Watch(listen_.get(), EPOLLIN);
  Watch(signals_.get(), EPOLLIN);
  return absl::OkStatus();
}

void Agent::Watch(int fd, uint32_t events) {
  epoll_event ev = {};
  ev.events = events;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0 && errno == EEXIST) {
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev);
  }
}

void Agent::Run() {
  epoll_event events[64];
  for (;;) {
    int n = ::epoll_wait(epoll_.get(), events, 64, EnforceTimeouts());
    for (int i = 0; i < n; ++i) {
      int fd = events[i].data.fd;
      if (fd == listen_.get()) {
        Accept();
      } else if (fd == signals_.get()) {
        OnSignal();
      } else if (pipes_.count(fd)) {
        OnOutput(fd);
      } else if (watches_.count(fd)) {
        OnWatchEvents(fd);
      } else if (connections_.count(fd)) {
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) OnConnectionReadable(fd);
        if (connections_.count(fd) && (events[i].events & EPOLLOUT)) OnConnectionWritable(fd);
      }
    }
  }
}

void Agent::Accept() {
  for (;;) {
    int fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    auto c = std::make_unique<Connection>();
    c->fd.reset(fd);
    connections_[fd] = std::move(c);
    Watch(fd, EPOLLIN);
  }
}

void Agent::CloseConnection(int fd) {
  for (auto& [channel, p] : processes_) p->followers.erase(fd);
  if (Connection& c = *connections_[fd]; c.watch) {
    watches_.erase(c.watch.get());  // closing the inotify fd removes it from epoll
  }
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  connections_.erase(fd);  // closes
}

void Agent::OnConnectionReadable(int fd) {
  Connection& c = *connections_[fd];
  char buf[kReadChunk];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      CloseConnection(fd);
      return;
    }
    if (n < 0) break;
    if (!c.decoder.Feed(absl::string_view(buf, static_cast<size_t>(n))).ok()) {
      CloseConnection(fd);  // a malformed stream cannot be resynchronised
      return;
    }
    while (std::optional<Message> m = c.decoder.Next()) {
      Handle(fd, std::move(*m));
      if (!connections_.count(fd)) return;
    }
  }
}

void Agent::OnConnectionWritable(int fd) {
  Connection& c = *connections_[fd];
  for (;;) {
    while (!c.pending.empty()) {
      ssize_t n = ::send(fd, c.pending.data(), c.pending.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN) break;
        CloseConnection(fd);
        return;
      }
      c.pending.erase(0, static_cast<size_t>(n));
    }
    if (!c.pending.empty() || !c.download) break;
    PumpDownload(c);  // the connection drained: the next part of the file being read
  }
  Watch(fd, c.pending.empty() ? EPOLLIN : EPOLLIN | EPOLLOUT);
}

void Agent::SendRaw(int fd, const Message& message) {
  auto it = connections_.find(fd);
  if (it == connections_.end()) return;
  Connection& c = *it->second;
  c.pending += Encode(message);
  if (c.pending.size() > kMaxPendingBytes) {
    CloseConnection(fd);
    return;
  }
  OnConnectionWritable(fd);
}

void Agent::Send(int fd, MessageType type, uint32_t channel, const Json& body, uint16_t flags) {
  SendRaw(fd, {type, flags, channel, body.dump()});
}

Process* Agent::Find(uint32_t channel) {
  auto it = processes_.find(channel);
  return it == processes_.end() ? nullptr : it->second.get();
}

// nlohmann::json throws when a field has the wrong type (`value("tag", "")` on a number): at
// this boundary that is a bad request, never the end of the agent (and so of the sandbox).
void Agent::Handle(int fd, Message m) {
  uint32_t channel = m.channel;
  try {
    Dispatch(fd, std::move(m));
  } catch (const Json::exception& e) {
    Send(fd, MessageType::kError, channel, ErrorBody(400, e.what()));
  }
}

void Agent::Dispatch(int fd, Message m) {
  Json body = Json::object();
  bool is_data = m.type == MessageType::kStdin || m.type == MessageType::kFileChunk;
  if (!is_data && !m.payload.empty()) {
    body = Json::parse(m.payload, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
      Send(fd, MessageType::kError, m.channel, ErrorBody(400, "payload is not a JSON object"));
      return;
    }
  }
  Process* p = Find(m.channel);
  switch (m.type) {
    case MessageType::kHello:
      Send(fd, MessageType::kHelloReply, 0, {{"version", 1}, {"pid", ::getpid()}});
      return;
    case MessageType::kExec:
      Exec(fd, body);
      return;
    case MessageType::kFileOp:
      FileOp(fd, body);
      return;
    case MessageType::kFileRead:
      FileRead(fd, body);
      return;
    case MessageType::kFileWrite:
      FileWrite(fd, body);
      return;
    case MessageType::kFileChunk:
      FileChunk(fd, m.payload);
      return;
    case MessageType::kFileCommit:
      FileCommit(fd);
      return;
    case MessageType::kWatch:
      StartWatch(fd, body);
      return;
    case MessageType::kList: {
      Json list = Json::array();
      for (auto& [channel, proc] : processes_) {
        Json entry = {{"channel", channel},
                      {"pid", proc->pid},
                      {"argv", proc->argv},
                      {"running", !proc->reaped},
                      {"tag", proc->tag}};
        if (proc->reaped) entry.update(ExitBody(*proc));
        list.push_back(std::move(entry));
      }
      Send(fd, MessageType::kProcessList, 0, {{"processes", list}});
      return;
    }
    default:
      break;
  }
  if (p == nullptr) {
    Send(fd, MessageType::kError, m.channel, ErrorBody(404, "no such process"));
    return;
  }
  switch (m.type) {
    case MessageType::kStdin:
      if (!p->stdin_w || ::write(p->stdin_w.get(), m.payload.data(), m.payload.size()) < 0) {
        Send(fd, MessageType::kError, m.channel, ErrorBody(409, "stdin is closed"));
      }
      return;
    case MessageType::kCloseStdin:
      p->stdin_w.reset();
      return;
    case MessageType::kResize: {
      winsize ws = {};
      const Json& rows = body["rows"];
      const Json& cols = body["cols"];
      if (!p->terminal || !p->stdout_r || !rows.is_number_unsigned() ||
          !cols.is_number_unsigned() || rows.get<uint64_t>() == 0 || rows.get<uint64_t>() > 10000 ||
          cols.get<uint64_t>() == 0 || cols.get<uint64_t>() > 10000) {
        Send(fd, MessageType::kError, m.channel,
             ErrorBody(400, "resize needs a terminal and 1..10000 rows and cols"));
        return;
      }
      ws.ws_row = static_cast<unsigned short>(rows.get<uint64_t>());
      ws.ws_col = static_cast<unsigned short>(cols.get<uint64_t>());
      ::ioctl(p->stdout_r.get(), TIOCSWINSZ, &ws);
      return;
    }
    case MessageType::kSignal: {
      int sig = body.value("signal", 0);
      if (sig <= 0 || sig > 64 || p->reaped || ::kill(-p->pid, sig) != 0) {
        Send(fd, MessageType::kError, m.channel, ErrorBody(409, "cannot signal the process"));
      }
      return;
    }
    case MessageType::kAttach: {
      const Json& offset = body["offset"];
      Attach(fd, m.channel, offset.is_number_unsigned() ? offset.get<uint64_t>() : 0,
             body.value("follow", true));
      return;
    }
    default:
      Send(fd, MessageType::kError, m.channel, ErrorBody(400, "not a request"));
  }
}

void Agent::Exec(int fd, const Json& request) {
  if (request.contains("fork")) return ForkFromZygote(fd, request);
  ProcessSpec spec;
  std::string tag = request.value("tag", "");
  const Json& argv = request["argv"];
  if (!argv.is_array() || argv.empty()) {
    Send(fd, MessageType::kError, 0, ErrorBody(400, "argv must be a non-empty array"));
    return;
  }
  for (const Json& a : argv) {
    if (!a.is_string()) {
      Send(fd, MessageType::kError, 0, ErrorBody(400, "argv entries must be strings"));
      return;
    }
    spec.argv.push_back(a.get<std::string>());
  }
  if (request.contains("env")) {
    if (!request["env"].is_array()) {
      Send(fd, MessageType::kError, 0, ErrorBody(400, "env must be an array of NAME=VALUE"));
      return;
    }
    for (const Json& e : request["env"]) {
      if (e.is_string()) spec.env.push_back(e.get<std::string>());
    }
  }
  spec.workdir = request.value("cwd", "");
  std::optional<std::chrono::milliseconds> timeout;
  if (request.contains("timeout_ms")) {
    const Json& ms = request["timeout_ms"];
    if (!ms.is_number_unsigned() || ms.get<uint64_t>() > (uint64_t{1} << 40)) {
      Send(fd, MessageType::kError, 0, ErrorBody(400, "timeout_ms must be a count of ms"));
      return;
    }
    if (ms.get<uint64_t>() > 0) timeout = std::chrono::milliseconds(ms.get<uint64_t>());
  }
  std::string user = request.value("user", "user");
  if (user != "user" && user != "root") {
    Send(fd, MessageType::kError, 0, ErrorBody(400, "user must be \"user\" or \"root\""));
    return;
  }
  spec.user = user == "root" ? SandboxUser::kRoot : SandboxUser::kUser;
  if (absl::Status valid = Validate(spec); !valid.ok()) {
    Send(fd, MessageType::kError, 0, ErrorBody(400, std::string(valid.message())));
    return;
  }

  auto p = std::make_unique<Process>();
  UniqueFd child_ends[3];  // the command's stdio; this process's copies close after the fork
  const Json& pty = request.contains("pty") ? request["pty"] : Json();
  absl::Status made =
      pty.is_null() ? MakePipes(*p, child_ends) : MakeTerminal(pty, spec, *p, child_ends);
  const bool zygote = request.value("zygote", false);
  if (made.ok() && zygote) {
    // Its stdin is a socket: fork requests in (with descriptors), pids back.
    int control[2];
    if (!pty.is_null()) {
      made = absl::InvalidArgumentError("a zygote takes no terminal");
    } else if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, control) != 0) {
      made = ErrnoError("socketpair", "zygote control");
    } else {
      p->zygote_control.reset(control[0]);
      child_ends[0].reset(control[1]);
      p->stdin_w.reset();
    }
  }
  int report[2];
  if (made.ok() && ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, report) != 0) {
    made = ErrnoError("socketpair", "exec report");
  }
  if (!made.ok()) {
    Send(fd, MessageType::kError, 0,
         ErrorBody(absl::IsInvalidArgument(made) ? 400 : 500, std::string(made.message())));
    return;
  }
  UniqueFd report_r(report[0]), report_w(report[1]);
  for (int n = 0; n < 3; ++n) spec.stdio[n] = child_ends[n].get();
  CommandPlan plan;
  MakeCommandPlan(spec, hostname_, open_files_, plan);
  plan.controlling_tty = !pty.is_null();
  pid_t pid = SpawnCommand(plan, report_w.get());
  if (pid < 0) {
    Send(fd, MessageType::kError, 0, ErrorBody(500, "cannot start the process"));
    return;
  }
  report_w.reset();
  ChildReport failure = {};
  bool failed = ::recv(report_r.get(), &failure, sizeof failure, MSG_DONTWAIT) == sizeof failure;
  p->channel = next_channel_++;
  p->pid = pid;
  p->tag = tag;
  p->argv = spec.argv;
  if (timeout) p->deadline = std::chrono::steady_clock::now() + *timeout;
  p->followers.insert(fd);
  uint32_t channel = p->channel;
  if (failed) {
    // It did not exec: say why, and let the reaper collect its status (127, 126 or 125).
    std::string why =
        absl::StrCat(StepName(static_cast<Step>(failure.step)), ": ", std::strerror(failure.error));
    Send(fd, MessageType::kError, channel,
         ErrorBody(failure.step == static_cast<int32_t>(Step::kExec) && failure.error == ENOENT
                       ? 404
                       : 500,
                   why));
  }
  for (UniqueFd* out : {&p->stdout_r, &p->stderr_r}) {
    if (!*out) continue;  // a terminal has one output
    ::fcntl(out->get(), F_SETFL, O_NONBLOCK);
    pipes_[out->get()] = channel;
    Watch(out->get(), EPOLLIN);
  }
  if (p->stdin_w) ::fcntl(p->stdin_w.get(), F_SETFL, O_NONBLOCK);
  // Without "stdin": true the command reads end-of-file at once, as non-interactive tools
  // expect. A terminal always takes input.
  if (pty.is_null() && !request.value("stdin", false)) p->stdin_w.reset();
  processes_[channel] = std::move(p);
  Send(fd, MessageType::kStarted, channel, {{"pid", pid}, {"tag", tag}});
}

// A new process forked from a zygote (docs/agent-protocol.md, "Zygotes"): the agent makes its
// pipes and hands their far ends to the zygote with the request; the zygote forks (twice, so
// the new process is PID 1's to reap) and answers its pid. It runs with everything the zygote
// had loaded, under the zygote's identity and restrictions.
void Agent::ForkFromZygote(int fd, const Json& request) {
  const Json& from = request["fork"];
  Process* zygote = from.is_number_unsigned() ? Find(from.get<uint32_t>()) : nullptr;
  if (zygote == nullptr || !zygote->zygote_control || zygote->reaped) {
    return Send(fd, MessageType::kError, 0, ErrorBody(404, "no running zygote on that channel"));
  }
  Json env = Json::object();
  if (request.contains("env") && request["env"].is_array()) {
    for (const Json& e : request["env"]) {
      if (!e.is_string()) continue;
      std::string kv = e.get<std::string>();
      size_t eq = kv.find('=');
      if (eq != std::string::npos && eq > 0) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  std::string what = Json{{"cwd", request.value("cwd", "")},
                          {"env", env},
                          {"language", request.value("language", "")}}
                         .dump();
  auto p = std::make_unique<Process>();
  UniqueFd child_ends[4];  // stdin, stdout, stderr, and its own fork-request socket
  absl::Status made = MakePipes(*p, child_ends);
  int forks[2];
  if (made.ok() && ::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, forks) != 0) {
    made = ErrnoError("socketpair", "fork requests");
  }
  if (!made.ok()) {
    return Send(fd, MessageType::kError, 0, ErrorBody(500, std::string(made.message())));
  }
  p->zygote_control.reset(forks[0]);  // it can be forked in turn
  child_ends[3].reset(forks[1]);
  // The request and the four descriptors in one message.
  absl::Status sent = SendWithFds(
      zygote->zygote_control.get(), what,
      {child_ends[0].get(), child_ends[1].get(), child_ends[2].get(), child_ends[3].get()},
      "fork request");
  char reply[256] = {};
  pollfd answer = {zygote->zygote_control.get(), POLLIN, 0};
  ssize_t got = -1;
  if (sent.ok() && ::poll(&answer, 1, 10000) == 1) {
    got = ::recv(zygote->zygote_control.get(), reply, sizeof reply - 1, MSG_DONTWAIT);
  }
  for (UniqueFd& end : child_ends) end.reset();
  Json answered = got > 0 ? Json::parse(std::string(reply, static_cast<size_t>(got)), nullptr,
                                        /*allow_exceptions=*/false)
                          : Json();
  int pid = answered.is_object() ? answered.value("pid", -1) : -1;
  if (pid <= 0) {
    return Send(fd, MessageType::kError, 0, ErrorBody(500, "the zygote did not fork"));
  }
  p->channel = next_channel_++;
  p->pid = pid;
  p->tag = request.value("tag", "");
  p->argv = zygote->argv;
  p->argv.push_back("(fork)");
  p->followers.insert(fd);
  const uint32_t channel = p->channel;
  for (UniqueFd* out : {&p->stdout_r, &p->stderr_r}) {
    ::fcntl(out->get(), F_SETFL, O_NONBLOCK);
    pipes_[out->get()] = channel;
    Watch(out->get(), EPOLLIN);
  }
  ::fcntl(p->stdin_w.get(), F_SETFL, O_NONBLOCK);
  std::string tag = p->tag;
  processes_[channel] = std::move(p);
  Send(fd, MessageType::kStarted, channel, {{"pid", pid}, {"tag", tag}});
}

absl::Status Agent::MakePipes(Process& p, UniqueFd* child_ends) {
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) return ErrnoError("pipe2", "stdin");
  p.stdin_w.reset(in[1]);
  child_ends[0].reset(in[0]);
  if (::pipe2(out, O_CLOEXEC) != 0) return ErrnoError("pipe2", "stdout");
  p.stdout_r.reset(out[0]);
  child_ends[1].reset(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return ErrnoError("pipe2", "stderr");
  p.stderr_r.reset(err[0]);
  child_ends[2].reset(err[1]);
  return absl::OkStatus();
}

// A pseudo-terminal from the sandbox's own devpts: the command gets the terminal side as
// stdin, stdout and stderr (and as its controlling terminal); the agent keeps the other side,
// whose output is the process's stdout.
absl::Status Agent::MakeTerminal(const Json& size, const ProcessSpec& spec, Process& p,
                                 UniqueFd (&child_ends)[3]) {
  if (!size.is_object() || !size["rows"].is_number_unsigned() ||
      !size["cols"].is_number_unsigned() || size["rows"].get<uint64_t>() == 0 ||
      size["rows"].get<uint64_t>() > 10000 || size["cols"].get<uint64_t>() == 0 ||
      size["cols"].get<uint64_t>() > 10000) {
    return absl::InvalidArgumentError("pty must be {\"rows\": 1..10000, \"cols\": 1..10000}");
  }
  UniqueFd master(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!master) return ErrnoError("posix_openpt", "/dev/ptmx");
  char name[64];
  if (::unlockpt(master.get()) != 0 || ::ptsname_r(master.get(), name, sizeof name) != 0) {
    return ErrnoError("unlockpt/ptsname", "/dev/ptmx");
  }
  UniqueFd terminal(::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!terminal) return ErrnoError("open", name);
  UserIdentity who = IdentityOf(spec.user);
  constexpr gid_t kTtyGroup = 5;
  if (::fchown(terminal.get(), who.uid, kTtyGroup) != 0) return ErrnoError("fchown", name);
  winsize ws = {};
  ws.ws_row = static_cast<unsigned short>(size["rows"].get<uint64_t>());
  ws.ws_col = static_cast<unsigned short>(size["cols"].get<uint64_t>());
  if (::ioctl(master.get(), TIOCSWINSZ, &ws) != 0) return ErrnoError("ioctl TIOCSWINSZ", name);
  p.stdin_w.reset(::fcntl(master.get(), F_DUPFD_CLOEXEC, 3));
  if (!p.stdin_w) return ErrnoError("dup", "terminal");
  p.stdout_r = std::move(master);
  p.terminal = true;
  for (UniqueFd& end : child_ends) end.reset(::fcntl(terminal.get(), F_DUPFD_CLOEXEC, 3));
  return absl::OkStatus();
}

void Agent::Attach(int fd, uint32_t channel, uint64_t offset, bool follow) {
  Process& p = *processes_[channel];
  if (offset < p.ring.start()) {
    Send(fd, MessageType::kTruncated, channel, {{"from", offset}, {"to", p.ring.start()}});
    offset = p.ring.start();
  }
  for (const OutputRing::Chunk& chunk : p.ring.chunks()) {
    uint64_t end = chunk.offset + chunk.data.size();
    if (end <= offset) continue;
    size_t skip = offset > chunk.offset ? static_cast<size_t>(offset - chunk.offset) : 0;
    SendRaw(fd, {MessageType::kOutput, chunk.stream, channel,
                 protocol::OutputPayload(chunk.offset + skip,
                                         absl::string_view(chunk.data).substr(skip))});
  }
  if (!connections_.count(fd)) return;
  if (p.exit_announced) {
    Send(fd, MessageType::kExited, channel, ExitBody(p));
  } else if (follow) {
    p.followers.insert(fd);
  } else {
    Send(fd, MessageType::kCaughtUp, channel, {{"offset", p.ring.end()}});
  }
}

void Agent::OnOutput(int pipe_fd) {
  uint32_t channel = pipes_[pipe_fd];
  Process& p = *processes_[channel];
  uint16_t stream = pipe_fd == p.stdout_r.get() ? kStdout : kStderr;
  char buf[kReadChunk];
  for (;;) {
    ssize_t n = ::read(pipe_fd, buf, sizeof buf);
    if (n > 0) {
      absl::string_view data(buf, static_cast<size_t>(n));
      std::string payload = protocol::OutputPayload(p.ring.end(), data);
      p.ring.Append(stream, std::string(data));
      std::set<int> followers = p.followers;  // Send may drop a slow follower
      for (int fd : followers) SendRaw(fd, {MessageType::kOutput, stream, channel, payload});
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    // End of stream (or an error): this pipe is done.
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, pipe_fd, nullptr);
    pipes_.erase(pipe_fd);
    (stream == kStdout ? p.stdout_r : p.stderr_r).reset();
    MaybeAnnounceExit(p);
    return;
  }
}

void Agent::OnSignal() {
  signalfd_siginfo si;
  while (::read(signals_.get(), &si, sizeof si) == sizeof si) {
    // A signal from outside the sandbox (si_pid 0: the sender is not in this PID namespace)
    // goes on to every running process group; one sent from inside is ignored, so a command
    // cannot use PID 1 to signal the others.
    if (si.ssi_signo == SIGCHLD || si.ssi_pid != 0) continue;
    for (auto& [channel, p] : processes_) {
      if (!p->reaped) ::kill(-p->pid, static_cast<int>(si.ssi_signo));
    }
  }
  int status = 0;
  pid_t pid;
  while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
    for (auto& [channel, p] : processes_) {
      if (p->pid != pid) continue;
      p->reaped = true;
      p->wait_status = status;
      p->stdin_w.reset();
      MaybeAnnounceExit(*p);
      break;
    }
    // Any other pid is an orphan reparented to PID 1: reaping it is all there is to do.
  }
}

// A process has ended once it is reaped and its output is drained, so that its exit is the
// last thing a follower hears of it.
void Agent::MaybeAnnounceExit(Process& p) {
  if (!p.reaped || p.stdout_r || p.stderr_r || p.exit_announced) return;
  p.exit_announced = true;
  Json status = ExitBody(p);
  std::set<int> followers = p.followers;
  for (int fd : followers) Send(fd, MessageType::kExited, p.channel, status);
  p.followers.clear();
  // Bound what a long-lived sandbox accumulates: forget the oldest exited processes.
  exited_.push_back(p.channel);
  while (exited_.size() > kKeepExited) {
    processes_.erase(exited_.front());
    exited_.pop_front();
  }
}

// ---- Files ----------------------------------------------------------------------------------

namespace {

constexpr size_t kDownloadWindow = 1u << 20;  // bytes of a download queued ahead of the socket
constexpr int kMaxListDepth = 16;

// "user" (default) or "root"; anything else is a bad request.
std::optional<SandboxUser> UserOf(const Json& request) {
  std::string user = request.value("user", "user");
  if (user == "user") return SandboxUser::kUser;
  if (user == "root") return SandboxUser::kRoot;
  return std::nullopt;
}

}  // namespace

void Agent::SendFileError(int fd, const absl::Status& status) {
  Send(fd, MessageType::kError, 0,
       ErrorBody(agent::FileErrorCode(status), std::string(status.message())));
}

void Agent::FileOp(int fd, const Json& request) {
  std::optional<SandboxUser> user = UserOf(request);
  std::string op = request.value("op", "");
  if (!user || !request.contains("path") || !request["path"].is_string()) {
    Send(fd, MessageType::kError, 0, ErrorBody(400, "a file request needs a path and a user"));
    return;
  }
  const std::string path = agent::ResolvePath(request["path"].get<std::string>(), *user);
  agent::AsUser as(*user);
  absl::Status done;
  if (op == "stat") {
    absl::StatusOr<Json> entry = agent::StatEntry(path);
    if (entry.ok()) return Send(fd, MessageType::kFileResult, 0, *entry);
    done = entry.status();
  } else if (op == "list") {
    int depth = request.value("depth", 1);
    if (depth < 1 || depth > kMaxListDepth) {
      return Send(fd, MessageType::kError, 0, ErrorBody(400, "depth must be 1-16"));
    }
    absl::StatusOr<std::vector<Json>> entries = agent::ListEntries(path, depth);
    if (entries.ok()) return Send(fd, MessageType::kFileResult, 0, {{"entries", *entries}});
    done = entries.status();
  } else if (op == "mkdir") {
    done = agent::MakeDirectories(path);
    if (done.ok()) return Send(fd, MessageType::kFileResult, 0, *agent::StatEntry(path));
  } else if (op == "move") {
    if (!request.contains("to") || !request["to"].is_string()) {
      return Send(fd, MessageType::kError, 0, ErrorBody(400, "move needs \"to\""));
    }
    const std::string to = agent::ResolvePath(request["to"].get<std::string>(), *user);
    done = agent::Move(path, to);
    if (done.ok()) return Send(fd, MessageType::kFileResult, 0, *agent::StatEntry(to));
  } else if (op == "remove") {
    done = agent::Remove(path);
    if (done.ok()) return Send(fd, MessageType::kFileResult, 0, Json::object());
  } else {
    return Send(fd, MessageType::kError, 0, ErrorBody(400, "unknown file op \"" + op + "\""));
  }
  SendFileError(fd, done);
}

void Agent::FileRead(int fd, const Json& request) {
  Connection& c = *connections_[fd];
  std::optional<SandboxUser> user = UserOf(request);
  if (!user || !request.contains("path") || !request["path"].is_string() || c.download) {
    return Send(fd, MessageType::kError, 0,
                ErrorBody(400, "read needs a path, a user, and no other read in progress"));
  }
  absl::StatusOr<UniqueFd> file = [&] {
    agent::AsUser as(*user);
    return agent::OpenForRead(agent::ResolvePath(request["path"].get<std::string>(), *user));
  }();
  if (!file.ok()) return SendFileError(fd, file.status());
  c.download = std::move(*file);
  c.download_sent = 0;
  OnConnectionWritable(fd);
}

void Agent::PumpDownload(Connection& c) {
  while (c.download && c.pending.size() < kDownloadWindow) {
    char buf[kReadChunk];
    ssize_t n = ::read(c.download->get(), buf, sizeof buf);
    if (n > 0) {
      c.pending += Encode({MessageType::kFileData, 0, 0, std::string(buf, static_cast<size_t>(n))});
      c.download_sent += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    c.pending +=
        n == 0 ? Encode({MessageType::kFileEnd, 0, 0, Json{{"size", c.download_sent}}.dump()})
               : Encode({MessageType::kError, 0, 0, ErrorBody(500, std::strerror(errno)).dump()});
    c.download.reset();
  }
}

void Agent::FileWrite(int fd, const Json& request) {
  Connection& c = *connections_[fd];
  std::optional<SandboxUser> user = UserOf(request);
  int mode = request.value("mode", 0644);
  if (!user || !request.contains("path") || !request["path"].is_string() || mode < 0 ||
      mode > 07777) {
    c.upload_failed = true;
    return Send(fd, MessageType::kError, 0,
                ErrorBody(400, "write needs a path, a user and a mode of 0-07777"));
  }
  c.upload.reset();
  c.upload_user = *user;
  agent::AsUser as(*user);
  absl::StatusOr<agent::PendingWrite> write = agent::PendingWrite::Start(
      agent::ResolvePath(request["path"].get<std::string>(), *user), static_cast<mode_t>(mode));
  c.upload_failed = !write.ok();
  if (!write.ok()) return SendFileError(fd, write.status());
  c.upload.emplace(std::move(*write));
}

void Agent::FileChunk(int fd, absl::string_view bytes) {
  Connection& c = *connections_[fd];
  if (c.upload_failed) return;  // its error was sent already
  if (!c.upload) {
    c.upload_failed = true;
    return Send(fd, MessageType::kError, 0, ErrorBody(409, "no file is being written"));
  }
  agent::AsUser as(c.upload_user);
  if (absl::Status s = c.upload->Append(bytes); !s.ok()) {
    c.upload.reset();  // removes what was written; the old file stays
    c.upload_failed = true;
    SendFileError(fd, s);
  }
}

void Agent::FileCommit(int fd) {
  Connection& c = *connections_[fd];
  bool failed = c.upload_failed;
  c.upload_failed = false;
  if (failed) return;  // its error was sent already
  if (!c.upload) return Send(fd, MessageType::kError, 0, ErrorBody(409, "nothing to commit"));
  agent::AsUser as(c.upload_user);
  absl::Status s = c.upload->Commit();
  std::string path = c.upload->path();
  c.upload.reset();
  if (!s.ok()) return SendFileError(fd, s);
  absl::StatusOr<Json> entry = agent::StatEntry(path);
  if (!entry.ok()) return SendFileError(fd, entry.status());
  Send(fd, MessageType::kFileResult, 0, *entry);
}

void Agent::StartWatch(int fd, const Json& request) {
  Connection& c = *connections_[fd];
  std::optional<SandboxUser> user = UserOf(request);
  if (!user || !request.contains("path") || !request["path"].is_string() || c.watch) {
    return Send(fd, MessageType::kError, 0,
                ErrorBody(400, "watch needs a path, a user, and no other watch in progress"));
  }
  const std::string root = agent::ResolvePath(request["path"].get<std::string>(), *user);
  agent::AsUser as(*user);
  absl::StatusOr<std::vector<Json>> listing = agent::ListEntries(root, 1);  // exists, a dir
  if (!listing.ok()) return SendFileError(fd, listing.status());
  c.watch.reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!c.watch) return SendFileError(fd, ErrnoError("inotify_init1", root));
  c.watch_recursive = request.value("recursive", false);
  c.watch_root = root == "/" ? "" : root;
  c.watch_user = *user;
  AddWatches(c, root, "");
  watches_[c.watch.get()] = fd;
  Watch(c.watch.get(), EPOLLIN);
  Send(fd, MessageType::kWatchEvent, 0, {{"type", "watching"}, {"path", root}});
}

// Watches `dir` (at `relative` below the watch's root) and, when recursive, its subdirectories.
void Agent::AddWatches(Connection& c, const std::string& dir, const std::string& relative) {
  constexpr uint32_t kEvents = IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                               IN_ATTRIB | IN_DONT_FOLLOW | IN_ONLYDIR;
  int wd = ::inotify_add_watch(c.watch.get(), dir.c_str(), kEvents);
  if (wd < 0) return;
  c.watch_dirs[wd] = relative;
  if (!c.watch_recursive) return;
  absl::StatusOr<std::vector<Json>> children = agent::ListEntries(dir, 1);
  if (!children.ok()) return;
  for (const Json& child : *children) {
    if (child["type"] != "dir") continue;
    std::string name = child["name"].get<std::string>();
    AddWatches(c, dir + "/" + name, relative.empty() ? name : relative + "/" + name);
  }
}

void Agent::OnWatchEvents(int inotify_fd) {
  int fd = watches_[inotify_fd];
  Connection& c = *connections_[fd];
  alignas(inotify_event) char buf[16384];
  for (;;) {
    ssize_t n = ::read(inotify_fd, buf, sizeof buf);
    if (n <= 0) return;
    for (char* p = buf; p < buf + n;) {
      auto* e = reinterpret_cast<inotify_event*>(p);
      p += sizeof(inotify_event) + e->len;
      auto dir = c.watch_dirs.find(e->wd);
      if (dir == c.watch_dirs.end()) continue;
      if (e->mask & IN_IGNORED) {
        c.watch_dirs.erase(dir);
        continue;
      }
      std::string name = e->len ? std::string(e->name) : "";
      std::string relative = dir->second.empty() ? name : dir->second + "/" + name;
      bool is_dir = e->mask & IN_ISDIR;
      const char* type = (e->mask & (IN_CREATE | IN_MOVED_TO)) ? "create"
                         : (e->mask & IN_MODIFY)               ? "write"
                         : (e->mask & IN_DELETE)               ? "remove"
                         : (e->mask & IN_MOVED_FROM)           ? "rename"
                         : (e->mask & IN_ATTRIB)               ? "chmod"
                                                               : nullptr;
      if (type == nullptr) continue;
      Send(fd, MessageType::kWatchEvent, 0, {{"type", type}, {"path", relative}, {"dir", is_dir}});
      if (!connections_.count(fd)) return;
      if (is_dir && c.watch_recursive && (e->mask & (IN_CREATE | IN_MOVED_TO))) {
        // Watch the new directory too; what appeared in it before the watch did is reported
        // as created.
        agent::AsUser as(c.watch_user);
        const std::string path = c.watch_root + "/" + relative;
        AddWatches(c, path, relative);
        absl::StatusOr<std::vector<Json>> inside = agent::ListEntries(path, kMaxListDepth);
        for (const Json& entry : inside.ok() ? *inside : std::vector<Json>()) {
          std::string below = entry["path"].get<std::string>().substr(c.watch_root.size() + 1);
          Send(fd, MessageType::kWatchEvent, 0,
               {{"type", "create"}, {"path", below}, {"dir", entry["type"] == "dir"}});
          if (!connections_.count(fd)) return;
        }
      }
    }
  }
}

int Agent::EnforceTimeouts() {
  auto now = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::duration> next;
  for (auto& [channel, p] : processes_) {
    if (!p->deadline || p->reaped) continue;
    if (*p->deadline <= now) {
      // The command leads its own session and process group (RunCommand's setsid).
      ::kill(-p->pid, SIGKILL);
      p->timed_out = true;
      p->deadline.reset();
    } else if (!next || *p->deadline - now < *next) {
      next = *p->deadline - now;
    }
  }
  if (!next) return -1;
  return static_cast<int>(
      std::min<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(*next).count(), 1 << 30));
}

}  // namespace

int AgentMain() {
  const char* fd_text = std::getenv("BRIG_AGENT_FD");
  const char* files_text = std::getenv("BRIG_OPEN_FILES");
  int listen_fd = -1;
  uint64_t open_files = 1024;
  if (fd_text == nullptr || !absl::SimpleAtoi(fd_text, &listen_fd) || listen_fd < 3) {
    std::fprintf(stderr, "brig agent: BRIG_AGENT_FD is not set; the agent is started by brig\n");
    return 125;
  }
  if (files_text != nullptr) (void)absl::SimpleAtoi(files_text, &open_files);
  ::unsetenv("BRIG_AGENT_FD");
  Agent agent;
  if (absl::Status s = agent.Init(listen_fd, open_files); !s.ok()) {
    std::fprintf(stderr, "brig agent: %s\n", std::string(s.message()).c_str());
    return 125;
  }
  agent.Run();
  return 0;
}

}  // namespace brig
