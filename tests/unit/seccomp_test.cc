#include "engine/seccomp.h"

#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/filter.h>

namespace brig {
namespace {

TEST(SeccompProgram, EmbeddedProgramIsTheCompiledPolicy) {
  absl::StatusOr<std::vector<sock_filter>> fresh = CompileSandboxFilter();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  absl::Span<const sock_filter> embedded = SandboxFilter();
  ASSERT_EQ(embedded.size(), fresh->size());
  for (size_t i = 0; i < embedded.size(); ++i) {
    EXPECT_EQ(embedded[i].code, (*fresh)[i].code) << i;
    EXPECT_EQ(embedded[i].jt, (*fresh)[i].jt) << i;
    EXPECT_EQ(embedded[i].jf, (*fresh)[i].jf) << i;
    EXPECT_EQ(embedded[i].k, (*fresh)[i].k) << i;
  }
}

TEST(SeccompProgram, ChecksTheArchitectureFirst) {
  absl::Span<const sock_filter> p = SandboxFilter();
  ASSERT_GE(p.size(), 3u);
  // Load seccomp_data.arch, compare with the native architecture.
  EXPECT_EQ(p[0].code, BPF_LD | BPF_W | BPF_ABS);
  EXPECT_EQ(p[0].k, 4u);
  EXPECT_EQ(p[1].k, static_cast<uint32_t>(AUDIT_ARCH_X86_64));
}

}  // namespace
}  // namespace brig
