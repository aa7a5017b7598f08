#include "server/sandboxes.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>

#include "base/files.h"
#include "server/commands.h"

namespace brig::server {
namespace {

using std::chrono::milliseconds;

// Stopped and lost sandboxes stay listed this long.
constexpr int64_t kKeepEndedMs = 24 * 3600 * 1000;
// Generous: a sandbox created with a tiny CPU quota (cpus 0.01) starts its agent slowly.
constexpr milliseconds kAgentStartTimeout{30000};
// Resource samples: how often, and how many are kept per sandbox (an hour's worth).
constexpr int64_t kSampleEveryMs = 5000;
constexpr size_t kKeepSamples = 720;

int64_t NowMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Why a sandbox whose PID 1 ended on its own stopped.
std::string DescribeEnd(const RunOutcome& outcome) {
  switch (outcome.kind) {
    case RunOutcome::Kind::kOutOfMemory:
      return "out of memory";
    case RunOutcome::Kind::kSignaled:
      return absl::StrCat("PID 1 was killed by signal ", outcome.signal, " (",
                          strsignal(outcome.signal), ")");
    case RunOutcome::Kind::kExited:
      return absl::StrCat("PID 1 exited with code ", outcome.exit_code);
    case RunOutcome::Kind::kTimedOut:
      return "timeout";
    case RunOutcome::Kind::kSetupFailed:
    case RunOutcome::Kind::kExecFailed:
      return absl::StrCat("set-up failed: ", outcome.error.message());
  }
  return "ended";
}

// Newest first: by creation time, then id.
bool Newer(const SandboxRecord& a, const SandboxRecord& b) {
  return a.created_ms != b.created_ms ? a.created_ms > b.created_ms : a.id > b.id;
}

std::string CursorOf(const SandboxRecord& r) { return absl::StrCat(r.created_ms, ".", r.id); }

absl::StatusOr<SandboxRecord> ParseCursor(const std::string& cursor) {
  SandboxRecord position;
  size_t dot = cursor.find('.');
  if (dot == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(cursor).substr(0, dot), &position.created_ms)) {
    return absl::InvalidArgumentError("cursor: not a cursor from a previous page");
  }
  position.id = cursor.substr(dot + 1);
  return position;
}

absl::Status WrongState(const SandboxRecord& r, absl::string_view action) {
  return absl::FailedPreconditionError(
      absl::StrCat("cannot ", action, " sandbox ", r.id, ": it is ", StateName(r.state)));
}

}  // namespace

SandboxManager::SandboxManager(const Engine& engine, Store& store)
    : engine_(engine), store_(store), run_dir_(engine.state_dir() + "/run") {}

absl::StatusOr<std::unique_ptr<SandboxManager>> SandboxManager::Open(const Engine& engine,
                                                                     Store& store) {
  std::unique_ptr<SandboxManager> m(new SandboxManager(engine, store));
  BRIG_RETURN_IF_ERROR(MakeDirs(m->run_dir_, 0700));
  m->epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!m->epoll_) return ErrnoError("epoll_create1", "sandbox monitor");
  m->wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!m->wake_) return ErrnoError("eventfd", "sandbox monitor");
  epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  if (::epoll_ctl(m->epoll_.get(), EPOLL_CTL_ADD, m->wake_.get(), &ev) != 0) {
    return ErrnoError("epoll_ctl", "sandbox monitor wake-up");
  }
  BRIG_RETURN_IF_ERROR(m->Recover());
  m->monitor_ = std::thread([raw = m.get()] { raw->MonitorLoop(); });
  return m;
}

SandboxManager::~SandboxManager() { Shutdown(); }

std::string SandboxManager::AgentSocket(const std::string& id) const {
  return absl::StrCat(run_dir_, "/", id, ".sock");
}

void SandboxManager::Persist(const SandboxRecord& record) {
  // The in-memory record is the truth while the daemon runs; a store that cannot be written
  // costs durability only, so it is reported, not fatal.
  if (absl::Status s = store_.Put(record); !s.ok()) {
    std::fprintf(stderr, "brig serve: cannot record sandbox %s: %s\n", record.id.c_str(),
                 std::string(s.message()).c_str());
  }
}

// ---- Recovery -----------------------------------------------------------------------------

