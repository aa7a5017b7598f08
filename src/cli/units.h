// Parsing of the human units CLI flags take: sizes ("512M", "1.5G", "4096") and durations
// ("30s", "500ms", "2m", "1h", "45" = seconds). Pure functions; thread-safe.
#pragma once

#include <chrono>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "base/status.h"

namespace brig {

// Binary multiples: K = 1024. A bare number is bytes.
absl::StatusOr<uint64_t> ParseSize(absl::string_view text);
absl::StatusOr<std::chrono::milliseconds> ParseDuration(absl::string_view text);

}  // namespace brig
