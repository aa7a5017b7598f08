// The daemon's store and API key, against a real SQLite file in a temporary directory.
#include "server/store.h"

#include <sys/stat.h>

#include "absl/strings/ascii.h"
#include "base/files.h"
#include "gtest/gtest.h"
#include "server/api_key.h"
#include "support/process.h"

namespace brig::server {
namespace {

SandboxRecord Sample(const std::string& id) {
  SandboxRecord r;
  r.id = id;
  r.name = "agent-" + id;
  r.state = SandboxState::kPaused;
  r.reason = "because";
  r.cpus = 1.5;
  r.memory_mb = 256;
  r.disk_mb = 2048;
  r.pids = 99;
  r.env = {{"A", "1"}, {"B", "two words"}};
  r.metadata = {{"team", "x"}, {"unicode", "\xc3\xa9"}};
  r.created_ms = 1700000000123;
  r.expires_ms = 0;
  r.remaining_ms = 4567;
  r.ended_ms = 0;
  r.init_pid = 4242;
  return r;
}

void ExpectSame(const SandboxRecord& a, const SandboxRecord& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.template_name, b.template_name);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.reason, b.reason);
  EXPECT_EQ(a.cpus, b.cpus);
  EXPECT_EQ(a.memory_mb, b.memory_mb);
  EXPECT_EQ(a.disk_mb, b.disk_mb);
  EXPECT_EQ(a.pids, b.pids);
  EXPECT_EQ(a.env, b.env);
  EXPECT_EQ(a.metadata, b.metadata);
  EXPECT_EQ(a.created_ms, b.created_ms);
  EXPECT_EQ(a.expires_ms, b.expires_ms);
  EXPECT_EQ(a.remaining_ms, b.remaining_ms);
  EXPECT_EQ(a.ended_ms, b.ended_ms);
  EXPECT_EQ(a.init_pid, b.init_pid);
}

TEST(StoreTest, RecordsSurviveReopening) {
  brig::testing::TempDir dir;
  const std::string path = dir.path() + "/brig.db";
  {
    auto store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->Put(Sample("a")).ok());
    ASSERT_TRUE((*store)->Put(Sample("b")).ok());
    SandboxRecord changed = Sample("a");
    changed.state = SandboxState::kStopped;
    ASSERT_TRUE((*store)->Put(changed).ok());  // replaces, does not duplicate
    ASSERT_TRUE((*store)->Delete("b").ok());
  }
  auto store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto records = (*store)->LoadAll();
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 1u);
  SandboxRecord want = Sample("a");
  want.state = SandboxState::kStopped;
  ExpectSame((*records)[0], want);
}

TEST(StoreTest, SettingsRoundTrip) {
  brig::testing::TempDir dir;
  auto store = Store::Open(dir.path() + "/brig.db");
  ASSERT_TRUE(store.ok());
  auto missing = (*store)->GetSetting("k");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  ASSERT_TRUE((*store)->PutSetting("k", "v1").ok());
  ASSERT_TRUE((*store)->PutSetting("k", "v2").ok());
  EXPECT_EQ((*store)->GetSetting("k")->value_or(""), "v2");
}

TEST(StoreTest, RefusesAPathItCannotCreate) {
  auto store = Store::Open("/nonexistent-dir-for-brig/brig.db");
  EXPECT_FALSE(store.ok());
}

TEST(ApiKeyTest, FirstStartWritesTheKeyAndStoresOnlyItsHash) {
  brig::testing::TempDir dir;
  const std::string db = dir.path() + "/brig.db", key_file = dir.path() + "/api-key";
  std::string key;
  {
    auto store = Store::Open(db);
    ASSERT_TRUE(store.ok());
    bool created = false;
    auto api_key = ApiKey::LoadOrCreate(**store, key_file, &created);
    ASSERT_TRUE(api_key.ok()) << api_key.status();
    EXPECT_TRUE(created);
    struct stat st;
    ASSERT_EQ(::stat(key_file.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    key = std::string(absl::StripAsciiWhitespace(*ReadFile(key_file)));
    EXPECT_GE(key.size(), 40u);
    EXPECT_TRUE(api_key->Matches(key));
    EXPECT_FALSE(api_key->Matches(key + "x"));
    EXPECT_FALSE(api_key->Matches(""));
    EXPECT_FALSE(api_key->Matches(key.substr(1)));
  }
  // The database holds the hash, never the key.
  auto bytes = ReadFile(db);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->find(key), std::string::npos);

  // A restart loads the hash; the key file is not rewritten.
  auto store = Store::Open(db);
  ASSERT_TRUE(store.ok());
  bool created = true;
  ASSERT_TRUE(::unlink(key_file.c_str()) == 0);
  auto again = ApiKey::LoadOrCreate(**store, key_file, &created);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(created);
  EXPECT_TRUE(again->Matches(key));
  EXPECT_FALSE(ReadFile(key_file).ok());
}

TEST(ApiKeyTest, AdoptsAKeyFileWhenTheDatabaseIsNew) {
  brig::testing::TempDir dir;
  const std::string key_file = dir.path() + "/api-key";
  ASSERT_TRUE(WriteFileAtomic(key_file, "brig_chosen_by_the_operator\n", 0600).ok());
  auto store = Store::Open(dir.path() + "/brig.db");
  ASSERT_TRUE(store.ok());
  bool created = true;
  auto api_key = ApiKey::LoadOrCreate(**store, key_file, &created);
  ASSERT_TRUE(api_key.ok());
  EXPECT_FALSE(created);
  EXPECT_TRUE(api_key->Matches("brig_chosen_by_the_operator"));
}

}  // namespace
}  // namespace brig::server
