// The one error convention of brig (see docs/architecture.md, "Errors").
//
// Every fallible function returns absl::Status or absl::StatusOr<T> and is [[nodiscard]] by way
// of those types. errno is converted exactly once, at the system call that set it, by
// ErrnoError(), whose message names the call and its key argument ("mount overlay on /x").
// Exceptions are not used by brig's own code; where a library throws, the call site catches
// and converts.
//
// Thread-safety: everything here is stateless and safe from any thread. Not for use between
// fork and exec (it allocates); the restricted zone reports raw errno values instead.
#pragma once

#include <cerrno>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace brig {

// A Status for a failed system call: the code follows errno, the message reads
// "<call> <argument>: <strerror>".
absl::Status ErrnoError(absl::string_view call, absl::string_view argument, int error = errno);

// Prefixes a non-OK status's message with context, keeping its code.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace brig

#define BRIG_CONCAT_INNER_(a, b) a##b
#define BRIG_CONCAT_(a, b) BRIG_CONCAT_INNER_(a, b)

#define BRIG_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::absl::Status brig_status_ = (expr);        \
    if (!brig_status_.ok()) return brig_status_; \
  } while (0)

#define BRIG_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()

#define BRIG_ASSIGN_OR_RETURN(lhs, expr) \
  BRIG_ASSIGN_OR_RETURN_IMPL_(BRIG_CONCAT_(brig_statusor_, __LINE__), lhs, expr)
