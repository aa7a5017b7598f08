// The daemon's durable state: one SQLite database (<state dir>/brig.db, WAL) holding every
// sandbox record and a few settings (the API key's hash). The daemon keeps its working copy in
// memory and writes each change through before answering, so that a restarted daemon knows
// every sandbox that was ever live.
//
// Thread-safety: all methods may be called from any thread (one connection behind a mutex).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "server/record.h"

struct sqlite3;

namespace brig::server {

class Store {
 public:
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Inserts or replaces the record with this id.
  absl::Status Put(const SandboxRecord& record);
  absl::Status Delete(const std::string& id);
  absl::StatusOr<std::vector<SandboxRecord>> LoadAll();

  absl::StatusOr<std::optional<std::string>> GetSetting(const std::string& key);
  absl::Status PutSetting(const std::string& key, const std::string& value);

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  // Runs one statement with text parameters; `row` (if given) receives each result row.
  absl::Status Exec(const char* sql, const std::vector<std::string>& params,
                    const std::function<void(const std::vector<std::string>&)>& row = {});

  std::mutex mu_;
  sqlite3* db_;
};

}  // namespace brig::server
