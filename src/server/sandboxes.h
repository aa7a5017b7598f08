// The sandbox state machine of the daemon (docs/api.md, "States"): creates long-lived
// sandboxes through the engine, keeps their records (in memory, written through to the Store),
// enforces their lifetime timeouts, notices when one dies, and takes them over again after a
// daemon restart.
//
// Ownership: the manager owns one Sandbox handle per live sandbox. Shutdown() detaches them all,
// so stopping the daemon never stops a sandbox.
//
// Thread-safety: every public method may be called from any thread. A monitor thread watches
// every sandbox's PID 1 (and OOM events) and the lifetime deadlines. Locks: the manager's map
// lock is taken before an entry's lock, never the other way round.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "base/unique_fd.h"
#include "engine/sandbox.h"
#include "server/record.h"
#include "server/store.h"

namespace brig::server {

struct CreateRequest {
  std::string template_name = "base";
  std::string name;  // empty: none
  double cpus = 0;
  uint64_t memory_mb = 512;
  uint64_t disk_mb = 1024;
  uint32_t pids = 256;
  StringMap env;
  StringMap metadata;
  std::chrono::seconds timeout{300};
};

struct ListQuery {
  std::set<SandboxState> states;  // empty: all
  std::string name;               // empty: any
  StringMap metadata;             // every pair must match
  size_t limit = 100;
  std::string cursor;  // from the previous page's next_cursor
};

// One sample of a sandbox's resource use (taken every few seconds while it runs).
struct MetricSample {
  int64_t ms = 0;          // wall clock, ms since the epoch
  double cpu_percent = 0;  // since the previous sample; 100 = one core busy
  uint64_t cpu_usec = 0;   // total CPU time so far
  uint64_t memory_bytes = 0;
  uint64_t memory_peak_bytes = 0;
  uint64_t disk_used_bytes = 0;  // its writable layer
  uint64_t pids = 0;
};

struct ListPage {
  std::vector<SandboxRecord> sandboxes;
  std::string next_cursor;  // empty: no more
};

class SandboxManager {
 public:
  // Loads the store and reconciles it with the host: live sandboxes are adopted, those found
  // dead become `lost`, and records ended over a day ago are forgotten. Starts the monitor.
  static absl::StatusOr<std::unique_ptr<SandboxManager>> Open(const Engine& engine, Store& store);
  ~SandboxManager();  // Shutdown()

  struct Created {
    SandboxRecord record;
    bool created;  // false: an existing sandbox of that name
  };
  absl::StatusOr<Created> Create(const CreateRequest& request);
  absl::StatusOr<SandboxRecord> Get(const std::string& id) const;
  absl::StatusOr<ListPage> List(const ListQuery& query) const;
  // How many sandboxes are in each state (for metrics).
  std::map<SandboxState, size_t> CountByState() const;
  // Its samples between the two times (ms since the epoch); a running sandbox gets a fresh
  // one first when the last is older than a second.
  absl::StatusOr<std::vector<MetricSample>> Metrics(const std::string& id, int64_t from_ms,
                                                    int64_t to_ms);
  absl::Status Kill(const std::string& id);
  absl::StatusOr<SandboxRecord> SetTimeout(const std::string& id, std::chrono::seconds timeout);
  absl::StatusOr<SandboxRecord> Pause(const std::string& id);
  absl::StatusOr<SandboxRecord> Resume(const std::string& id);

  // What a command route needs: the agent's socket of a running sandbox, and its env.
  struct CommandTarget {
    std::string agent_socket;
    StringMap env;
  };
  absl::StatusOr<CommandTarget> CommandTargetOf(const std::string& id) const;

  // Stops the monitor and lets every sandbox run on without the daemon. Idempotent.
  void Shutdown();

 private:
  struct Entry {
    std::mutex mu;
    SandboxRecord record;
    std::unique_ptr<Sandbox> sandbox;  // set while the sandbox is live
    std::deque<MetricSample> samples;  // the newest kKeepSamples
  };

  SandboxManager(const Engine& engine, Store& store);
  absl::Status Recover();
  void Reconcile(Entry& entry);
  std::shared_ptr<Entry> Find(const std::string& id) const;
  absl::StatusOr<std::shared_ptr<Entry>> FindOrError(const std::string& id) const;
  std::string AgentSocket(const std::string& id) const;
  // Records the new state of an entry (held locked) in the store.
  void Persist(const SandboxRecord& record);
  // Ends a live sandbox (entry locked): kill, reap, clean up, record `final` with `reason`.
  void EndLocked(Entry& entry, SandboxState final, const std::string& reason);
  void Watch(Entry& entry);
  void Unwatch(Entry& entry);
  void WakeMonitor();
  void MonitorLoop();
  void ExpireDue();
  void ForgetOld();
  void SampleAll();
  // Reads the entry's (locked) cgroup and root file system into a new sample.
  void SampleLocked(Entry& entry);

  const Engine& engine_;
  Store& store_;
  std::string run_dir_;  // agent sockets

  mutable std::mutex mu_;  // guards entries_
  std::map<std::string, std::shared_ptr<Entry>> entries_;
  std::mutex create_by_name_mu_;  // makes create-or-get by name atomic

  UniqueFd epoll_, wake_;
  std::atomic<bool> stopping_{false};
  std::thread monitor_;
};

}  // namespace brig::server
