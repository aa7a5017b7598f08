// Streaming gzip (zlib) for file transfers: decompress an upload as it is read, compress a
// download as it is written. Nothing is held beyond zlib's window and one buffer.
//
// Not thread-safe; one per transfer.
#pragma once

#include <zlib.h>

#include <functional>
#include <memory>
#include <string>

#include "base/status.h"
#include "server/files.h"

namespace brig::server {

// A ByteSource of the decompressed bytes of a gzip-compressed `compressed` source.
ByteSource GunzipSource(ByteSource compressed);

// Compresses what is written to it into gzip, handing the compressed bytes to `sink`.
class GzipWriter {
 public:
  explicit GzipWriter(std::function<bool(absl::string_view)> sink);
  ~GzipWriter();
  GzipWriter(const GzipWriter&) = delete;
  GzipWriter& operator=(const GzipWriter&) = delete;

  bool Write(absl::string_view bytes);  // false: the sink refused
  bool Finish();

 private:
  bool Deflate(absl::string_view bytes, int flush);
  z_stream z_ = {};
  std::function<bool(absl::string_view)> sink_;
};

}  // namespace brig::server
