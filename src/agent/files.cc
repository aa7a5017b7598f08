#include "agent/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/fsuid.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>

#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"

namespace brig::agent {
namespace {

// The HTTP-like code travels in the Status's payload.
constexpr char kCodePayload[] = "brig.dev/file-error-code";

absl::Status FileError(int code, absl::string_view call, const std::string& path, int error) {
  absl::Status s = ErrnoError(call, path, error);
  s.SetPayload(kCodePayload, absl::Cord(std::to_string(code)));
  return s;
}

int CodeOfErrno(int error) {
  switch (error) {
    case ENOENT:
      return 404;
    case ENOTDIR:
    case EISDIR:
    case EINVAL:
    case ELOOP:
    case ENAMETOOLONG:
    case EXDEV:
    case ENOTEMPTY:
      return 400;
    case EACCES:
    case EPERM:
    case EROFS:
      return 403;
    case EEXIST:
      return 409;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return 507;
    default:
      return 500;
  }
}

absl::Status Failed(absl::string_view call, const std::string& path, int error = errno) {
  return FileError(CodeOfErrno(error), call, path, error);
}

std::string Permissions(mode_t mode) {
  std::string p = S_ISDIR(mode) ? "d" : S_ISLNK(mode) ? "l" : S_ISREG(mode) ? "-" : "?";
  const char* bits = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) p += (mode & (0400 >> i)) ? bits[i] : '-';
  return p;
}

// The sandbox's own users (its /etc/passwd is brig's): names for the ids brig knows.
std::string NameOf(unsigned id) {
  if (id == 0) return "root";
  if (id == 1000) return "user";
  return std::to_string(id);
}

std::string BaseName(const std::string& path) {
  if (path == "/") return "/";
  return path.substr(path.rfind('/') + 1);
}

std::string Parent(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::Status ListInto(const std::string& dir, int depth, std::vector<Json>& out) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Failed("opendir", dir);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    absl::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(d);
  for (const std::string& name : names) {
    std::string path = dir == "/" ? "/" + name : dir + "/" + name;
    absl::StatusOr<Json> entry = StatEntry(path);
    if (!entry.ok()) continue;  // removed meanwhile
    bool is_dir = (*entry)["type"] == "dir";
    out.push_back(std::move(*entry));
    if (is_dir && depth > 1) (void)ListInto(path, depth - 1, out);
  }
  return absl::OkStatus();
}

absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return Failed("lstat", path);
  if (S_ISDIR(st.st_mode)) {
    DIR* d = ::opendir(path.c_str());
    if (d == nullptr) return Failed("opendir", path);
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      absl::string_view name = e->d_name;
      if (name != "." && name != "..") names.emplace_back(name);
    }
    ::closedir(d);
    for (const std::string& name : names) BRIG_RETURN_IF_ERROR(RemoveTree(path + "/" + name));
    if (::rmdir(path.c_str()) != 0) return Failed("rmdir", path);
    return absl::OkStatus();
  }
  if (::unlink(path.c_str()) != 0) return Failed("unlink", path);
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> OpenNoMagic(const std::string& path, uint64_t flags, mode_t mode) {
  open_how how = {};
  how.flags = flags | O_CLOEXEC;
  how.mode = mode;
  how.resolve = RESOLVE_NO_MAGICLINKS;
  int fd = static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof how));
  if (fd < 0) return Failed("open", path);
  return UniqueFd(fd);
}

}  // namespace

int FileErrorCode(const absl::Status& status) {
  absl::optional<absl::Cord> code = status.GetPayload(kCodePayload);
  int value = 500;
  if (code) (void)absl::SimpleAtoi(std::string(*code), &value);
  return value;
}

AsUser::AsUser(SandboxUser user) {
  UserIdentity id = IdentityOf(user);
  ::setfsgid(id.gid);
  ::setfsuid(id.uid);
}

AsUser::~AsUser() {
  ::setfsuid(0);
  ::setfsgid(0);
}

