#include "server/gzip.h"

#include <vector>

namespace brig::server {
namespace {

constexpr int kGzipWindow = 15 + 16;  // zlib's "gzip wrapper" window bits
constexpr size_t kBuffer = 64u << 10;

struct Inflater {
  explicit Inflater(ByteSource source) : source(std::move(source)), in(kBuffer) {
    ok = inflateInit2(&z, kGzipWindow) == Z_OK;
  }
  ~Inflater() { inflateEnd(&z); }

  absl::StatusOr<size_t> Read(char* out, size_t size) {
    if (!ok) return absl::InternalError("gzip: cannot initialise zlib");
    z.next_out = reinterpret_cast<Bytef*>(out);
    z.avail_out = static_cast<uInt>(size);
    while (z.avail_out == size && !done) {
      if (z.avail_in == 0) {
        BRIG_ASSIGN_OR_RETURN(size_t n, source(in.data(), in.size()));
        if (n == 0) return absl::InvalidArgumentError("gzip: the body ends mid-stream");
        z.next_in = reinterpret_cast<Bytef*>(in.data());
        z.avail_in = static_cast<uInt>(n);
      }
      int rc = inflate(&z, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {
        done = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        return absl::InvalidArgumentError(
            absl::StrCat("gzip: the body is not valid gzip (", z.msg ? z.msg : "", ")"));
      }
    }
    return size - z.avail_out;
  }

  ByteSource source;
  std::vector<char> in;
  z_stream z = {};
  bool ok = false, done = false;
};

}  // namespace

ByteSource GunzipSource(ByteSource compressed) {
  auto inflater = std::make_shared<Inflater>(std::move(compressed));
  return [inflater](char* out, size_t size) { return inflater->Read(out, size); };
}

GzipWriter::GzipWriter(std::function<bool(absl::string_view)> sink) : sink_(std::move(sink)) {
  deflateInit2(&z_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, kGzipWindow, 8, Z_DEFAULT_STRATEGY);
}

GzipWriter::~GzipWriter() { deflateEnd(&z_); }

bool GzipWriter::Deflate(absl::string_view bytes, int flush) {
  z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  z_.avail_in = static_cast<uInt>(bytes.size());
  char out[kBuffer];
  do {
    z_.next_out = reinterpret_cast<Bytef*>(out);
    z_.avail_out = sizeof out;
    deflate(&z_, flush);
    size_t produced = sizeof out - z_.avail_out;
    if (produced > 0 && !sink_(absl::string_view(out, produced))) return false;
  } while (z_.avail_out == 0 || (flush == Z_FINISH && z_.avail_in > 0));
  return true;
}

bool GzipWriter::Write(absl::string_view bytes) {
  return bytes.empty() || Deflate(bytes, Z_NO_FLUSH);
}

bool GzipWriter::Finish() { return Deflate({}, Z_FINISH); }

}  // namespace brig::server
