// `brig serve`: the daemon. Opens the engine and the store, takes over the sandboxes a previous
// daemon left running, and serves the HTTP API until SIGINT/SIGTERM. Stopping never stops a
// sandbox: they run on and the next daemon adopts them.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>

#include <cstdio>

#include "base/files.h"
#include "base/unique_fd.h"
#include "cli/commands.h"
#include "engine/sandbox.h"
#include "server/api.h"
#include "server/api_key.h"
#include "server/http_server.h"
#include "server/sandboxes.h"
#include "server/store.h"

namespace brig {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "brig serve: %s\n", std::string(status.message()).c_str());
  return kExitBrigError;
}

// One daemon per state directory.
absl::StatusOr<UniqueFd> LockStateDir(const std::string& state_dir) {
  const std::string path = state_dir + "/serve.lock";
  BRIG_ASSIGN_OR_RETURN(UniqueFd lock, OpenFd(path, O_RDWR | O_CREAT, 0600));
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("another brig serve already uses ", state_dir, " (", path, " is locked)"));
  }
  return lock;
}

}  // namespace

int ServeCommand(const ServeFlags& flags) {
  // Signals are taken with sigwait below; every thread started from here inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop_signals, sig);
  ::pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  auto engine = Engine::Open(flags.state_dir);
  if (!engine.ok()) return Fail(engine.status());
  auto lock = LockStateDir(flags.state_dir);
  if (!lock.ok()) return Fail(lock.status());
  (void)(*engine)->SweepStale();
  auto store = server::Store::Open(flags.state_dir + "/brig.db");
  if (!store.ok()) return Fail(store.status());
  const std::string key_file = flags.state_dir + "/api-key";
  bool new_key = false;
  auto key = server::ApiKey::LoadOrCreate(**store, key_file, &new_key);
  if (!key.ok()) return Fail(key.status());
  auto sandboxes = server::SandboxManager::Open(**engine, **store);
  if (!sandboxes.ok()) return Fail(sandboxes.status());
  server::Metrics metrics;
  server::Api api(**sandboxes, *key, metrics);
  auto http = server::HttpServer::Start(
      flags.listen,
      [&api](const server::HttpRequest& r, server::Responder& out) { api.Handle(r, out); },
      server::Api::BodyStreams);
  if (!http.ok()) return Fail(http.status());

  const std::string url = absl::StrCat("http://", (*http)->address());
  // Local clients (the CLI) find the daemon through the state dir.
  (void)WriteFileAtomic(flags.state_dir + "/url", url + "\n", 0644);
  std::printf("brig serve: listening on %s\n", url.c_str());
  std::printf("brig serve: API key %s in %s (send it as \"Authorization: Bearer <key>\")\n",
              new_key ? "created" : "is", key_file.c_str());
  std::printf("brig serve: try  curl -H \"Authorization: Bearer $(cat %s)\" %s/v1/sandboxes\n",
              key_file.c_str(), url.c_str());
  std::fflush(stdout);

  int sig = 0;
  ::sigwait(&stop_signals, &sig);
  std::printf("brig serve: %s: stopping; sandboxes keep running\n", strsignal(sig));
  (*http)->Stop();
  (*sandboxes)->Shutdown();
  return 0;
}

}  // namespace brig
