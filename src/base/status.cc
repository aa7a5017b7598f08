#include "base/status.h"

#include <cstring>

namespace brig {

absl::Status ErrnoError(absl::string_view call, absl::string_view argument, int error) {
  std::string message = argument.empty()
                            ? absl::StrCat(call, ": ", std::strerror(error))
                            : absl::StrCat(call, " ", argument, ": ", std::strerror(error));
  return absl::Status(absl::ErrnoToStatusCode(error), message);
}

absl::Status Annotate(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace brig
