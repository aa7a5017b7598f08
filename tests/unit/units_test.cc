#include "cli/units.h"

#include <gtest/gtest.h>

namespace brig {
namespace {

TEST(ParseSize, AcceptsBinaryUnits) {
  EXPECT_EQ(*ParseSize("4096"), 4096u);
  EXPECT_EQ(*ParseSize("512M"), 512ull << 20);
  EXPECT_EQ(*ParseSize("512m"), 512ull << 20);
  EXPECT_EQ(*ParseSize("1G"), 1ull << 30);
  EXPECT_EQ(*ParseSize("1GiB"), 1ull << 30);
  EXPECT_EQ(*ParseSize("1.5G"), 3ull << 29);
  EXPECT_EQ(*ParseSize("64k"), 64ull << 10);
}

TEST(ParseSize, RejectsGarbage) {
  for (const char* bad : {"", "M", "-1G", "1Q", "1..5G", "abc", "1e3"}) {
    absl::StatusOr<uint64_t> r = ParseSize(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    }
  }
  EXPECT_FALSE(ParseSize("99999999999T").ok());
}

TEST(ParseDuration, AcceptsUnits) {
  EXPECT_EQ(ParseDuration("30")->count(), 30000);
  EXPECT_EQ(ParseDuration("30s")->count(), 30000);
  EXPECT_EQ(ParseDuration("250ms")->count(), 250);
  EXPECT_EQ(ParseDuration("1.5s")->count(), 1500);
  EXPECT_EQ(ParseDuration("2m")->count(), 120000);
  EXPECT_EQ(ParseDuration("1h")->count(), 3600000);
}

TEST(ParseDuration, RejectsGarbage) {
  for (const char* bad : {"", "s", "-3s", "3x", "3 s", "1e9h"}) {
    EXPECT_FALSE(ParseDuration(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace brig
