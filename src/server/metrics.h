// Server-wide metrics in the Prometheus text format (GET /metrics): API requests by route,
// method and status; how long creates take (a histogram); sandboxes by state, counted when
// scraped.
//
// Thread-safety: every method may be called from any thread (one mutex; updates are a few
// map operations).
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "server/record.h"

namespace brig::server {

class Metrics {
 public:
  void CountRequest(const std::string& route, const std::string& method, int status);
  void ObserveCreate(std::chrono::nanoseconds took);
  // The exposition, with the sandbox counts by state supplied by the caller.
  std::string Render(const std::map<SandboxState, size_t>& sandboxes) const;

 private:
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, int>, uint64_t> requests_;
  std::map<double, uint64_t> create_buckets_;  // upper bound (s) -> count (not cumulative)
  uint64_t create_count_ = 0;
  double create_sum_ = 0;
};

}  // namespace brig::server
