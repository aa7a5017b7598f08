#include "protocol/frame.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace brig::protocol {
namespace {

TEST(Frame, RoundTripsSplitAnywhere) {
  std::vector<Message> sent = {
      {MessageType::kExec, 0, 0, R"({"argv":["true"]})"},
      {MessageType::kOutput, 2, 7, std::string("\0\0\0\0\0\0\0\0bytes\xff", 14)},
      {MessageType::kCloseStdin, 0, 4294967295u, ""},
  };
  std::string stream;
  for (const Message& m : sent) stream += Encode(m);
  for (size_t split = 0; split <= stream.size(); ++split) {
    FrameDecoder d;
    ASSERT_TRUE(d.Feed(absl::string_view(stream).substr(0, split)).ok());
    ASSERT_TRUE(d.Feed(absl::string_view(stream).substr(split)).ok());
    for (const Message& want : sent) {
      std::optional<Message> got = d.Next();
      ASSERT_TRUE(got.has_value()) << split;
      EXPECT_EQ(got->type, want.type);
      EXPECT_EQ(got->flags, want.flags);
      EXPECT_EQ(got->channel, want.channel);
      EXPECT_EQ(got->payload, want.payload);
    }
    EXPECT_FALSE(d.Next().has_value());
  }
}

TEST(Frame, HeaderIsLittleEndianAndSixteenBytes) {
  std::string bytes = Encode({MessageType::kSignal, 0x0102, 0x03040506, "{}"});
  ASSERT_EQ(bytes.size(), kHeaderSize + 2);
  EXPECT_EQ(bytes.substr(0, 16),
            std::string("\x02\0\0\0\x05\0\x02\x01\x06\x05\x04\x03\0\0\0\0", 16));
}

TEST(Frame, RejectsHostileHeadersForGood) {
  struct Case {
    std::string bytes;
    const char* why;
  };
  std::string too_long = Encode({MessageType::kOutput, 0, 1, ""});
  too_long[0] = too_long[1] = too_long[2] = too_long[3] = '\xff';
  std::string unknown = Encode({MessageType::kHello, 0, 0, ""});
  unknown[4] = '\x63';  // type 99
  std::string reserved = Encode({MessageType::kHello, 0, 0, ""});
  reserved[15] = 1;
  for (const Case& c :
       {Case{too_long, "length"}, Case{unknown, "type"}, Case{reserved, "reserved"}}) {
    FrameDecoder d;
    EXPECT_FALSE(d.Feed(c.bytes).ok()) << c.why;
    EXPECT_TRUE(d.failed());
    EXPECT_FALSE(d.Feed(Encode({MessageType::kHello, 0, 0, ""})).ok()) << "stays failed";
    EXPECT_FALSE(d.Next().has_value());
  }
}

TEST(Frame, RandomBytesNeverCrashOrOverAllocate) {
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    FrameDecoder d;
    std::string noise(rng() % 256, '\0');
    for (char& ch : noise) ch = static_cast<char>(rng());
    (void)d.Feed(noise);
    while (d.Next()) {
    }
  }
  // A frame announcing the maximum payload is accepted and waits for its bytes.
  std::string header = Encode({MessageType::kStdin, 0, 1, ""});
  uint32_t max = kMaxPayload;
  std::memcpy(header.data(), &max, 4);
  FrameDecoder d;
  EXPECT_TRUE(d.Feed(header).ok());
  EXPECT_FALSE(d.Next().has_value());
}

}  // namespace
}  // namespace brig::protocol