std::string ResolvePath(const std::string& path, SandboxUser user) {
  const std::string home = IdentityOf(user).home;
  std::string p = path;
  if (p == "~") p = home;
  if (absl::StartsWith(p, "~/")) p = home + p.substr(1);
  if (p.empty() || p[0] != '/') p = home + "/" + p;
  // Normalise "//", "/./" and a trailing "/" (".." is left to the kernel, which stops it at
  // the sandbox's root).
  std::string out;
  for (absl::string_view part : absl::StrSplit(p, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    absl::StrAppend(&out, "/", part);
  }
  return out.empty() ? "/" : out;
}

absl::StatusOr<Json> StatEntry(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return Failed("stat", path);
  const char* type = S_ISREG(st.st_mode)   ? "file"
                     : S_ISDIR(st.st_mode) ? "dir"
                     : S_ISLNK(st.st_mode) ? "symlink"
                                           : "other";
  Json target = nullptr;
  if (S_ISLNK(st.st_mode)) {
    char buf[4096];
    ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
    if (n >= 0) target = std::string(buf, static_cast<size_t>(n));
  }
  absl::Time mtime = absl::TimeFromTimespec(st.st_mtim);
  return Json{{"name", BaseName(path)},
              {"path", path},
              {"type", type},
              {"size", static_cast<uint64_t>(st.st_size)},
              {"mode", st.st_mode & 07777},
              {"permissions", Permissions(st.st_mode)},
              {"owner", NameOf(st.st_uid)},
              {"group", NameOf(st.st_gid)},
              {"modified_at", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", mtime, absl::UTCTimeZone())},
              {"symlink_target", target}};
}

absl::StatusOr<std::vector<Json>> ListEntries(const std::string& dir, int depth) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return Failed("stat", dir);
  if (!S_ISDIR(st.st_mode)) return Failed("list", dir, ENOTDIR);
  std::vector<Json> out;
  BRIG_RETURN_IF_ERROR(ListInto(dir, depth, out));
  std::sort(out.begin(), out.end(), [](const Json& a, const Json& b) {
    return a["path"].get<std::string>() < b["path"].get<std::string>();
  });
  return out;
}

absl::Status MakeDirectories(const std::string& path, mode_t mode) {
  if (path == "/") return absl::OkStatus();
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    return S_ISDIR(st.st_mode) ? absl::OkStatus() : Failed("mkdir", path, EEXIST);
  }
  BRIG_RETURN_IF_ERROR(MakeDirectories(Parent(path), mode));
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) return Failed("mkdir", path);
  return absl::OkStatus();
}

absl::Status Move(const std::string& from, const std::string& to) {
  struct stat st;
  if (::lstat(from.c_str(), &st) != 0) return Failed("stat", from);
  BRIG_RETURN_IF_ERROR(MakeDirectories(Parent(to)));
  if (::rename(from.c_str(), to.c_str()) != 0) return Failed("rename", from + " to " + to);
  return absl::OkStatus();
}

absl::Status Remove(const std::string& path) {
  if (path == "/") return Failed("remove", path, EPERM);
  return RemoveTree(path);
}

absl::StatusOr<UniqueFd> OpenForRead(const std::string& path) {
  BRIG_ASSIGN_OR_RETURN(UniqueFd fd, OpenNoMagic(path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Failed("fstat", path);
  if (S_ISDIR(st.st_mode)) return Failed("read", path, EISDIR);
  if (!S_ISREG(st.st_mode)) return Failed("read", path, EINVAL);  // no FIFOs, devices
  ::fcntl(fd.get(), F_SETFL, O_RDONLY);
  return fd;
}

absl::StatusOr<PendingWrite> PendingWrite::Start(const std::string& path, mode_t mode) {
  if (path == "/") return Failed("write", path, EISDIR);
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Failed("write", path, EISDIR);
  BRIG_RETURN_IF_ERROR(MakeDirectories(Parent(path)));
  unsigned char random[6];
  if (::getrandom(random, sizeof random, 0) != sizeof random) return Failed("getrandom", path);
  std::string temp = absl::StrCat(
      Parent(path) == "/" ? "" : Parent(path), "/.", BaseName(path), ".brig-",
      absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(random), sizeof random)));
  BRIG_ASSIGN_OR_RETURN(UniqueFd fd, OpenNoMagic(temp, O_WRONLY | O_CREAT | O_EXCL, mode));
  ::fchmod(fd.get(), mode);  // exactly `mode`, whatever the umask
  return PendingWrite(path, std::move(temp), std::move(fd));
}

PendingWrite::~PendingWrite() {
  if (fd_) ::unlink(temp_.c_str());
}

absl::Status PendingWrite::Append(absl::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd_.get(), bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Failed("write", path_);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status PendingWrite::Commit() {
  if (::rename(temp_.c_str(), path_.c_str()) != 0) return Failed("rename", path_);
  fd_.reset();  // nothing left to remove
  return absl::OkStatus();
}

}  // namespace brig::agent
