#include "cli/units.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"

namespace brig {
namespace {

// Splits "1.5G" into 1.5 and "G"; the number must be finite and not negative.
bool SplitNumber(absl::string_view text, double* number, absl::string_view* suffix) {
  size_t end = 0;
  while (end < text.size() && (absl::ascii_isdigit(text[end]) || text[end] == '.')) ++end;
  if (end == 0) return false;
  *suffix = text.substr(end);
  return absl::SimpleAtod(text.substr(0, end), number) && std::isfinite(*number) && *number >= 0;
}

}  // namespace

absl::StatusOr<uint64_t> ParseSize(absl::string_view text) {
  double n = 0;
  absl::string_view suffix;
  if (!SplitNumber(text, &n, &suffix)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid size \"", text, "\""));
  }
  std::string unit = absl::AsciiStrToUpper(suffix);
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();  // "Mi", "Gi"
  double scale;
  if (unit.empty())
    scale = 1;
  else if (unit == "K")
    scale = 1024.0;
  else if (unit == "M")
    scale = 1024.0 * 1024;
  else if (unit == "G")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "T")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    return absl::InvalidArgumentError(absl::StrCat("invalid size unit in \"", text, "\""));
  double bytes = std::floor(n * scale);
  if (bytes > 1.8e19) return absl::InvalidArgumentError(absl::StrCat("size too large: ", text));
  return static_cast<uint64_t>(bytes);
}

absl::StatusOr<std::chrono::milliseconds> ParseDuration(absl::string_view text) {
  double n = 0;
  absl::string_view suffix;
  if (!SplitNumber(text, &n, &suffix)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid duration \"", text, "\""));
  }
  double ms;
  if (suffix.empty() || suffix == "s")
    ms = n * 1000;
  else if (suffix == "ms")
    ms = n;
  else if (suffix == "m")
    ms = n * 60'000;
  else if (suffix == "h")
    ms = n * 3'600'000;
  else
    return absl::InvalidArgumentError(absl::StrCat("invalid duration unit in \"", text, "\""));
  if (ms > 1e15) return absl::InvalidArgumentError(absl::StrCat("duration too long: ", text));
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(ms)));
}

}  // namespace brig