absl::Status SandboxManager::Recover() {
  BRIG_ASSIGN_OR_RETURN(std::vector<SandboxRecord> records, store_.LoadAll());
  for (SandboxRecord& record : records) {
    auto entry = std::make_shared<Entry>();
    entry->record = std::move(record);
    std::lock_guard<std::mutex> lock(entry->mu);
    Reconcile(*entry);
    entries_[entry->record.id] = std::move(entry);
  }
  ForgetOld();
  return absl::OkStatus();
}

// Makes one recorded sandbox agree with the host.
void SandboxManager::Reconcile(Entry& entry) {
  SandboxRecord& r = entry.record;
  if (!IsLive(r.state) && r.state != SandboxState::kStopping) return;
  const std::string socket = AgentSocket(r.id);
  auto lose = [&](std::string reason) {
    (void)engine_.Discard(r.id, socket);
    r.state = SandboxState::kLost;
    r.reason = std::move(reason);
    r.ended_ms = NowMs();
    r.expires_ms = r.remaining_ms = 0;
    Persist(r);
  };
  if (r.state == SandboxState::kCreating || r.init_pid <= 0) {
    lose("the daemon stopped while creating it");
    return;
  }
  absl::StatusOr<std::unique_ptr<Sandbox>> adopted = engine_.Adopt(r.id, r.init_pid, socket);
  if (!adopted.ok()) {
    lose(absl::StrCat("its PID 1 (host pid ", r.init_pid,
                      ") ended while the daemon was down: ", adopted.status().message()));
    return;
  }
  entry.sandbox = std::move(*adopted);
  if (r.state == SandboxState::kStopping) {
    EndLocked(entry, SandboxState::kStopped, r.reason.empty() ? "killed" : r.reason);
    return;
  }
  if (r.state == SandboxState::kPaused) (void)entry.sandbox->Pause();  // it is still frozen
  Watch(entry);
}

void SandboxManager::ForgetOld() {
  const int64_t cutoff = NowMs() - kKeepEndedMs;
  std::vector<std::string> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, entry] : entries_) {
      std::lock_guard<std::mutex> entry_lock(entry->mu);
      if (!entry->sandbox && !IsLive(entry->record.state) && entry->record.ended_ms != 0 &&
          entry->record.ended_ms < cutoff) {
        old.push_back(id);
      }
    }
    for (const std::string& id : old) entries_.erase(id);
  }
  for (const std::string& id : old) (void)store_.Delete(id);
}

// ---- Monitor ------------------------------------------------------------------------------

void SandboxManager::Watch(Entry& entry) {
  for (int fd : entry.sandbox->watch_fds()) {
    if (fd < 0) continue;
    epoll_event ev = {};
    ev.events = EPOLLIN | EPOLLONESHOT;  // each fires once: an exit, or the first OOM kill
    ev.data.ptr = &entry;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev);
  }
}

void SandboxManager::Unwatch(Entry& entry) {
  if (!entry.sandbox) return;
  for (int fd : entry.sandbox->watch_fds()) {
    if (fd >= 0) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  }
}

void SandboxManager::WakeMonitor() {
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof one);
}

void SandboxManager::MonitorLoop() {
  int64_t next_forget = NowMs() + 60'000;
  int64_t next_sample = NowMs() + kSampleEveryMs;
  while (!stopping_) {
    // Sleep until the next lifetime deadline (at most a second: clocks and records change).
    int64_t next = NowMs() + 1000;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [id, entry] : entries_) {
        std::lock_guard<std::mutex> entry_lock(entry->mu);
        if (entry->record.state == SandboxState::kRunning && entry->record.expires_ms > 0) {
          next = std::min(next, entry->record.expires_ms);
        }
      }
    }
    epoll_event events[32];
    int n = ::epoll_wait(epoll_.get(), events, 32,
                         static_cast<int>(std::clamp<int64_t>(next - NowMs(), 0, 1000)));
    for (int i = 0; i < n; ++i) {
      auto* entry = static_cast<Entry*>(events[i].data.ptr);
      if (entry == nullptr) {
        uint64_t count;
        (void)!::read(wake_.get(), &count, sizeof count);
        continue;
      }
      // Entries are erased only by this thread (ForgetOld), and only once unwatched.
      std::lock_guard<std::mutex> lock(entry->mu);
      if (!entry->sandbox) continue;
      std::optional<RunOutcome> outcome = entry->sandbox->Poll();
      if (!outcome) continue;
      Unwatch(*entry);
      entry->sandbox.reset();
      SandboxRecord& r = entry->record;
      r.state = SandboxState::kStopped;
      r.reason = DescribeEnd(*outcome);
      r.ended_ms = NowMs();
      r.expires_ms = r.remaining_ms = 0;
      Persist(r);
    }
    ExpireDue();
    if (NowMs() >= next_sample) {
      SampleAll();
      next_sample = NowMs() + kSampleEveryMs;
    }
    if (NowMs() >= next_forget) {
      ForgetOld();
      next_forget = NowMs() + 60'000;
    }
  }
}

