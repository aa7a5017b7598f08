// Shared by the benchmarks: their flags, percentiles of a sample and the Markdown rows printed.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace brig::bench {

// --iterations N, --state-dir DIR, --brig PATH (each benchmark uses what it needs).
struct Flags {
  int iterations = 200;
  std::string state_dir = "/tmp/brig-bench-state";
  std::string brig = "build/brig";
};

inline Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--iterations")) flags.iterations = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--state-dir")) flags.state_dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--brig")) flags.brig = argv[i + 1];
  }
  return flags;
}

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
