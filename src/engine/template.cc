#include "engine/template.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <system_error>

#include "base/files.h"

namespace brig {
namespace fs = std::filesystem;
namespace {

// Bump when the skeleton's layout changes, so existing state dirs rebuild it.
constexpr absl::string_view kTemplateVersion = "base-3";

// What of the host's /etc programs need. An allowlist: secrets (shadow, ssh host keys, sudoers,
// TLS private keys, machine-id) and files that may carry credentials (environment, gitconfig,
// npmrc, wgetrc, netrc) and anything not named here stay out.
constexpr const char* kHostEtcEntries[] = {"alternatives",
                                           "bash.bashrc",
                                           "bash_completion",
                                           "bash_completion.d",
                                           "ca-certificates",
                                           "ca-certificates.conf",
                                           "debian_version",
                                           "fonts",
                                           "gai.conf",
                                           "host.conf",
                                           "inputrc",
                                           "issue",
                                           "ld.so.cache",
                                           "ld.so.conf",
                                           "ld.so.conf.d",
                                           "locale.alias",
                                           "localtime",
                                           "login.defs",
                                           "magic",
                                           "magic.mime",
                                           "matplotlibrc",
                                           "mime.types",
                                           "networks",
                                           "os-release",
                                           "profile",
                                           "profile.d",
                                           "protocols",
                                           "python3",
                                           "python3.11",
                                           "rpc",
                                           "services",
                                           "shells",
                                           "skel",
                                           "ssl",
                                           "terminfo",
                                           "timezone",
                                           "vim",
                                           "xattr.conf",
                                           "nanorc",
                                           "perl",
                                           "mailcap",
                                           "papersize",
                                           "ethertypes",
                                           "lsb-release",
                                           "default",
                                           "java-17-openjdk",
                                           "X11",
                                           "R",
                                           "gprofng.rc",
                                           "nodejs",
                                           "manpath.config"};
// Inside copied directories, these are left out anyway.
constexpr const char* kHostEtcExcluded[] = {"ssl/private", "default/useradd"};

constexpr const char* kMergedUsrLinks[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"};

struct Dir {
  const char* path;
  mode_t mode;
  uid_t owner;  // inside the sandbox: files are seen through an id-mapped mount
};
constexpr Dir kSkeletonDirs[] = {
    {"usr", 0755, 0},      {"proc", 0555, 0},    {"sys", 0555, 0},          {"dev", 0755, 0},
    {"tmp", 01777, 0},     {"run", 0755, 0},     {"run/lock", 01777, 0},    {"var", 0755, 0},
    {"var/tmp", 01777, 0}, {"var/log", 0755, 0}, {"var/cache", 0755, 0},    {"var/lib", 0755, 0},
    {"home", 0755, 0},     {"root", 0700, 0},    {"opt", 0755, 0},          {"mnt", 0755, 0},
    {"srv", 0755, 0},      {"etc", 0755, 0},     {"home/user", 0750, 1000}, {"opt/brig", 0755, 0},
};

// The code interpreter's kernel (src/interpreter/kernel.py), embedded at build time.
constexpr absl::string_view kKernel =
#include "kernel_py.inc"
    ;
constexpr absl::string_view kJavaScriptKernel =
#include "kernel_js.inc"
    ;

constexpr absl::string_view kPasswd =
    "root:x:0:0:root:/root:/bin/bash\n"
    "user:x:1000:1000:user:/home/user:/bin/bash\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
constexpr absl::string_view kGroup =
    "root:x:0:\ntty:x:5:\nusers:x:100:user\nuser:x:1000:\nnogroup:x:65534:\n";
constexpr absl::string_view kShadow =
    "root:*:20000:0:99999:7:::\nuser:*:20000:0:99999:7:::\nnobody:*:20000:0:99999:7:::\n";
constexpr absl::string_view kNsswitch =
    "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"
    "protocols: files\nservices: files\nethers: files\nrpc: files\n";
constexpr absl::string_view kHosts =
    "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
constexpr absl::string_view kResolvConf =
    "# brig: the sandbox's resolver. With no network (loopback only) nothing resolves.\n"
    "nameserver 127.0.0.1\n";

absl::Status CopyHostEtc(const fs::path& etc) {
  for (const char* entry : kHostEtcEntries) {
    fs::path from = fs::path("/etc") / entry;
    std::error_code ec;
    fs::file_status st = fs::symlink_status(from, ec);
    if (ec || !fs::exists(st)) continue;
    fs::copy(from, etc / entry,
             fs::copy_options::recursive | fs::copy_options::copy_symlinks |
                 fs::copy_options::overwrite_existing,
             ec);
    if (ec) return absl::InternalError(absl::StrCat("copying ", from.string(), ": ", ec.message()));
  }
  for (const char* excluded : kHostEtcExcluded) {
    std::error_code ec;
    fs::remove_all(etc / excluded, ec);
  }
  return absl::OkStatus();
}

absl::Status WriteSkeletonFile(const fs::path& path, absl::string_view content, mode_t mode) {
  return WriteFileAtomic(path.string(), content, mode);
}

absl::Status CopySkelInto(const fs::path& home, uid_t owner) {
  std::error_code ec;
  for (auto it = fs::directory_iterator("/etc/skel", ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const fs::directory_entry& entry = *it;
    fs::path to = home / entry.path().filename();
    fs::copy(entry.path(), to, fs::copy_options::recursive | fs::copy_options::copy_symlinks, ec);
    if (ec)
      return absl::InternalError(
          absl::StrCat("copying ", entry.path().string(), ": ", ec.message()));
    if (::lchown(to.c_str(), owner, owner) != 0) return ErrnoError("lchown", to.string());
  }
  return absl::OkStatus();
}

absl::Status BuildSkeleton(const fs::path& root) {
  for (const char* link : kMergedUsrLinks) {
    fs::path host = fs::path("/") / link;
    std::error_code ec;
    if (fs::is_symlink(host, ec)) {
      fs::path target = fs::read_symlink(host, ec);
      if (ec) return absl::InternalError(absl::StrCat("readlink ", host.string()));
      fs::create_symlink(target, root / link, ec);
      if (ec) return absl::InternalError(absl::StrCat("symlink ", (root / link).string()));
    } else if (fs::is_directory(host, ec) && absl::string_view(link) != "lib32" &&
               absl::string_view(link) != "libx32") {
      return absl::FailedPreconditionError(
          absl::StrCat("the host's /", link,
                       " is a directory: brig's base template needs a merged-/usr "
                       "userland (Debian 12 and later)"));
    }
  }
  for (const Dir& d : kSkeletonDirs) {
    fs::path p = root / d.path;
    if (::mkdir(p.c_str(), d.mode) != 0 && errno != EEXIST) return ErrnoError("mkdir", p.string());
    if (::chmod(p.c_str(), d.mode) != 0) return ErrnoError("chmod", p.string());
    if (::chown(p.c_str(), d.owner, d.owner) != 0) return ErrnoError("chown", p.string());
  }
  fs::path etc = root / "etc";
  BRIG_RETURN_IF_ERROR(CopyHostEtc(etc));
  BRIG_RETURN_IF_ERROR(WriteSkeletonFile(etc / "passwd", kPasswd, 0644));
  BRIG_RETURN_IF_ERROR(WriteSkeletonFile(etc / "group", kGroup, 0644));
  BRIG_RETURN_IF_ERROR(WriteSkeletonFile(etc / "shadow", kShadow, 0640));
  BRIG_RETURN_IF_ERROR(WriteSkeletonFile(etc / "nsswitch.conf", kNsswitch, 0644));
  BRIG_RETURN_IF_ERROR(WriteSkeletonFile(etc / "hosts", kHosts, 0644));
  BRIG_RETURN_IF_ERROR(WriteSkeletonFile(etc / "hostname", "sandbox\n", 0644));
  BRIG_RETURN_IF_ERROR(WriteSkeletonFile(etc / "resolv.conf", kResolvConf, 0644));
  std::error_code ec;
  fs::create_symlink("../proc/self/mounts", etc / "mtab", ec);
  BRIG_RETURN_IF_ERROR(WriteSkeletonFile(root / "opt/brig/kernel.py", kKernel, 0644));
  BRIG_RETURN_IF_ERROR(WriteSkeletonFile(root / "opt/brig/kernel.js", kJavaScriptKernel, 0644));
  BRIG_RETURN_IF_ERROR(CopySkelInto(root / "home/user", 1000));
  BRIG_RETURN_IF_ERROR(CopySkelInto(root / "root", 0));
  return absl::OkStatus();
}

// What makes a skeleton stale: its version, and the host packages it mirrors.
std::string Fingerprint() {
  std::string out(kTemplateVersion);
  absl::StrAppend(&out, " kernel-",
                  std::hash<std::string_view>()(std::string_view(kKernel.data(), kKernel.size())),
                  "-",
                  std::hash<std::string_view>()(
                      std::string_view(kJavaScriptKernel.data(), kJavaScriptKernel.size())));
  for (const char* f : {"/etc/ld.so.cache", "/etc/alternatives", "/etc/ssl/certs"}) {
    struct stat st = {};
    if (::stat(f, &st) == 0) absl::StrAppend(&out, " ", st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
  }
  return out;
}

void RemoveRetired(const fs::path& dir) {
  std::error_code ec;
  const time_t cutoff = ::time(nullptr) - 86400;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    long long when = 0;
    if (name.rfind("retired.", 0) == 0 && std::sscanf(name.c_str(), "retired.%lld", &when) == 1 &&
        when < cutoff) {
      std::error_code remove_ec;
      fs::remove_all(it->path(), remove_ec);
    }
  }
}

}  // namespace

absl::Status CheckTemplateName(const std::string& name) {
  if (name != "base") {
    return absl::NotFoundError(absl::StrCat("template \"", name, "\" does not exist"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TemplatePaths> EnsureTemplate(const std::string& state_dir,
                                             const std::string& name) {
  BRIG_RETURN_IF_ERROR(CheckTemplateName(name));
  fs::path dir = fs::path(state_dir) / "templates" / name;
  TemplatePaths paths{(dir / "rootfs").string(), "/usr"};
  std::string want = Fingerprint();
  absl::StatusOr<std::string> have = ReadFile((dir / "fingerprint").string());
  if (have.ok() && *have == want) return paths;

  // Only the launcher (root) reads templates, through open_tree; nobody else may reach them
  // (home/user in the skeleton is owned by uid 1000 on disk).
  BRIG_RETURN_IF_ERROR(MakeDirs(dir.string(), 0700));
  if (::chmod(dir.parent_path().c_str(), 0700) != 0)
    return ErrnoError("chmod", dir.parent_path().string());
  BRIG_ASSIGN_OR_RETURN(UniqueFd lock, OpenFd((dir / ".lock").string(), O_RDWR | O_CREAT, 0600));
  if (::flock(lock.get(), LOCK_EX) != 0) return ErrnoError("flock", (dir / ".lock").string());
  have = ReadFile((dir / "fingerprint").string());  // another process may have built it
  if (have.ok() && *have == want) return paths;

  fs::path fresh = dir / absl::StrCat("rootfs.new.", ::getpid());
  fs::path old = dir / absl::StrCat("retired.", ::time(nullptr), ".", ::getpid());
  std::error_code ec;
  fs::remove_all(fresh, ec);
  if (::mkdir(fresh.c_str(), 0755) != 0) return ErrnoError("mkdir", fresh.string());
  absl::Status built = BuildSkeleton(fresh);
  if (!built.ok()) {
    fs::remove_all(fresh, ec);
    return Annotate(built, "building the base template");
  }
  // Running sandboxes keep using the old skeleton (their mounts hold it by reference), so it is
  // retired rather than deleted, and removed a day later.
  if (fs::exists(paths.rootfs, ec) && ::rename(paths.rootfs.c_str(), old.c_str()) != 0) {
    return ErrnoError("rename", paths.rootfs);
  }
  if (::rename(fresh.c_str(), paths.rootfs.c_str()) != 0)
    return ErrnoError("rename", fresh.string());
  RemoveRetired(dir);
  BRIG_RETURN_IF_ERROR(WriteFileAtomic((dir / "fingerprint").string(), want, 0644));
  return paths;
}

}  // namespace brig
