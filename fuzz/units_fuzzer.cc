// CLI (and later API) sizes and durations: arbitrary text must parse or be refused, never crash,
// and an accepted value is within the documented bounds.
#include <cstdint>
#include <cstdlib>

#include "cli/units.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<uint64_t> bytes = brig::ParseSize(text);
  if (!bytes.ok() && bytes.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
  absl::StatusOr<std::chrono::milliseconds> ms = brig::ParseDuration(text);
  if (ms.ok() && (ms->count() < 0 || ms->count() > 1'000'000'000'000'000)) std::abort();
  if (!ms.ok() && ms.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
  return 0;
}
