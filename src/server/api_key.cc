#include "server/api_key.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "base/files.h"

namespace brig::server {
namespace {

constexpr char kHashSetting[] = "api_key_sha256";
constexpr char kKeyPrefix[] = "brig_";

std::string Sha256Hex(absl::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(data.data(), data.size(), digest, &size, EVP_sha256(), nullptr);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), size));
}

absl::StatusOr<std::string> NewKey() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    return absl::InternalError("RAND_bytes: no randomness for the API key");
  }
  return absl::StrCat(kKeyPrefix, absl::BytesToHexString(absl::string_view(
                                      reinterpret_cast<const char*>(bytes), sizeof bytes)));
}

}  // namespace

absl::StatusOr<ApiKey> ApiKey::LoadOrCreate(Store& store, const std::string& key_file,
                                            bool* created) {
  *created = false;
  BRIG_ASSIGN_OR_RETURN(std::optional<std::string> hash, store.GetSetting(kHashSetting));
  if (hash) return ApiKey(*hash);
  std::string key;
  if (absl::StatusOr<std::string> existing = ReadFile(key_file); existing.ok()) {
    key = std::string(absl::StripAsciiWhitespace(*existing));
  }
  if (key.empty()) {
    BRIG_ASSIGN_OR_RETURN(key, NewKey());
    BRIG_RETURN_IF_ERROR(WriteFileAtomic(key_file, key + "\n", 0600));
    *created = true;
  }
  std::string sha = Sha256Hex(key);
  BRIG_RETURN_IF_ERROR(store.PutSetting(kHashSetting, sha));
  return ApiKey(sha);
}

bool ApiKey::Matches(absl::string_view presented) const {
  std::string sha = Sha256Hex(presented);
  return sha.size() == sha256_.size() && CRYPTO_memcmp(sha.data(), sha256_.data(), sha.size()) == 0;
}

}  // namespace brig::server
