// Shared by the benchmarks: percentiles of a sample and the Markdown row they print.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace brig::bench {

// Nearest-rank percentile (p in [0, 100]) of `values`; 0 for an empty sample.
inline double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  auto i = static_cast<size_t>(p / 100.0 * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(i, values.size() - 1)];
}

// "| name | p50 | p95 | p99 | runs | errors |"
inline void PrintRow(const std::string& name, const std::vector<double>& ms, int errors) {
  std::printf("| %s | %.2f | %.2f | %.2f | %zu | %d |\n", name.c_str(), Percentile(ms, 50),
              Percentile(ms, 95), Percentile(ms, 99), ms.size(), errors);
}

inline void PrintHeader(const std::string& workload) {
  std::printf("| %s | p50 ms | p95 ms | p99 ms | runs | errors |\n|---|---:|---:|---:|---:|---:|\n",
              workload.c_str());
}

}  // namespace brig::bench
