#include "base/files.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace brig {

absl::StatusOr<UniqueFd> OpenFd(const std::string& path, int flags, mode_t mode) {
  UniqueFd fd(::open(path.c_str(), flags | O_CLOEXEC, mode));
  if (!fd) return ErrnoError("open", path);
  return fd;
}

absl::Status WriteKernelFile(const std::string& path, absl::string_view content) {
  BRIG_ASSIGN_OR_RETURN(UniqueFd fd, OpenFd(path, O_WRONLY));
  ssize_t n = ::write(fd.get(), content.data(), content.size());
  if (n < 0) return ErrnoError("write", absl::StrCat(path, " (\"", content, "\")"));
  if (static_cast<size_t>(n) != content.size()) {
    return absl::InternalError(absl::StrCat("short write to ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  BRIG_ASSIGN_OR_RETURN(UniqueFd fd, OpenFd(path, O_RDONLY));
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read", path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

absl::Status WriteFileAtomic(const std::string& path, absl::string_view content, mode_t mode) {
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  {
    BRIG_ASSIGN_OR_RETURN(UniqueFd fd, OpenFd(tmp, O_WRONLY | O_CREAT | O_TRUNC, mode));
    size_t done = 0;
    while (done < content.size()) {
      ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        ::unlink(tmp.c_str());
        return ErrnoError("write", tmp);
      }
      done += static_cast<size_t>(n);
    }
    if (::fchmod(fd.get(), mode) != 0 || ::fsync(fd.get()) != 0) {
      absl::Status failed = ErrnoError("fchmod/fsync", tmp);
      ::unlink(tmp.c_str());
      return failed;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoError("rename", absl::StrCat(tmp, " -> ", path), err);
  }
  return absl::OkStatus();
}

absl::Status MakeDirs(const std::string& path, mode_t mode) {
  // Walk every prefix that ends before a '/', then the whole path.
  for (size_t pos = path.find('/', 1);; pos = path.find('/', pos + 1)) {
    std::string prefix = path.substr(0, pos);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), mode) != 0 && errno != EEXIST) {
      return ErrnoError("mkdir", prefix);
    }
    if (pos == std::string::npos) return absl::OkStatus();
  }
}

absl::Status SendWithFds(int socket, absl::string_view bytes, std::initializer_list<int> fds,
                         absl::string_view what) {
  constexpr size_t kMaxFds = 8;
  if (fds.size() > kMaxFds || bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("send ", what, ": bad message"));
  }
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxFds * sizeof(int))] = {};
  iovec iov = {const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
  std::memcpy(CMSG_DATA(c), fds.begin(), fds.size() * sizeof(int));
  if (::sendmsg(socket, &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
    return ErrnoError("sendmsg", what);
  }
  return absl::OkStatus();
}

}  // namespace brig