void SandboxManager::SampleLocked(Entry& entry) {
  if (!entry.sandbox || entry.record.state != SandboxState::kRunning) return;
  absl::StatusOr<CgroupUsage> usage = entry.sandbox->cgroup().ReadUsage();
  if (!usage.ok()) return;
  MetricSample s;
  s.ms = NowMs();
  s.cpu_usec = usage->cpu_usec;
  s.memory_bytes = usage->memory_bytes;
  s.memory_peak_bytes = usage->memory_peak_bytes;
  s.pids = usage->pids;
  // The root's file system is the overlay whose upper layer is the sandbox's scratch tmpfs.
  struct statfs fs;
  const std::string root = absl::StrCat("/proc/", entry.sandbox->init_pid(), "/root/");
  if (::statfs(root.c_str(), &fs) == 0) {
    s.disk_used_bytes = static_cast<uint64_t>(fs.f_blocks - fs.f_bfree) * fs.f_bsize;
  }
  if (!entry.samples.empty()) {
    const MetricSample& last = entry.samples.back();
    if (s.ms > last.ms && s.cpu_usec >= last.cpu_usec) {
      s.cpu_percent = 100.0 * static_cast<double>(s.cpu_usec - last.cpu_usec) /
                      (static_cast<double>(s.ms - last.ms) * 1000.0);
    }
  }
  entry.samples.push_back(s);
  while (entry.samples.size() > kKeepSamples) entry.samples.pop_front();
}

void SandboxManager::SampleAll() {
  std::vector<std::shared_ptr<Entry>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, entry] : entries_) all.push_back(entry);
  }
  for (auto& entry : all) {
    std::lock_guard<std::mutex> lock(entry->mu);
    SampleLocked(*entry);
  }
}

absl::StatusOr<std::vector<MetricSample>> SandboxManager::Metrics(const std::string& id,
                                                                  int64_t from_ms, int64_t to_ms) {
  BRIG_ASSIGN_OR_RETURN(std::shared_ptr<Entry> entry, FindOrError(id));
  std::lock_guard<std::mutex> lock(entry->mu);
  if (entry->samples.empty() || entry->samples.back().ms < NowMs() - 1000) SampleLocked(*entry);
  std::vector<MetricSample> out;
  for (const MetricSample& s : entry->samples) {
    if (s.ms >= from_ms && s.ms <= to_ms) out.push_back(s);
  }
  return out;
}

void SandboxManager::ExpireDue() {
  std::vector<std::shared_ptr<Entry>> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, entry] : entries_) all.push_back(entry);
  }
  const int64_t now = NowMs();
  for (auto& entry : all) {
    std::lock_guard<std::mutex> lock(entry->mu);
    const SandboxRecord& r = entry->record;
    if (r.state == SandboxState::kRunning && r.expires_ms > 0 && r.expires_ms <= now) {
      EndLocked(*entry, SandboxState::kStopped, "timeout");
    }
  }
}

void SandboxManager::Shutdown() {
  if (stopping_.exchange(true)) return;
  WakeMonitor();
  if (monitor_.joinable()) monitor_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, entry] : entries_) {
    std::lock_guard<std::mutex> entry_lock(entry->mu);
    if (!entry->sandbox) continue;
    Unwatch(*entry);
    entry->sandbox->Detach();
    entry->sandbox.reset();
  }
}

// ---- Actions ------------------------------------------------------------------------------

std::shared_ptr<SandboxManager::Entry> SandboxManager::Find(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second;
}

