// The agent protocol's decoder reads bytes written by a sandbox's agent: hostile input.
// Invariants: no crash, no unbounded memory; whatever decodes re-encodes to the same bytes, and
// splitting the input anywhere decodes the same messages.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "protocol/frame.h"

using brig::protocol::FrameDecoder;
using brig::protocol::Message;

namespace {

std::vector<Message> DecodeAll(FrameDecoder& d) {
  std::vector<Message> out;
  while (std::optional<Message> m = d.Next()) out.push_back(std::move(*m));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view input(reinterpret_cast<const char*>(data), size);
  FrameDecoder whole;
  bool ok = whole.Feed(input).ok();
  std::vector<Message> a = DecodeAll(whole);

  FrameDecoder split;
  size_t cut = size == 0 ? 0 : data[0] % (size + 1);
  bool split_ok = split.Feed(input.substr(0, cut)).ok();
  if (split_ok) split_ok = split.Feed(input.substr(cut)).ok();
  std::vector<Message> b = DecodeAll(split);
  if (ok != split_ok) std::abort();
  if (ok) {
    // With no error, every decoded message re-encodes to the bytes it came from.
    std::string again;
    for (const Message& m : a) again += brig::protocol::Encode(m);
    if (input.substr(0, again.size()) != again) std::abort();
    if (a.size() != b.size()) std::abort();
  }
  return 0;
}
