// Benchmark: the isolation engine alone, in-process: Engine::Launch + Wait of /bin/true,
// without the cost of starting the brig executable. Reports p50/p95/p99.
//
// Usage: engine_launch [--iterations N] [--state-dir DIR]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/sandbox.h"
#include "stats.h"

int main(int argc, char** argv) {
  const brig::bench::Flags flags = brig::bench::ParseFlags(argc, argv);
  const int iterations = flags.iterations;
  const std::string& state_dir = flags.state_dir;
  auto engine = brig::Engine::Open(state_dir);
  if (!engine.ok()) {
    std::fprintf(stderr, "%s\n", engine.status().ToString().c_str());
    return 1;
  }
  std::vector<double> ms;
  int errors = 0;
  for (int i = 0; i < iterations + 10; ++i) {
    brig::SandboxSpec spec;
    brig::ProcessSpec process;
    process.argv = {"/bin/true"};
    auto start = std::chrono::steady_clock::now();
    auto sandbox = (*engine)->Launch(spec, process);
    if (!sandbox.ok()) {
      ++errors;
      continue;
    }
    brig::RunOutcome out = (*sandbox)->Wait();
    sandbox->reset();
    double t =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (out.kind != brig::RunOutcome::Kind::kExited || out.exit_code != 0)
      ++errors;
    else if (i >= 10)
      ms.push_back(t);
  }
  brig::bench::PrintHeader("workload");
  brig::bench::PrintRow("engine: Launch+Wait of /bin/true", ms, errors);
  return errors == 0 ? 0 : 1;
}