absl::StatusOr<std::shared_ptr<SandboxManager::Entry>> SandboxManager::FindOrError(
    const std::string& id) const {
  std::shared_ptr<Entry> entry = Find(id);
  if (!entry) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
  return entry;
}

absl::StatusOr<SandboxManager::Created> SandboxManager::Create(const CreateRequest& request) {
  std::unique_lock<std::mutex> name_lock(create_by_name_mu_, std::defer_lock);
  if (!request.name.empty()) {
    name_lock.lock();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, entry] : entries_) {
      std::lock_guard<std::mutex> entry_lock(entry->mu);
      if (entry->record.name == request.name && IsLive(entry->record.state)) {
        return Created{entry->record, false};
      }
    }
  }
  if (stopping_) return absl::UnavailableError("the daemon is shutting down");

  SandboxSpec spec;
  spec.id = NewSandboxId();
  spec.template_name = request.template_name;
  spec.limits.memory_bytes = request.memory_mb << 20;
  spec.limits.disk_bytes = request.disk_mb << 20;
  spec.limits.cpus = request.cpus;
  spec.limits.pids = request.pids;
  BRIG_RETURN_IF_ERROR(Validate(spec));

  auto entry = std::make_shared<Entry>();
  SandboxRecord& r = entry->record;  // written under entry->mu once the entry is listed
  r.id = spec.id;
  r.name = request.name;
  r.template_name = request.template_name;
  r.cpus = request.cpus;
  r.memory_mb = request.memory_mb;
  r.disk_mb = request.disk_mb;
  r.pids = request.pids;
  r.env = request.env;
  r.metadata = request.metadata;
  r.created_ms = NowMs();
  Persist(r);
  {
    std::lock_guard<std::mutex> lock(mu_);
    entries_[r.id] = entry;
  }
  auto forget = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    entries_.erase(spec.id);
    (void)store_.Delete(spec.id);
  };

  // Launch without holding the entry, so that listing and other creates go on meanwhile.
  const std::string socket = AgentSocket(spec.id);
  absl::StatusOr<std::unique_ptr<Sandbox>> sandbox = engine_.LaunchAgent(spec, {socket});
  if (!sandbox.ok()) {
    forget();
    return sandbox.status();
  }
  if (absl::Status up = Hello(socket, kAgentStartTimeout); !up.ok()) {
    sandbox->reset();  // kills it and removes its cgroup
    forget();
    return absl::InternalError(absl::StrCat("sandbox did not start: ", up.message()));
  }
  std::lock_guard<std::mutex> lock(entry->mu);
  if (r.state != SandboxState::kCreating) {  // killed while it was being made
    sandbox->reset();
    return WrongState(r, "finish creating");
  }
  entry->sandbox = std::move(*sandbox);
  r.init_pid = entry->sandbox->init_pid();
  r.state = SandboxState::kRunning;
  r.expires_ms = NowMs() + std::chrono::duration_cast<milliseconds>(request.timeout).count();
  Persist(r);
  Watch(*entry);
  SampleLocked(*entry);  // the base of the first CPU percentage
  WakeMonitor();
  return Created{r, true};
}

absl::StatusOr<SandboxRecord> SandboxManager::Get(const std::string& id) const {
  BRIG_ASSIGN_OR_RETURN(std::shared_ptr<Entry> entry, FindOrError(id));
  std::lock_guard<std::mutex> lock(entry->mu);
  return entry->record;
}

absl::StatusOr<ListPage> SandboxManager::List(const ListQuery& query) const {
  std::optional<SandboxRecord> after;
  if (!query.cursor.empty()) {
    BRIG_ASSIGN_OR_RETURN(after, ParseCursor(query.cursor));
  }
  std::vector<SandboxRecord> matches;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, entry] : entries_) {
      std::lock_guard<std::mutex> entry_lock(entry->mu);
      const SandboxRecord& r = entry->record;
      if (!query.states.empty() && !query.states.count(r.state)) continue;
      if (!query.name.empty() && r.name != query.name) continue;
      if (after && !Newer(*after, r)) continue;
      bool all = std::all_of(query.metadata.begin(), query.metadata.end(), [&](const auto& kv) {
        auto it = r.metadata.find(kv.first);
        return it != r.metadata.end() && it->second == kv.second;
      });
      if (all) matches.push_back(r);
    }
  }
  std::sort(matches.begin(), matches.end(), Newer);
  ListPage page;
  if (matches.size() > query.limit) {
    matches.resize(query.limit);
    page.next_cursor = CursorOf(matches.back());
  }
  page.sandboxes = std::move(matches);
  return page;
}

