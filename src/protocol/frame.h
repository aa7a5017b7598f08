// The agent protocol's framing: how the daemon and a sandbox's agent (its PID 1) exchange
// messages over one byte stream, a unix socket today and virtio-serial or vsock for the microvm
// tier later (nothing here depends on the transport). docs/agent-protocol.md is the reference.
//
// A message is a 16-byte little-endian header, then `length` bytes of payload:
//   u32 length   payload size, at most kMaxPayload
//   u16 type     MessageType
//   u16 flags    per type (kOutput: which stream)
//   u32 channel  the process a message is about (0: none)
//   u32 reserved must be 0
// Control payloads are JSON objects; data payloads (stdin, output) are raw bytes.
//
// FrameDecoder treats its input as hostile (the agent runs inside the sandbox): any malformed
// header poisons the decoder and every later call fails; no input makes it allocate more than
// one maximal payload. Not thread-safe; one decoder per connection.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "base/status.h"

namespace brig::protocol {

inline constexpr size_t kHeaderSize = 16;
inline constexpr uint32_t kMaxPayload = 1u << 20;

enum class MessageType : uint16_t {
  // daemon -> agent
  kHello = 1,       // {"version": 1}
  kExec = 2,        // {"argv": [...], "env": [...], "cwd": "", "user": "user"|"root", "tag": "",
                    //  "stdin": false, "pty": {"rows": N, "cols": N} (optional),
                    //  "timeout_ms": N (optional: then its process group is killed)}
  kStdin = 3,       // channel: process; payload: bytes
  kCloseStdin = 4,  // channel: process
  kSignal = 5,      // channel: process; {"signal": N}
  kAttach = 6,      // channel: process; {"offset": N, "follow": true}: replay output from byte
                    // N, then follow (or, with "follow": false, answer kCaughtUp)
  kList = 7,        // {}
  kResize = 8,      // channel: process with a terminal; {"rows": N, "cols": N}
  // Files (docs/agent-protocol.md, "Files"); each on channel 0, one at a time per connection.
  kFileOp = 9,       // {"op": "stat"|"list"|"mkdir"|"move"|"remove", "path", "user", ...}
  kFileRead = 10,    // {"path", "user"} -> kFileData..., kFileEnd
  kFileWrite = 11,   // {"path", "user", "mode"}; then kFileChunk..., kFileCommit -> kFileResult
  kFileChunk = 12,   // payload: bytes of the file being written
  kFileCommit = 13,  // {}: the file is complete; rename it into place
  kWatch = 14,       // {"path", "user", "recursive"} -> kWatchEvent...
  // agent -> daemon
  kHelloReply = 100,   // {"version": 1, "pid": N}
  kStarted = 101,      // channel: process; {"pid": N, "tag": ""}
  kOutput = 102,       // channel: process; flags: 1 stdout, 2 stderr; payload: u64 offset + bytes
  kExited = 103,       // channel: process; {"exit_code": N} or {"signal": N}, "timed_out"
  kError = 104,        // channel: the request's; {"code": http-like status, "message": ""}
  kProcessList = 105,  // {"processes": [{"channel", "pid", "argv", "running", "tag"}]}
  kTruncated = 106,    // channel: process; {"from": N, "to": M}: bytes N..M left the ring
  kCaughtUp = 107,     // channel: process; {"offset": N}: an attach without follow replayed all
  kFileResult = 108,   // the answer of kFileOp / kFileCommit: an entry, or {"entries": [...]}
  kFileData = 109,     // payload: the next bytes of the file being read
  kFileEnd = 110,      // {"size": N}: the file being read is complete
  kWatchEvent = 111,   // {"type": "watching"|"create"|"write"|"remove"|"rename"|"chmod", ...}
};

struct Message {
  MessageType type = MessageType::kHello;
  uint16_t flags = 0;
  uint32_t channel = 0;
  std::string payload;
};

// Header + payload, ready to write. The payload must not exceed kMaxPayload.
std::string Encode(const Message& message);

class FrameDecoder {
 public:
  // Appends bytes from the stream. Returns an error (and stays failed) on a malformed header.
  absl::Status Feed(absl::string_view bytes);
  // The next complete message, if any.
  std::optional<Message> Next();
  bool failed() const { return !status_.ok(); }

 private:
  absl::Status ParseAvailable();
  std::string buffer_;
  std::deque<Message> ready_;
  absl::Status status_;
};

bool IsKnownType(uint16_t type);

// An `output` message's payload: its first byte's offset (8 bytes, little-endian), then bytes.
std::string OutputPayload(uint64_t offset, absl::string_view bytes);
uint64_t OutputOffset(const Message& output);
absl::string_view OutputBytes(const Message& output);

}  // namespace brig::protocol
