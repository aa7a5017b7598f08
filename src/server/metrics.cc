#include "server/metrics.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace brig::server {
namespace {

// Seconds: sandboxes are made in milliseconds; the slow tail is a template build.
constexpr std::array<double, 12> kCreateBuckets = {0.002, 0.005, 0.01, 0.02, 0.05, 0.1,
                                                   0.25,  0.5,   1,    2.5,  5,    10};
constexpr std::array<SandboxState, 6> kStates = {SandboxState::kCreating, SandboxState::kRunning,
                                                 SandboxState::kPaused,   SandboxState::kStopping,
                                                 SandboxState::kStopped,  SandboxState::kLost};

std::string Escape(const std::string& label) {
  std::string out;
  for (char c : label) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

void Metrics::CountRequest(const std::string& route, const std::string& method, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{route, method, status}];
}

void Metrics::ObserveCreate(std::chrono::nanoseconds took) {
  const double seconds = std::chrono::duration<double>(took).count();
  std::lock_guard<std::mutex> lock(mu_);
  ++create_count_;
  create_sum_ += seconds;
  for (double bound : kCreateBuckets) {
    if (seconds <= bound) {
      ++create_buckets_[bound];
      return;
    }
  }
}

std::string Metrics::Render(const std::map<SandboxState, size_t>& sandboxes) const {
  std::string out;
  absl::StrAppend(&out, "# HELP brig_sandboxes Sandboxes the daemon knows, by state.\n",
                  "# TYPE brig_sandboxes gauge\n");
  for (SandboxState state : kStates) {
    auto it = sandboxes.find(state);
    absl::StrAppend(&out, "brig_sandboxes{state=\"", StateName(state), "\"} ",
                    it == sandboxes.end() ? 0 : it->second, "\n");
  }
  std::lock_guard<std::mutex> lock(mu_);
  absl::StrAppend(&out,
                  "# HELP brig_http_requests_total API requests by route, method and status.\n",
                  "# TYPE brig_http_requests_total counter\n");
  for (const auto& [key, count] : requests_) {
    const auto& [route, method, status] = key;
    absl::StrAppend(&out, "brig_http_requests_total{route=\"", Escape(route), "\",method=\"",
                    Escape(method), "\",status=\"", status, "\"} ", count, "\n");
  }
  absl::StrAppend(&out,
                  "# HELP brig_sandbox_create_seconds Time to create a sandbox (through its "
                  "agent's hello).\n",
                  "# TYPE brig_sandbox_create_seconds histogram\n");
  uint64_t cumulative = 0;
  for (double bound : kCreateBuckets) {
    auto it = create_buckets_.find(bound);
    cumulative += it == create_buckets_.end() ? 0 : it->second;
    absl::StrAppend(&out, "brig_sandbox_create_seconds_bucket{le=\"", bound, "\"} ", cumulative,
                    "\n");
  }
  absl::StrAppend(&out, "brig_sandbox_create_seconds_bucket{le=\"+Inf\"} ", create_count_, "\n",
                  "brig_sandbox_create_seconds_sum ", create_sum_, "\n",
                  "brig_sandbox_create_seconds_count ", create_count_, "\n");
  return out;
}

}  // namespace brig::server
