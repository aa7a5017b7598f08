// The daemon's API key. Only its SHA-256 hash is kept (in the store); the key itself is
// written once, to <state dir>/api-key (0600, root's), for local clients and the operator.
//
// Thread-safety: immutable after LoadOrCreate; Matches may be called from any thread.
#pragma once

#include <string>

#include "base/status.h"
#include "server/store.h"

namespace brig::server {

class ApiKey {
 public:
  // The key's hash from the store. On first start (no hash stored) it adopts a key already in
  // `key_file`, or makes a new random one and writes it there; `*created` says whether a new key
  // was made.
  static absl::StatusOr<ApiKey> LoadOrCreate(Store& store, const std::string& key_file,
                                             bool* created);

  // Compares in constant time.
  bool Matches(absl::string_view presented) const;

 private:
  explicit ApiKey(std::string sha256) : sha256_(std::move(sha256)) {}
  std::string sha256_;  // hex
};

}  // namespace brig::server
