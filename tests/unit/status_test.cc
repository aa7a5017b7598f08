#include "base/status.h"

#include <gtest/gtest.h>

#include "base/files.h"

namespace brig {
namespace {

TEST(ErrnoError, NamesCallArgumentAndMapsCode) {
  absl::Status s = ErrnoError("open", "/nonexistent", ENOENT);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("open /nonexistent"), absl::string_view::npos);
  EXPECT_NE(s.message().find("No such file"), absl::string_view::npos);
  EXPECT_EQ(ErrnoError("mount", "/x", EPERM).code(), absl::StatusCode::kPermissionDenied);
}

TEST(ErrnoError, ComesFromTheFailingCall) {
  absl::StatusOr<std::string> r = ReadFile("/nonexistent/brig-test");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/brig-test"), absl::string_view::npos);
}

TEST(Annotate, KeepsCodeAddsContext) {
  absl::Status s = Annotate(absl::NotFoundError("inner"), "outer");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "outer: inner");
  EXPECT_TRUE(Annotate(absl::OkStatus(), "outer").ok());
}

}  // namespace
}  // namespace brig
