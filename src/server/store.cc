#include "server/store.h"

#include <sqlite3.h>

#include "nlohmann/json.hpp"

namespace brig::server {
namespace {

using Json = nlohmann::json;

constexpr const char* kSchema = R"sql(
  PRAGMA journal_mode = WAL;
  PRAGMA synchronous = NORMAL;
  CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
  CREATE TABLE IF NOT EXISTS sandboxes (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    body TEXT NOT NULL  -- the record as JSON (ToJson below)
  );
)sql";

Json ToJson(const SandboxRecord& r) {
  return {{"id", r.id},
          {"name", r.name},
          {"template", r.template_name},
          {"state", StateName(r.state)},
          {"reason", r.reason},
          {"cpus", r.cpus},
          {"memory_mb", r.memory_mb},
          {"disk_mb", r.disk_mb},
          {"pids", r.pids},
          {"env", r.env},
          {"metadata", r.metadata},
          {"created_ms", r.created_ms},
          {"expires_ms", r.expires_ms},
          {"remaining_ms", r.remaining_ms},
          {"ended_ms", r.ended_ms},
          {"init_pid", r.init_pid}};
}

absl::StatusOr<SandboxRecord> FromJson(const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::DataLossError("a sandbox row is not a JSON object");
  SandboxRecord r;
  try {
    r.id = j.at("id").get<std::string>();
    r.name = j.at("name").get<std::string>();
    r.template_name = j.at("template").get<std::string>();
    std::optional<SandboxState> state = ParseState(j.at("state").get<std::string>());
    if (!state) return absl::DataLossError("a sandbox row has an unknown state");
    r.state = *state;
    r.reason = j.at("reason").get<std::string>();
    r.cpus = j.at("cpus").get<double>();
    r.memory_mb = j.at("memory_mb").get<uint64_t>();
    r.disk_mb = j.at("disk_mb").get<uint64_t>();
    r.pids = j.at("pids").get<uint32_t>();
    r.env = j.at("env").get<StringMap>();
    r.metadata = j.at("metadata").get<StringMap>();
    r.created_ms = j.at("created_ms").get<int64_t>();
    r.expires_ms = j.at("expires_ms").get<int64_t>();
    r.remaining_ms = j.at("remaining_ms").get<int64_t>();
    r.ended_ms = j.at("ended_ms").get<int64_t>();
    r.init_pid = j.at("init_pid").get<pid_t>();
  } catch (const Json::exception& e) {
    return absl::DataLossError(absl::StrCat("a sandbox row is malformed: ", e.what()));
  }
  return r;
}

absl::Status SqliteError(sqlite3* db, absl::string_view what) {
  return absl::InternalError(absl::StrCat("sqlite ", what, ": ", sqlite3_errmsg(db)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  std::unique_ptr<Store> store(new Store(db));  // closes db on every path
  if (rc != SQLITE_OK) return SqliteError(db, absl::StrCat("open ", path));
  sqlite3_busy_timeout(db, 5000);
  char* error = nullptr;
  if (sqlite3_exec(db, kSchema, nullptr, nullptr, &error) != SQLITE_OK) {
    std::string message = error ? error : "unknown error";
    sqlite3_free(error);
    return absl::InternalError(absl::StrCat("sqlite schema of ", path, ": ", message));
  }
  return store;
}

Store::~Store() { sqlite3_close_v2(db_); }

absl::Status Store::Exec(const char* sql, const std::vector<std::string>& params,
                         const std::function<void(const std::vector<std::string>&)>& row) {
  std::lock_guard<std::mutex> lock(mu_);
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db_, sql, -1, &raw, nullptr) != SQLITE_OK) {
    return SqliteError(db_, "prepare");
  }
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> stmt(raw, sqlite3_finalize);
  for (size_t i = 0; i < params.size(); ++i) {
    sqlite3_bind_text(raw, static_cast<int>(i + 1), params[i].data(),
                      static_cast<int>(params[i].size()), SQLITE_STATIC);
  }
  for (;;) {
    int rc = sqlite3_step(raw);
    if (rc == SQLITE_DONE) return absl::OkStatus();
    if (rc != SQLITE_ROW) return SqliteError(db_, "step");
    std::vector<std::string> values;
    for (int c = 0; c < sqlite3_column_count(raw); ++c) {
      const unsigned char* text = sqlite3_column_text(raw, c);
      values.emplace_back(text ? reinterpret_cast<const char*>(text) : "");
    }
    if (row) row(values);
  }
}

absl::Status Store::Put(const SandboxRecord& record) {
  return Exec("INSERT OR REPLACE INTO sandboxes (id, state, body) VALUES (?1, ?2, ?3)",
              {record.id, std::string(StateName(record.state)), ToJson(record).dump()});
}

absl::Status Store::Delete(const std::string& id) {
  return Exec("DELETE FROM sandboxes WHERE id = ?1", {id});
}

absl::StatusOr<std::vector<SandboxRecord>> Store::LoadAll() {
  std::vector<std::string> bodies;
  BRIG_RETURN_IF_ERROR(
      Exec("SELECT body FROM sandboxes", {},
           [&](const std::vector<std::string>& row) { bodies.push_back(row[0]); }));
  std::vector<SandboxRecord> records;
  for (const std::string& body : bodies) {
    BRIG_ASSIGN_OR_RETURN(SandboxRecord record, FromJson(body));
    records.push_back(std::move(record));
  }
  return records;
}

absl::StatusOr<std::optional<std::string>> Store::GetSetting(const std::string& key) {
  std::optional<std::string> value;
  BRIG_RETURN_IF_ERROR(Exec("SELECT value FROM settings WHERE key = ?1", {key},
                            [&](const std::vector<std::string>& row) { value = row[0]; }));
  return value;
}

absl::Status Store::PutSetting(const std::string& key, const std::string& value) {
  return Exec("INSERT OR REPLACE INTO settings (key, value) VALUES (?1, ?2)", {key, value});
}

}  // namespace brig::server
