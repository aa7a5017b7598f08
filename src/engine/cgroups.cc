#include "engine/cgroups.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <set>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/files.h"

namespace brig {
namespace {

// The v1 controllers a sandbox needs; "freezer" is optional (used to kill without races).
constexpr const char* kV1Required[] = {"memory", "cpu", "cpuacct", "pids"};
constexpr const char* kV1Optional[] = {"freezer"};

// Reads "key value" lines (cpu.stat, memory.events, memory.oom_control) once; missing keys
// (or an unreadable file) read as 0.
class KeyedValues {
 public:
  explicit KeyedValues(const std::string& path) {
    absl::StatusOr<std::string> content = ReadFile(path);
    if (!content.ok()) return;
    for (absl::string_view line : absl::StrSplit(*content, '\n', absl::SkipEmpty())) {
      std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(line, ' ');
      uint64_t value = 0;
      if (absl::SimpleAtoi(kv.second, &value)) values_[std::string(kv.first)] = value;
    }
  }
  uint64_t operator[](const std::string& key) const {
    auto it = values_.find(key);
    return it == values_.end() ? 0 : it->second;
  }

 private:
  std::map<std::string, uint64_t> values_;
};

uint64_t ReadNumber(const std::string& path) {
  absl::StatusOr<std::string> content = ReadFile(path);
  uint64_t value = 0;
  if (content.ok()) (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(*content), &value);
  return value;
}

std::vector<pid_t> ReadProcs(const std::string& dir) {
  std::vector<pid_t> pids;
  absl::StatusOr<std::string> content = ReadFile(dir + "/cgroup.procs");
  if (!content.ok()) return pids;
  for (absl::string_view line : absl::StrSplit(*content, '\n', absl::SkipEmpty())) {
    int pid = 0;
    if (absl::SimpleAtoi(line, &pid) && pid > 0) pids.push_back(pid);
  }
  return pids;
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// Kills whatever is in `dir`, by SIGKILL to each listed process, until it lists none. A
// process forking during the loop is caught by the next round; the pids limit bounds rounds.
void KillListed(const std::string& dir) {
  for (int round = 0; round < 1000; ++round) {
    std::vector<pid_t> pids = ReadProcs(dir);
    if (pids.empty()) return;
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Waits for the kernel to empty `dir` (killed processes leave asynchronously), then removes it.
absl::Status WaitEmptyAndRemove(const std::string& dir) {
  for (int attempt = 0; attempt < 5000; ++attempt) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
    if (errno != EBUSY) return ErrnoError("rmdir", dir);
    if (attempt % 50 == 49) KillListed(dir);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return ErrnoError("rmdir", dir, EBUSY);
}

absl::Status MakeCgroupDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0) return ErrnoError("mkdir", dir);
  return absl::OkStatus();
}

// Writes `value` to `file`, then polls `state_file` until it contains `done` (the kernel
// freezes tasks asynchronously); DeadlineExceeded after 5 s.
absl::Status WriteAndAwait(const std::string& file, absl::string_view value,
                           const std::string& state_file, absl::string_view done) {
  BRIG_RETURN_IF_ERROR(WriteKernelFile(file, value));
  for (int attempt = 0; attempt < 50'000; ++attempt) {
    absl::StatusOr<std::string> state = ReadFile(state_file);
    if (!state.ok()) return state.status();
    if (absl::StrContains(*state, done)) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat(state_file, " never reached ", done));
}

absl::Status FreezeV2(const std::string& dir, bool frozen) {
  return WriteAndAwait(dir + "/cgroup.freeze", frozen ? "1" : "0", dir + "/cgroup.events",
                       frozen ? "frozen 1" : "frozen 0");
}

// Shared by both versions: whole-tree kill through cgroup.kill (v2, Linux >= 5.14).
bool KillThroughCgroupKill(const std::string& v2_dir) {
  if (v2_dir.empty()) return false;
  std::string kill_file = v2_dir + "/cgroup.kill";
  return Exists(kill_file) && WriteKernelFile(kill_file, "1").ok();
}

class CgroupV1 final : public SandboxCgroup {
 public:
  CgroupV1(std::map<std::string, std::string> dirs, std::string unified, UniqueFd unified_fd)
      : dirs_(std::move(dirs)), unified_(std::move(unified)), unified_fd_(std::move(unified_fd)) {}
  ~CgroupV1() override { (void)Remove(); }

  absl::Status Attach(pid_t pid) override {
    std::string text = std::to_string(pid);
    for (const std::string& dir : Paths()) {
      BRIG_RETURN_IF_ERROR(WriteKernelFile(dir + "/cgroup.procs", text));
    }
    return absl::OkStatus();
  }

  int clone_into_fd() const override { return unified_fd_.get(); }

  std::vector<std::string> self_attach_files() const override {
    std::set<std::string> unique;
    for (const auto& [controller, dir] : dirs_) unique.insert(dir + "/tasks");
    return {unique.begin(), unique.end()};
  }

  absl::Status KillAll() override {
    if (KillThroughCgroupKill(unified_)) return absl::OkStatus();
    auto freezer = dirs_.find("freezer");
    bool frozen = freezer != dirs_.end() &&
                  WriteKernelFile(freezer->second + "/freezer.state", "FROZEN").ok();
    // SIGKILL is delivered to frozen tasks as soon as they thaw, and frozen tasks cannot fork.
    for (pid_t pid : ReadProcs(dirs_.at("memory"))) ::kill(pid, SIGKILL);
    if (frozen) (void)WriteKernelFile(freezer->second + "/freezer.state", "THAWED");
    KillListed(dirs_.at("memory"));
    return absl::OkStatus();
  }

  absl::StatusOr<UniqueFd> WatchOom() override {
    UniqueFd event(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!event) return ErrnoError("eventfd", "OOM notification");
    const std::string& mem = dirs_.at("memory");
    BRIG_ASSIGN_OR_RETURN(UniqueFd control, OpenFd(mem + "/memory.oom_control", O_RDONLY));
    BRIG_RETURN_IF_ERROR(WriteKernelFile(mem + "/cgroup.event_control",
                                         absl::StrCat(event.get(), " ", control.get())));
    return event;
  }

  absl::StatusOr<CgroupUsage> ReadUsage() const override {
    CgroupUsage u;
    u.cpu_usec = ReadNumber(dirs_.at("cpuacct") + "/cpuacct.usage") / 1000;
    u.memory_peak_bytes = ReadNumber(dirs_.at("memory") + "/memory.max_usage_in_bytes");
    u.memory_bytes = ReadNumber(dirs_.at("memory") + "/memory.usage_in_bytes");
    u.pids = ReadNumber(dirs_.at("pids") + "/pids.current");
    u.oom_kills = KeyedValues(dirs_.at("memory") + "/memory.oom_control")["oom_kill"];
    if (auto cpu = dirs_.find("cpu"); cpu != dirs_.end()) {
      KeyedValues stat(cpu->second + "/cpu.stat");
      u.nr_throttled = stat["nr_throttled"];
      u.throttled_usec = stat["throttled_time"] / 1000;
    }
    return u;
  }

  absl::Status Remove() override {
    if (removed_) return absl::OkStatus();
    removed_ = true;
    (void)KillAll();
    unified_fd_.reset();
    absl::Status first;
    for (const std::string& dir : Paths()) {
      absl::Status s = WaitEmptyAndRemove(dir);
      if (first.ok()) first = s;
    }
    return first;
  }

  void Release() override {
    removed_ = true;
    unified_fd_.reset();
  }

  absl::Status Freeze(bool frozen) override {
    if (auto freezer = dirs_.find("freezer"); freezer != dirs_.end()) {
      const std::string state = freezer->second + "/freezer.state";
      return WriteAndAwait(state, frozen ? "FROZEN" : "THAWED", state,
                           frozen ? "FROZEN" : "THAWED");
    }
    if (!unified_.empty()) return FreezeV2(unified_, frozen);
    return absl::FailedPreconditionError("this sandbox's cgroup was not made freezable");
  }

  std::vector<std::string> Paths() const override {
    std::set<std::string> unique;
    for (const auto& [controller, dir] : dirs_) unique.insert(dir);
    std::vector<std::string> out(unique.begin(), unique.end());
    if (!unified_.empty()) out.push_back(unified_);
    return out;
  }

  absl::Status ApplyLimits(const Limits& limits) {
    const std::string& mem = dirs_.at("memory");
    if (limits.memory_bytes != 0) {
      std::string bytes = std::to_string(limits.memory_bytes);
      BRIG_RETURN_IF_ERROR(WriteKernelFile(mem + "/memory.limit_in_bytes", bytes));
      // With swap accounting, also cap memory+swap so the limit cannot be dodged by swapping.
      if (Exists(mem + "/memory.memsw.limit_in_bytes")) {
        BRIG_RETURN_IF_ERROR(WriteKernelFile(mem + "/memory.memsw.limit_in_bytes", bytes));
      }
    }
    if (limits.cpus > 0) {
      constexpr uint64_t kPeriodUsec = 100'000;
      auto quota = static_cast<uint64_t>(std::llround(limits.cpus * kPeriodUsec));
      BRIG_RETURN_IF_ERROR(
          WriteKernelFile(dirs_.at("cpu") + "/cpu.cfs_period_us", std::to_string(kPeriodUsec)));
      BRIG_RETURN_IF_ERROR(
          WriteKernelFile(dirs_.at("cpu") + "/cpu.cfs_quota_us", std::to_string(quota)));
    }
    return WriteKernelFile(dirs_.at("pids") + "/pids.max", std::to_string(limits.pids));
  }

 private:
  std::map<std::string, std::string> dirs_;  // controller -> this sandbox's directory
  std::string unified_;                      // hybrid hosts: the v2 directory, for cgroup.kill
  UniqueFd unified_fd_;
  bool removed_ = false;
};

class CgroupV2 final : public SandboxCgroup {
 public:
  CgroupV2(std::string dir, UniqueFd dir_fd, bool freezable)
      : dir_(std::move(dir)), dir_fd_(std::move(dir_fd)), freezable_(freezable) {}
  ~CgroupV2() override { (void)Remove(); }

  absl::Status Attach(pid_t pid) override {
    return WriteKernelFile(dir_ + "/cgroup.procs", std::to_string(pid));
  }
  int clone_into_fd() const override { return dir_fd_.get(); }
  std::vector<std::string> self_attach_files() const override { return {}; }

  absl::Status KillAll() override {
    if (!KillThroughCgroupKill(dir_)) KillListed(dir_);
    return absl::OkStatus();
  }

  absl::StatusOr<UniqueFd> WatchOom() override { return UniqueFd(); }  // memory.oom.group

  absl::StatusOr<CgroupUsage> ReadUsage() const override {
    CgroupUsage u;
    KeyedValues stat(dir_ + "/cpu.stat");
    u.cpu_usec = stat["usage_usec"];
    u.nr_throttled = stat["nr_throttled"];
    u.throttled_usec = stat["throttled_usec"];
    u.memory_peak_bytes = ReadNumber(dir_ + "/memory.peak");
    u.memory_bytes = ReadNumber(dir_ + "/memory.current");
    u.pids = ReadNumber(dir_ + "/pids.current");
    u.oom_kills = KeyedValues(dir_ + "/memory.events")["oom_kill"];
    return u;
  }

  absl::Status Remove() override {
    if (removed_) return absl::OkStatus();
    removed_ = true;
    (void)KillAll();
    dir_fd_.reset();
    return WaitEmptyAndRemove(dir_);
  }

  void Release() override {
    removed_ = true;
    dir_fd_.reset();
  }

  absl::Status Freeze(bool frozen) override {
    // Same contract as v1, where only freezable sandboxes have a freezer.
    if (!freezable_) {
      return absl::FailedPreconditionError("this sandbox's cgroup was not made freezable");
    }
    return FreezeV2(dir_, frozen);
  }

  std::vector<std::string> Paths() const override { return {dir_}; }

  absl::Status ApplyLimits(const Limits& limits) {
    if (limits.memory_bytes != 0) {
      BRIG_RETURN_IF_ERROR(
          WriteKernelFile(dir_ + "/memory.max", std::to_string(limits.memory_bytes)));
      if (Exists(dir_ + "/memory.swap.max")) {
        BRIG_RETURN_IF_ERROR(WriteKernelFile(dir_ + "/memory.swap.max", "0"));
      }
      // One OOM kill takes the whole sandbox down, as on v1 (WatchOom).
      BRIG_RETURN_IF_ERROR(WriteKernelFile(dir_ + "/memory.oom.group", "1"));
    }
    if (limits.cpus > 0) {
      constexpr uint64_t kPeriodUsec = 100'000;
      auto quota = static_cast<uint64_t>(std::llround(limits.cpus * kPeriodUsec));
      BRIG_RETURN_IF_ERROR(
          WriteKernelFile(dir_ + "/cpu.max", absl::StrCat(quota, " ", kPeriodUsec)));
    }
    return WriteKernelFile(dir_ + "/pids.max", std::to_string(limits.pids));
  }

 private:
  std::string dir_;
  UniqueFd dir_fd_;
  bool freezable_;
  bool removed_ = false;
};

struct CgroupMount {
  std::string mount_point;
  std::string root;  // the hierarchy path mounted there (not "/" inside a cgroup namespace)
  std::set<std::string> controllers;  // v1 only
  bool v2 = false;
};

// Parses /proc/self/mountinfo for cgroup and cgroup2 mounts.
absl::StatusOr<std::vector<CgroupMount>> ReadCgroupMounts() {
  BRIG_ASSIGN_OR_RETURN(std::string info, ReadFile("/proc/self/mountinfo"));
  std::vector<CgroupMount> mounts;
  for (absl::string_view line : absl::StrSplit(info, '\n', absl::SkipEmpty())) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
    auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 7 || dash == f.end() || dash + 3 >= f.end() + 1) continue;
    absl::string_view fstype = *(dash + 1);
    if (fstype != "cgroup" && fstype != "cgroup2") continue;
    CgroupMount m;
    m.root = std::string(f[3]);
    m.mount_point = std::string(f[4]);
    m.v2 = fstype == "cgroup2";
    if (!m.v2 && dash + 3 < f.end()) {
      for (absl::string_view opt : absl::StrSplit(*(dash + 3), ',')) m.controllers.emplace(opt);
    }
    mounts.push_back(std::move(m));
  }
  return mounts;
}

// Joins a mount point with brig's own cgroup path, relative to the mount's root.
std::string OwnDir(const CgroupMount& m, const std::string& own_path) {
  std::string rel = own_path;
  if (m.root != "/" && rel.rfind(m.root, 0) == 0) rel = rel.substr(m.root.size());
  if (rel == "/") rel.clear();
  return m.mount_point + rel;
}

// For pure v2: sandbox cgroups need memory, cpu and pids in `dir`'s cgroup.subtree_control,
// which the kernel refuses while `dir` holds processes. brig then moves itself into a leaf.
absl::Status EnableV2Controllers(const std::string& dir) {
  std::string control = dir + "/cgroup.subtree_control";
  absl::Status enabled = WriteKernelFile(control, "+memory +cpu +pids");
  if (enabled.ok()) return enabled;
  if (!absl::IsUnavailable(enabled)) return enabled;  // EBUSY maps to Unavailable
  std::vector<pid_t> procs = ReadProcs(dir);
  if (procs.size() != 1 || procs[0] != ::getpid()) {
    return absl::FailedPreconditionError(
        absl::StrCat("cgroup v2: cannot enable controllers in ", dir,
                     " because it holds other processes; start brig in a cgroup of its own "
                     "(e.g. systemd-run --scope -p Delegate=yes brig ...)"));
  }
  std::string leaf = dir + "/brig-supervisor";
  if (::mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoError("mkdir", leaf);
  BRIG_RETURN_IF_ERROR(WriteKernelFile(leaf + "/cgroup.procs", std::to_string(::getpid())));
  return WriteKernelFile(control, "+memory +cpu +pids");
}

}  // namespace

absl::StatusOr<CgroupHost> CgroupHost::Detect() {
  BRIG_ASSIGN_OR_RETURN(std::vector<CgroupMount> mounts, ReadCgroupMounts());
  BRIG_ASSIGN_OR_RETURN(std::string self, ReadFile("/proc/self/cgroup"));
  std::map<std::string, std::string> own_path;  // controller (or "" for v2) -> path
  for (absl::string_view line : absl::StrSplit(self, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    if (f[1].empty()) {
      own_path[""] = std::string(f[2]);
      continue;
    }
    for (absl::string_view c : absl::StrSplit(f[1], ','))
      own_path[std::string(c)] = std::string(f[2]);
  }

  CgroupHost host;
  for (const CgroupMount& m : mounts) {
    if (m.v2) {
      if (own_path.count("") && host.v2_dir_.empty()) host.v2_dir_ = OwnDir(m, own_path[""]);
      continue;
    }
    for (const std::string& c : m.controllers) {
      if (own_path.count(c) && !host.v1_dirs_.count(c)) host.v1_dirs_[c] = OwnDir(m, own_path[c]);
    }
  }

  if (host.v1_dirs_.count("memory")) {
    host.mode_ = Mode::kV1;
    for (const char* c : kV1Required) {
      if (!host.v1_dirs_.count(c)) {
        return absl::FailedPreconditionError(
            absl::StrCat("cgroup v1 host lacks the \"", c, "\" controller"));
      }
    }
    // Keep only the controllers brig uses.
    std::map<std::string, std::string> used;
    for (const char* c : kV1Required) used[c] = host.v1_dirs_[c];
    for (const char* c : kV1Optional) {
      if (host.v1_dirs_.count(c)) used[c] = host.v1_dirs_[c];
    }
    host.v1_dirs_ = std::move(used);
    // A v2 mount without controllers (hybrid) still offers cgroup.kill.
    if (!host.v2_dir_.empty() && !Exists(host.v2_dir_ + "/cgroup.procs")) host.v2_dir_.clear();
    return host;
  }

  if (host.v2_dir_.empty()) {
    return absl::FailedPreconditionError(
        "no cgroup hierarchy with the memory controller is mounted (need cgroup v1 or v2)");
  }
  host.mode_ = Mode::kV2;
  absl::StatusOr<std::string> available = ReadFile(host.v2_dir_ + "/cgroup.controllers");
  if (!available.ok()) return available.status();
  for (const char* c : {"memory", "cpu", "pids"}) {
    std::vector<absl::string_view> have =
        absl::StrSplit(absl::StripAsciiWhitespace(*available), ' ');
    if (std::find(have.begin(), have.end(), c) == have.end()) {
      return absl::FailedPreconditionError(absl::StrCat("cgroup v2: controller \"", c,
                                                        "\" is not available in ", host.v2_dir_,
                                                        " (delegate it to brig's cgroup)"));
    }
  }
  BRIG_RETURN_IF_ERROR(EnableV2Controllers(host.v2_dir_));
  return host;
}

absl::StatusOr<std::unique_ptr<SandboxCgroup>> CgroupHost::Create(const std::string& name,
                                                                  const Limits& limits,
                                                                  bool freezable) const {
  if (mode_ == Mode::kV2) {
    std::string dir = v2_dir_ + "/" + name;
    BRIG_RETURN_IF_ERROR(MakeCgroupDir(dir));
    absl::StatusOr<UniqueFd> fd = OpenFd(dir, O_RDONLY | O_DIRECTORY);
    if (!fd.ok()) {
      ::rmdir(dir.c_str());
      return fd.status();
    }
    auto cgroup = std::make_unique<CgroupV2>(dir, std::move(*fd), freezable);
    BRIG_RETURN_IF_ERROR(cgroup->ApplyLimits(limits));  // the destructor removes on error
    return cgroup;
  }
  std::map<std::string, std::string> dirs;
  std::set<std::string> made;
  std::string unified;
  auto cleanup_on_error = [&](absl::Status s) {
    for (auto it = made.rbegin(); it != made.rend(); ++it) ::rmdir(it->c_str());
    return s;
  };
  for (const auto& [controller, own] : v1_dirs_) {
    if (controller == "cpu" && limits.cpus <= 0) continue;
    if (controller == "freezer" && !freezable) continue;
    std::string dir = own + "/" + name;
    if (!made.count(dir)) {
      absl::Status s = MakeCgroupDir(dir);
      if (!s.ok()) return cleanup_on_error(s);
      made.insert(dir);
    }
    dirs[controller] = dir;
  }
  UniqueFd unified_fd;
  if (!v2_dir_.empty() && freezable) {
    unified = v2_dir_ + "/" + name;
    absl::Status s = MakeCgroupDir(unified);
    if (!s.ok()) return cleanup_on_error(s);
    made.insert(unified);
    absl::StatusOr<UniqueFd> fd = OpenFd(unified, O_RDONLY | O_DIRECTORY);
    if (!fd.ok()) return cleanup_on_error(fd.status());
    unified_fd = std::move(*fd);
  }
  auto cgroup =
      std::make_unique<CgroupV1>(std::move(dirs), std::move(unified), std::move(unified_fd));
  BRIG_RETURN_IF_ERROR(cgroup->ApplyLimits(limits));
  return cgroup;
}

absl::StatusOr<std::unique_ptr<SandboxCgroup>> CgroupHost::Open(const std::string& name) const {
  if (mode_ == Mode::kV2) {
    std::string dir = v2_dir_ + "/" + name;
    BRIG_ASSIGN_OR_RETURN(UniqueFd fd, OpenFd(dir, O_RDONLY | O_DIRECTORY));
    return std::unique_ptr<SandboxCgroup>(new CgroupV2(dir, std::move(fd), /*freezable=*/true));
  }
  std::map<std::string, std::string> dirs;
  for (const auto& [controller, own] : v1_dirs_) {
    std::string dir = own + "/" + name;
    if (Exists(dir)) dirs[controller] = dir;
  }
  for (const char* c : kV1Required) {
    if (c != std::string("cpu") && !dirs.count(c)) {
      return absl::NotFoundError(absl::StrCat("no ", c, " cgroup named ", name));
    }
  }
  std::string unified = v2_dir_.empty() ? "" : v2_dir_ + "/" + name;
  UniqueFd unified_fd;
  if (!unified.empty() && Exists(unified)) {
    BRIG_ASSIGN_OR_RETURN(unified_fd, OpenFd(unified, O_RDONLY | O_DIRECTORY));
  } else {
    unified.clear();
  }
  return std::unique_ptr<SandboxCgroup>(
      new CgroupV1(std::move(dirs), std::move(unified), std::move(unified_fd)));
}

std::vector<std::string> CgroupHost::ParentDirs() const {
  std::set<std::string> dirs;
  if (mode_ == Mode::kV1) {
    for (const auto& [c, dir] : v1_dirs_) dirs.insert(dir);
  }
  if (!v2_dir_.empty()) dirs.insert(v2_dir_);
  return {dirs.begin(), dirs.end()};
}

absl::Status CgroupHost::RemoveStale(const std::string& name) const {
  absl::Status first;
  for (const std::string& parent : ParentDirs()) {
    std::string dir = parent + "/" + name;
    if (!Exists(dir)) continue;
    (void)KillThroughCgroupKill(mode_ == Mode::kV2 || parent == v2_dir_ ? dir : "");
    KillListed(dir);
    absl::Status s = WaitEmptyAndRemove(dir);
    if (first.ok()) first = s;
  }
  return first;
}

std::string CgroupHost::Describe() const {
  if (mode_ == Mode::kV2) return absl::StrCat("cgroup v2 at ", v2_dir_);
  std::vector<std::string> parts;
  for (const auto& [c, dir] : v1_dirs_) parts.push_back(absl::StrCat(c, "=", dir));
  return absl::StrCat("cgroup v1 (", absl::StrJoin(parts, ", "), ")",
                      v2_dir_.empty() ? "" : absl::StrCat(" + v2 kill at ", v2_dir_));
}

}  // namespace brig
