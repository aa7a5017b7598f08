// Each isolation property of the process tier, checked from inside a real sandbox (and, where
// it matters, from the host at the same time).
#include <arpa/inet.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/userns.h"
#include "support/sandbox_fixture.h"

namespace brig::testing {
namespace {

class Isolation : public SandboxTest {};

TEST_F(Isolation, HostProcessesInvisible) {
  std::string marker = UniqueMarker();
  pid_t host_sleeper = Spawn({"/usr/bin/python3", "-c", "import time; time.sleep(60)", marker});
  ASSERT_GT(host_sleeper, 0);
  ASSERT_TRUE(WaitFor([&] { return !PidsWithArgument(marker).empty(); }));
  std::string reversed(marker.rbegin(), marker.rend());  // so this script does not match itself
  Result r = Python(
      "import os\n"
      "pids = [p for p in os.listdir('/proc') if p.isdigit()]\n"
      "m = '" +
      reversed +
      "'[::-1]\n"
      "found = [p for p in pids if m in open('/proc/%s/cmdline' % p).read()]\n"
      "print(len(pids), len(found), os.getpid())\n");
  kill(host_sleeper, SIGKILL);
  waitpid(host_sleeper, nullptr, 0);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> f = absl::StrSplit(absl::StripAsciiWhitespace(r.out), ' ');
  ASSERT_EQ(f.size(), 3u) << r.out;
  EXPECT_LE(std::stoi(f[0]), 3) << "only PID 1, the command and its children are visible";
  EXPECT_EQ(f[1], "0") << "a host process is visible inside";
  EXPECT_LE(std::stoi(f[2]), 3) << "the sandbox has its own PID numbering";
}

TEST_F(Isolation, HostPathsInvisible) {
  TempDir host_dir;  // exists on the host, under /tmp
  std::string test_binary = std::filesystem::canonical("/proc/self/exe").parent_path().string();
  std::string host_shadow = ReadText("/etc/shadow");
  Result r =
      Bash("for p in " + host_dir.path() + " " + state_dir() + " " + test_binary +
               " /etc/ssh /root/.pyenv /var/lib/brig /sys/fs/cgroup/memory; do"
               "  [ -e \"$p\" ] && echo \"VISIBLE $p\"; done;"
               " ls -A /root | sed 's/^/ROOT /'; ls -A /home | sed 's/^/HOME /'; cat /etc/shadow",
           {"--user", "root"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("VISIBLE"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("HOME user\n"), r.out.find("HOME ")) << "only /home/user: " << r.out;
  EXPECT_EQ(r.out.find("HOME ", r.out.find("HOME ") + 1), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("ROOT .pyenv"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("root:*:"), std::string::npos) << "the sandbox's own, locked shadow";
  // Nothing of the host's shadow file appears inside.
  for (absl::string_view line : absl::StrSplit(host_shadow, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ':');
    if (fields.size() > 1 && fields[1].size() > 2) {
      EXPECT_EQ(r.out.find(std::string(fields[1])), std::string::npos) << "host hash leaked";
    }
  }
}

TEST_F(Isolation, TemplateIsReadOnlyAndPerSandbox) {
  std::string marker = UniqueMarker();
  Result a = Bash("echo '" + marker +
                      ":x:4242:4242::/:/bin/false' >> /etc/passwd && "
                      "grep -c " +
                      marker + " /etc/passwd",
                  {"--user", "root"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, "1\n") << "the sandbox's root may change its own /etc";
  Result b = Bash("grep -c " + marker + " /etc/passwd; true");
  EXPECT_EQ(b.out, "0\n") << "another sandbox must not see the change";
  EXPECT_EQ(ReadText(state_dir() + "/templates/base/rootfs/etc/passwd").find(marker),
            std::string::npos);
  Result c = Bash("echo x >> /etc/passwd");
  EXPECT_NE(c.exit_code, 0) << "the sandbox's unprivileged user cannot write /etc/passwd";
}

TEST_F(Isolation, UsrWritesStayInSandbox) {
  std::string name = "/usr/bin/" + UniqueMarker();
  Result r = Bash("touch " + name + " && ls " + name, {"--user", "root"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(std::filesystem::exists(name)) << "a write inside reached the host's /usr";
  Result u = Bash("touch /usr/bin/x");
  EXPECT_NE(u.exit_code, 0);
  EXPECT_NE(u.err.find("Permission denied"), std::string::npos) << u.err;
}

TEST_F(Isolation, LoopbackOnlyNetwork) {
  // A server on the host's loopback: the sandbox's loopback is a different one.
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 16), 0);
  socklen_t len = sizeof addr;
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  Result r = Python(
      "import socket\n"
      "print(sorted(n for _, n in socket.if_nameindex()))\n"
      "s = socket.socket()\n"
      "try:\n"
      "    s.connect(('127.0.0.1', " +
      std::to_string(port) +
      "))\n"
      "    print('host reachable')\n"
      "except OSError as e:\n"
      "    print('refused', e.errno)\n"
      "srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen()\n"
      "c = socket.create_connection(srv.getsockname()); print('own loopback ok')\n"
      "try:\n"
      "    socket.create_connection(('10.0.0.1', 80), timeout=2); print('routed')\n"
      "except OSError as e:\n"
      "    print('unreachable', e.errno)\n");
  close(listener);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("['lo']"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("refused 111"), std::string::npos) << r.out;  // ECONNREFUSED
  EXPECT_NE(r.out.find("own loopback ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("unreachable 101"), std::string::npos) << r.out;  // ENETUNREACH
}

TEST_F(Isolation, RootInsideIsUnprivilegedOutside) {
  std::string marker = UniqueMarker();
  pid_t brig = Spawn({BRIG_BINARY, "--state-dir", state_dir(), "run", "--user", "root", "--",
                      "/usr/bin/python3", "-c", "import time; time.sleep(30)", marker});
  ASSERT_GT(brig, 0);
  // The launcher's own command line carries the marker too: look for the python process.
  std::vector<pid_t> inside;
  ASSERT_TRUE(WaitFor([&] {
    inside.clear();
    for (pid_t pid : PidsWithArgument(marker)) {
      if (ReadText("/proc/" + std::to_string(pid) + "/cmdline").rfind("/usr/bin/python3", 0) == 0) {
        inside.push_back(pid);
      }
    }
    return !inside.empty();
  }));
  std::string status = ReadText("/proc/" + std::to_string(inside[0]) + "/status");
  kill(brig, SIGKILL);
  waitpid(brig, nullptr, 0);
  size_t at = status.find("\nUid:");
  ASSERT_NE(at, std::string::npos) << status;
  unsigned long long uids[4] = {0, 0, 0, 0};
  ASSERT_EQ(std::sscanf(status.c_str() + at, "\nUid: %llu %llu %llu %llu", &uids[0], &uids[1],
                        &uids[2], &uids[3]),
            4)
      << status;
  for (unsigned long long uid : uids) {
    EXPECT_GE(uid, kFirstHostId) << "root inside must be an unprivileged uid outside";
  }
  Result map = Sandboxed({"/bin/cat", "/proc/self/uid_map"}, {"--user", "root"});
  EXPECT_NE(map.out.find(" 65536"), std::string::npos) << map.out;
}

TEST_F(Isolation, SeccompBlocksDangerousCalls) {
  // x86_64 numbers; arguments are junk on purpose: without the filter most of these calls
  // would fail with EFAULT or EINVAL, or succeed, rather than EPERM.
  Result r = Python(
      "import ctypes, socket\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "def err(nr, *a):\n"
      "    ctypes.set_errno(0)\n"
      "    r = libc.syscall(nr, *[ctypes.c_long(x) for x in a])\n"
      "    return ctypes.get_errno() if r == -1 else 0\n"
      "calls = {'io_uring_setup': (425, 1, 0), 'keyctl': (250, 0, -1), 'add_key': (248, 0, 0, 0, "
      "0, 0),\n"
      "  'bpf': (321, 0, 0, 0), 'perf_event_open': (298, 0, 0, -1, -1, 0), 'userfaultfd': (323, "
      "0),\n"
      "  'unshare': (272, 0x10000000), 'setns': (308, 0, 0), 'mount': (165, 0, 0, 0, 0, 0),\n"
      "  'umount2': (166, 0, 0), 'pivot_root': (155, 0, 0), 'chroot': (161, 0), 'open_tree': (428, "
      "0, 0, 0),\n"
      "  'kexec_load': (246, 0, 0, 0, 0), 'init_module': (175, 0, 0, 0), 'finit_module': (313, 0, "
      "0, 0),\n"
      "  'open_by_handle_at': (304, 0, 0, 0), 'name_to_handle_at': (303, 0, 0, 0, 0, 0),\n"
      "  'clone_newuser': (56, 0x10000000 | 17, 0, 0, 0, 0), 'swapon': (167, 0, 0), 'syslog': "
      "(103, 0, 0, 0),\n"
      "  'mknod_chr': (133, 0, 0o20600, 0x0103), 'ioctl_tiocsti': (16, 0, 0x5412, 0),\n"
      "  'socket_packet': (41, 17, 3, 0), 'socket_raw': (41, 2, 3, 1), 'clone3': (435, 0, 0)}\n"
      "for name, (nr, *args) in calls.items():\n"
      "    print(name, err(nr, *args))\n"
      "print('getpid', 0 if libc.getpid() > 0 else 1)\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (absl::string_view line : absl::StrSplit(r.out, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(line, ' ');
    int expected = kv.first == "clone3" ? ENOSYS : kv.first == "getpid" ? 0 : EPERM;
    EXPECT_EQ(kv.second, std::to_string(expected)) << kv.first;
  }
  EXPECT_NE(r.out.find("io_uring_setup"), std::string::npos);
  Result status = Sandboxed({"/bin/grep", "-E", "^(Seccomp|NoNewPrivs):", "/proc/self/status"});
  EXPECT_NE(status.out.find("Seccomp:\t2"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("NoNewPrivs:\t1"), std::string::npos) << status.out;
}

TEST_F(Isolation, CapabilitiesBounded) {
  // chown, dac_override, fowner, fsetid, kill, setgid, setuid, setpcap, net_bind_service.
  constexpr uint64_t kKeptMask = (1ull << CAP_CHOWN) | (1ull << CAP_DAC_OVERRIDE) |
                                 (1ull << CAP_FOWNER) | (1ull << CAP_FSETID) | (1ull << CAP_KILL) |
                                 (1ull << CAP_SETGID) | (1ull << CAP_SETUID) |
                                 (1ull << CAP_SETPCAP) | (1ull << CAP_NET_BIND_SERVICE);
  char kept_hex[17];
  std::snprintf(kept_hex, sizeof kept_hex, "%016llx", static_cast<unsigned long long>(kKeptMask));
  const std::string kKept = kept_hex;
  Result root =
      Sandboxed({"/bin/grep", "-E", "^Cap(Eff|Bnd|Amb):", "/proc/self/status"}, {"--user", "root"});
  EXPECT_NE(root.out.find(std::string("CapEff:\t") + kKept), std::string::npos) << root.out;
  EXPECT_NE(root.out.find(std::string("CapBnd:\t") + kKept), std::string::npos) << root.out;
  EXPECT_NE(root.out.find("CapAmb:\t0000000000000000"), std::string::npos) << root.out;
  Result user = Sandboxed({"/bin/grep", "-E", "^Cap(Eff|Prm):", "/proc/self/status"});
  EXPECT_NE(user.out.find("CapEff:\t0000000000000000"), std::string::npos) << user.out;
  EXPECT_NE(user.out.find("CapPrm:\t0000000000000000"), std::string::npos) << user.out;
}

TEST_F(Isolation, MemoryLimitReportsOom) {
  Result r;
  nlohmann::json stats = RunWithStats(
      {"/usr/bin/python3", "-c", "x = bytearray(400 * 1024 * 1024); print('survived')"},
      {"--memory", "64M"}, &r);
  EXPECT_EQ(r.exit_code, 123) << r.err;
  EXPECT_EQ(r.out.find("survived"), std::string::npos);
  EXPECT_NE(r.err.find("out of memory"), std::string::npos) << r.err;
  EXPECT_EQ(stats["outcome"], "out_of_memory");
  // (oom_kills may read 0: on v1 brig kills the sandbox at the OOM notification, which can
  // come before the kernel's own kill.)
  EXPECT_GE(stats["memory_peak_bytes"].get<uint64_t>(), 32ull << 20) << "it reached the limit";
  EXPECT_LE(stats["memory_peak_bytes"].get<uint64_t>(), 64ull << 20) << "and not beyond";
}

TEST_F(Isolation, MemoryBreachEndsTheWholeSandbox) {
  // A child exceeds the limit while its parent idles: the whole sandbox ends, not only the
  // process the OOM killer picked.
  Result r = Python(
      "import os, time\n"
      "if os.fork() == 0:\n"
      "    x = bytearray(400 * 1024 * 1024); os._exit(0)\n"
      "time.sleep(3)\n"
      "print('parent survived')\n",
      {"--memory", "64M"});
  EXPECT_EQ(r.exit_code, 123) << r.err;
  EXPECT_EQ(r.out.find("parent survived"), std::string::npos);
}

TEST_F(Isolation, PidsLimitStopsForkBomb) {
  Result r = Python(
      "import os, time\n"
      "made = 0\n"
      "for i in range(500):\n"
      "    try:\n"
      "        if os.fork() == 0:\n"
      "            time.sleep(30); os._exit(0)\n"
      "        made += 1\n"
      "    except BlockingIOError:\n"
      "        break\n"
      "print(made)\n",
      {"--pids", "40"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int made = std::stoi(r.out);
  EXPECT_LT(made, 40) << "the pids limit must stop the fork loop";
  EXPECT_GT(made, 10);
  // The sleeping children died with the sandbox (exit of the command ends it).
}

TEST_F(Isolation, CpuQuotaThrottles) {
  Result r;
  nlohmann::json stats = RunWithStats(
      {"/usr/bin/python3", "-c",
       "import time\nend = time.monotonic() + 1.0\nwhile time.monotonic() < end: pass\n"},
      {"--cpus", "0.2"}, &r);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  uint64_t cpu_usec = stats["cpu_usec"];
  EXPECT_GT(stats["nr_throttled"].get<int>(), 2) << stats.dump();
  EXPECT_LT(cpu_usec, 600'000u) << "0.2 CPUs for 1 s is about 0.2 s of CPU: " << stats.dump();
  EXPECT_GT(cpu_usec, 50'000u) << stats.dump();
}

TEST_F(Isolation, TimeoutKillsWholeTree) {
  std::string marker = UniqueMarker();
  std::string sleeper = "/usr/bin/python3 -c 'import time; time.sleep(1000)' " + marker;
  // A daemon that double-forks into its own session, a background child, and a foreground one.
  Result r = Bash("(setsid " + sleeper + " &) ; " + sleeper + " & " + sleeper, {"--timeout", "1s"});
  EXPECT_EQ(r.exit_code, 124);
  EXPECT_NE(r.err.find("timed out"), std::string::npos) << r.err;
  EXPECT_TRUE(WaitFor([&] { return PidsWithArgument(marker).empty(); }, std::chrono::seconds(2)))
      << "a process of the sandbox outlived its timeout";
}

TEST_F(Isolation, EveryNamespaceIsItsOwn) {
  Result r = Bash(
      "for n in user mnt pid net ipc uts cgroup; do echo $n $(readlink /proc/self/ns/$n); done;"
      " hostname; cat /proc/self/cgroup");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* ns : {"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"}) {
    std::string host = std::filesystem::read_symlink(std::string("/proc/self/ns/") + ns).string();
    EXPECT_NE(r.out.find(std::string(ns) + " "), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find(host), std::string::npos) << ns << " namespace shared with the host";
  }
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_GE(lines.size(), 8u);
  EXPECT_EQ(lines[7].size(), 20u) << "hostname is the sandbox id: " << lines[7];
  for (size_t i = 8; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i].substr(lines[i].rfind(':')), ":/")
        << "cgroup paths are rooted at the sandbox";
  }
}

TEST_F(Isolation, RlimitsAndSessionApply) {
  Result r = Python(
      "import os, resource\n"
      "print(resource.getrlimit(resource.RLIMIT_NOFILE), resource.getrlimit(resource.RLIMIT_CORE),"
      " resource.getrlimit(resource.RLIMIT_RTPRIO), os.getsid(0) == os.getpid())\n");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "(1024, 1024) (0, 0) (0, 0) True\n");
}

TEST_F(Isolation, Pid1IsOutOfReach) {
  // Even the sandbox's root cannot read PID 1's memory, environment or descriptors, trace it,
  // or kill it.
  Result r = Python(
      "import ctypes, os, signal\n"
      "libc = ctypes.CDLL(None, use_errno=True)\n"
      "def denied(f):\n"
      "    try:\n"
      "        f(); return 'allowed'\n"
      "    except PermissionError:\n"
      "        return 'denied'\n"
      "print(denied(lambda: open('/proc/1/environ').read()), denied(lambda: "
      "os.listdir('/proc/1/fd')),"
      " denied(lambda: open('/proc/1/mem', 'rb').read(1)))\n"
      "print('ptrace', libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\n"
      "try:\n"
      "    os.kill(1, signal.SIGKILL)\n"
      "except PermissionError:\n"
      "    pass\n"
      "import time; time.sleep(0.2); print('alive')\n",
      {"--user", "root"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("denied denied denied"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ptrace -1 1\n"), std::string::npos) << r.out;  // EPERM
  EXPECT_NE(r.out.find("alive"), std::string::npos) << r.out;
}

TEST_F(Isolation, InheritedDescriptorsDoNotLeak) {
  // brig's caller leaves descriptor 7 open (no close-on-exec): the command must not get it.
  Result r = RunProgram({"/bin/bash", "-c",
                         "exec 7</etc/hostname; exec " + std::string(BRIG_BINARY) +
                             " --state-dir " + state_dir() + " run -- /bin/ls /proc/self/fd"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "0\n1\n2\n3\n") << "only stdio (and ls's own directory fd)";
}

TEST_F(Isolation, LauncherDeathKillsSandbox) {
  std::string marker = UniqueMarker();
  pid_t brig = Spawn({BRIG_BINARY, "--state-dir", state_dir(), "run", "--", "/bin/bash", "-c",
                      "(setsid sleep 1000 &); exec /usr/bin/python3 -c 'import time; "
                      "time.sleep(1000)' " +
                          marker});
  ASSERT_GT(brig, 0);
  ASSERT_TRUE(WaitFor([&] { return !PidsWithArgument(marker).empty(); }));
  kill(brig, SIGKILL);
  waitpid(brig, nullptr, 0);
  EXPECT_TRUE(WaitFor([&] { return PidsWithArgument(marker).empty(); }, std::chrono::seconds(3)));
  // What the killed launcher could not remove, the next start (or brig gc) does.
  Result gc = RunProgram({BRIG_BINARY, "--state-dir", state_dir(), "gc"});
  EXPECT_EQ(gc.exit_code, 0) << gc.err;
  EXPECT_TRUE(CgroupsNamed("brig-run-" + std::to_string(brig) + "-").empty());
}

}  // namespace
}  // namespace brig::testing
