#include "protocol/frame.h"

#include <cstring>

namespace brig::protocol {
namespace {

void PutLe(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t GetLe(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

bool IsKnownType(uint16_t type) {
  return (type >= 1 && type <= 14) || (type >= 100 && type <= 111);
}

std::string OutputPayload(uint64_t offset, absl::string_view bytes) {
  std::string payload;
  payload.reserve(8 + bytes.size());
  PutLe(payload, offset, 8);
  payload.append(bytes.data(), bytes.size());
  return payload;
}

uint64_t OutputOffset(const Message& output) {
  return output.payload.size() < 8 ? 0 : GetLe(output.payload.data(), 8);
}

absl::string_view OutputBytes(const Message& output) {
  return output.payload.size() < 8 ? absl::string_view()
                                   : absl::string_view(output.payload).substr(8);
}

std::string Encode(const Message& message) {
  std::string out;
  out.reserve(kHeaderSize + message.payload.size());
  PutLe(out, message.payload.size(), 4);
  PutLe(out, static_cast<uint16_t>(message.type), 2);
  PutLe(out, message.flags, 2);
  PutLe(out, message.channel, 4);
  PutLe(out, 0, 4);
  out += message.payload;
  return out;
}

absl::Status FrameDecoder::Feed(absl::string_view bytes) {
  if (!status_.ok()) return status_;
  buffer_.append(bytes.data(), bytes.size());
  status_ = ParseAvailable();
  if (!status_.ok()) buffer_.clear();
  return status_;
}

absl::Status FrameDecoder::ParseAvailable() {
  size_t pos = 0;
  while (buffer_.size() - pos >= kHeaderSize) {
    const char* h = buffer_.data() + pos;
    auto length = static_cast<uint32_t>(GetLe(h, 4));
    auto type = static_cast<uint16_t>(GetLe(h + 4, 2));
    if (length > kMaxPayload) {
      return absl::InvalidArgumentError(
          absl::StrCat("frame of ", length, " bytes exceeds the limit"));
    }
    if (!IsKnownType(type))
      return absl::InvalidArgumentError(absl::StrCat("unknown frame type ", type));
    if (GetLe(h + 12, 4) != 0) return absl::InvalidArgumentError("reserved header field is not 0");
    if (buffer_.size() - pos - kHeaderSize < length) break;
    Message m;
    m.type = static_cast<MessageType>(type);
    m.flags = static_cast<uint16_t>(GetLe(h + 6, 2));
    m.channel = static_cast<uint32_t>(GetLe(h + 8, 4));
    m.payload.assign(h + kHeaderSize, length);
    ready_.push_back(std::move(m));
    pos += kHeaderSize + length;
  }
  buffer_.erase(0, pos);
  return absl::OkStatus();
}

std::optional<Message> FrameDecoder::Next() {
  if (ready_.empty()) return std::nullopt;
  Message m = std::move(ready_.front());
  ready_.pop_front();
  return m;
}

}  // namespace brig::protocol