std::map<SandboxState, size_t> SandboxManager::CountByState() const {
  std::map<SandboxState, size_t> counts;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, entry] : entries_) {
    std::lock_guard<std::mutex> entry_lock(entry->mu);
    ++counts[entry->record.state];
  }
  return counts;
}

void SandboxManager::EndLocked(Entry& entry, SandboxState final, const std::string& reason) {
  SandboxRecord& r = entry.record;
  r.state = SandboxState::kStopping;
  r.reason = reason;
  Persist(r);
  if (entry.sandbox) {
    Unwatch(entry);
    (void)entry.sandbox->Kill();
    (void)entry.sandbox->Wait();  // reaps PID 1, removes the cgroup
    entry.sandbox.reset();        // frees the uid range, unlinks the agent socket
  }
  r.state = final;
  r.ended_ms = NowMs();
  r.expires_ms = r.remaining_ms = 0;
  Persist(r);
}

absl::Status SandboxManager::Kill(const std::string& id) {
  BRIG_ASSIGN_OR_RETURN(std::shared_ptr<Entry> entry, FindOrError(id));
  std::lock_guard<std::mutex> lock(entry->mu);
  if (!IsLive(entry->record.state)) return WrongState(entry->record, "kill");
  EndLocked(*entry, SandboxState::kStopped, "killed");
  return absl::OkStatus();
}

absl::StatusOr<SandboxRecord> SandboxManager::SetTimeout(const std::string& id,
                                                         std::chrono::seconds timeout) {
  BRIG_ASSIGN_OR_RETURN(std::shared_ptr<Entry> entry, FindOrError(id));
  std::lock_guard<std::mutex> lock(entry->mu);
  SandboxRecord& r = entry->record;
  const int64_t ms = std::chrono::duration_cast<milliseconds>(timeout).count();
  if (r.state == SandboxState::kRunning) {
    r.expires_ms = NowMs() + ms;
  } else if (r.state == SandboxState::kPaused) {
    r.remaining_ms = ms;
  } else {
    return WrongState(r, "set the timeout of");
  }
  Persist(r);
  WakeMonitor();
  return r;
}

absl::StatusOr<SandboxRecord> SandboxManager::Pause(const std::string& id) {
  BRIG_ASSIGN_OR_RETURN(std::shared_ptr<Entry> entry, FindOrError(id));
  std::lock_guard<std::mutex> lock(entry->mu);
  SandboxRecord& r = entry->record;
  if (r.state == SandboxState::kPaused) return r;
  if (r.state != SandboxState::kRunning) return WrongState(r, "pause");
  BRIG_RETURN_IF_ERROR(entry->sandbox->Pause());
  r.state = SandboxState::kPaused;
  r.remaining_ms = std::max<int64_t>(0, r.expires_ms - NowMs());
  r.expires_ms = 0;
  Persist(r);
  return r;
}

absl::StatusOr<SandboxRecord> SandboxManager::Resume(const std::string& id) {
  BRIG_ASSIGN_OR_RETURN(std::shared_ptr<Entry> entry, FindOrError(id));
  std::lock_guard<std::mutex> lock(entry->mu);
  SandboxRecord& r = entry->record;
  if (r.state == SandboxState::kRunning) return r;
  if (r.state != SandboxState::kPaused) return WrongState(r, "resume");
  BRIG_RETURN_IF_ERROR(entry->sandbox->Resume());
  r.state = SandboxState::kRunning;
  r.expires_ms = NowMs() + r.remaining_ms;
  r.remaining_ms = 0;
  Persist(r);
  WakeMonitor();
  return r;
}

absl::StatusOr<SandboxManager::CommandTarget> SandboxManager::CommandTargetOf(
    const std::string& id) const {
  BRIG_ASSIGN_OR_RETURN(std::shared_ptr<Entry> entry, FindOrError(id));
  std::lock_guard<std::mutex> lock(entry->mu);
  if (entry->record.state != SandboxState::kRunning) {
    return WrongState(entry->record, "run commands in");
  }
  return CommandTarget{AgentSocket(id), entry->record.env};
}

}  // namespace brig::server
