#include "engine/spec.h"

#include <sys/random.h>

#include <algorithm>

#include "absl/strings/match.h"

namespace brig {

UserIdentity IdentityOf(SandboxUser user) {
  if (user == SandboxUser::kRoot) return {0, 0, "root", "/root"};
  return {1000, 1000, "user", "/home/user"};
}

std::string NewSandboxId() {
  static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char random[20];
  size_t got = 0;
  while (got < sizeof random) {
    ssize_t n = ::getrandom(random + got, sizeof random - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string id(20, 'a');
  // 252 is the largest multiple of 36 below 256; rejection keeps the alphabet uniform.
  for (size_t i = 0; i < id.size(); ++i) {
    unsigned char r = random[i];
    while (r >= 252) {
      if (::getrandom(&r, 1, 0) != 1) r = 0;
    }
    id[i] = kAlphabet[r % 36];
  }
  return id;
}

namespace {

bool IsValidId(const std::string& id) {
  return id.size() == 20 && std::all_of(id.begin(), id.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
         });
}

bool IsValidTemplateName(const std::string& name) {
  return !name.empty() && name.size() <= 64 && name[0] != '.' &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                  c == '.';
         });
}

}  // namespace

absl::Status Validate(const SandboxSpec& sandbox, const ProcessSpec& process) {
  BRIG_RETURN_IF_ERROR(Validate(sandbox));
  return Validate(process);
}

absl::Status Validate(const SandboxSpec& sandbox) {
  if (!sandbox.id.empty() && !IsValidId(sandbox.id)) {
    return absl::InvalidArgumentError("sandbox id must be 20 characters of [a-z0-9]");
  }
  if (!IsValidTemplateName(sandbox.template_name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid template name \"", sandbox.template_name, "\""));
  }
  const Limits& l = sandbox.limits;
  if (l.memory_bytes != 0 && l.memory_bytes < (8ull << 20)) {
    return absl::InvalidArgumentError("memory limit must be at least 8M");
  }
  if (l.cpus < 0 || l.cpus > 1024) return absl::InvalidArgumentError("cpus must be in [0, 1024]");
  if (l.cpus > 0 && l.cpus < 0.01) return absl::InvalidArgumentError("cpus must be at least 0.01");
  // PID 1 and the command count: fewer than 2 cannot start anything.
  if (l.pids < 2 || l.pids > 4'194'304) {
    return absl::InvalidArgumentError("pids must be in [2, 4194304]");
  }
  if (l.disk_bytes < (1ull << 20)) return absl::InvalidArgumentError("disk must be at least 1M");
  if (l.open_files < 16) return absl::InvalidArgumentError("open files must be at least 16");
  if (sandbox.timeout && sandbox.timeout->count() <= 0) {
    return absl::InvalidArgumentError("timeout must be positive");
  }
  return absl::OkStatus();
}

absl::Status Validate(const ProcessSpec& process) {
  if (process.argv.empty() || process.argv[0].empty()) {
    return absl::InvalidArgumentError("no command given");
  }
  for (const std::string& arg : process.argv) {
    if (arg.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError("command arguments cannot contain NUL bytes");
    }
  }
  for (const std::string& kv : process.env) {
    size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0 || kv.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment entry \"", kv, "\" must look like NAME=VALUE"));
    }
  }
  if (!process.workdir.empty() && process.workdir[0] != '/') {
    return absl::InvalidArgumentError("workdir must be an absolute path");
  }
  return absl::OkStatus();
}

std::vector<std::string> BuildEnvironment(const ProcessSpec& process, const std::string& hostname) {
  UserIdentity who = IdentityOf(process.user);
  std::vector<std::string> env = {
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      absl::StrCat("HOME=", who.home),
      absl::StrCat("USER=", who.name),
      absl::StrCat("LOGNAME=", who.name),
      "SHELL=/bin/bash",
      "LANG=C.UTF-8",
      absl::StrCat("HOSTNAME=", hostname),
  };
  for (const std::string& kv : process.env) {
    absl::string_view name = absl::string_view(kv).substr(0, kv.find('=') + 1);
    std::erase_if(env, [&](const std::string& e) { return absl::StartsWith(e, name); });
    env.push_back(kv);
  }
  return env;
}

}  // namespace brig
