#include "supervisor/doctor.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cgroups/cgroup_backend.h"
#include "common/file_util.h"
#include "common/unique_fd.h"

extern char** environ;

namespace corral::supervisor {
namespace {

CheckResult Ok(const char* name, std::string detail) { return {name, CheckLevel::kOk, std::move(detail)}; }
CheckResult Warn(const char* name, std::string detail) { return {name, CheckLevel::kWarn, std::move(detail)}; }
CheckResult Fail(const char* name, std::string detail) { return {name, CheckLevel::kFail, std::move(detail)}; }

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// A sysctl's value, or "" when the file is not there.
std::string Sysctl(const DoctorOptions& options, const std::string& name) {
  auto text = ReadFileToString(options.proc_root + "/sys/" + name);
  return text.ok() ? Trim(*text) : std::string();
}

// Runs `child` in a forked child and returns what it returns (0: worked, else an errno); a child
// that dies otherwise is EIO. `child` runs in a copy of this process: it may allocate (the
// caller has no threads yet), but must not return into the caller's stack.
int InChild(const std::function<int()>& child) {
  pid_t pid = fork();
  if (pid < 0) return errno;
  if (pid == 0) _exit(child() & 0xff);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return EIO;
}

std::string ErrnoText(int error) { return ErrnoName(error) + " (" + strerror(error) + ")"; }

bool ParseRelease(const std::string& release, int& major, int& minor) {
  return sscanf(release.c_str(), "%d.%d", &major, &minor) == 2;
}

}  // namespace

const char* TestedClaudeCodeVersion() { return CORRAL_CLAUDE_CODE_VERSION; }

const char* CheckLevelName(CheckLevel level) {
  switch (level) {
    case CheckLevel::kOk: return "OK";
    case CheckLevel::kWarn: return "WARN";
    case CheckLevel::kFail: return "FAIL";
  }
  return "?";
}

CheckResult CheckKernel(const std::string& release) {
  int major = 0, minor = 0;
  if (!ParseRelease(release, major, minor)) return Fail("kernel", "cannot read the kernel's version from \"" + release + "\"");
  // 5.7: clone3 with CLONE_INTO_CGROUP (5.3: clone3, pidfd), openat2 (5.6).
  if (major < 5 || (major == 5 && minor < 7)) {
    return Fail("kernel", "Linux " + release + " is too old: corral needs 5.7 or later (clone3 into a cgroup, openat2, "
                          "pidfd); Debian 12's 6.1 is what it is tested on");
  }
  if (major < 6 || (major == 6 && minor < 1)) {
    return Warn("kernel", "Linux " + release + ": older than 6.1, which corral is tested on (it should work from 5.7)");
  }
  return Ok("kernel", "Linux " + release);
}

CheckResult CheckUserNamespaces(const DoctorOptions& options) {
  const std::string max = Sysctl(options, "user/max_user_namespaces");
  if (max == "0") {
    return Fail("user_namespaces", "user.max_user_namespaces is 0: user namespaces are switched off; "
                                   "sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d)");
  }
  std::string notes;
  // Ubuntu's and Debian's switches concern unprivileged users; corrald creates namespaces as root.
  if (Sysctl(options, "kernel/unprivileged_userns_clone") == "0") notes += "; kernel.unprivileged_userns_clone=0 (not needed: corrald is root)";
  if (Sysctl(options, "kernel/apparmor_restrict_unprivileged_userns") == "1") {
    notes += "; AppArmor restricts unprivileged user namespaces (not needed: corrald is root)";
  }
  if (!options.probe_namespaces) return Ok("user_namespaces", "max_user_namespaces " + max + notes);
  // As corrald does it: the child unshares, the parent writes its id map, the child is root in it.
  int sync[2];
  if (pipe2(sync, O_CLOEXEC) != 0) return Fail("user_namespaces", "pipe: " + ErrnoText(errno));
  int go[2];
  if (pipe2(go, O_CLOEXEC) != 0) {
    close(sync[0]);
    close(sync[1]);
    return Fail("user_namespaces", "pipe: " + ErrnoText(errno));
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(sync[0]);
    close(go[1]);
    int error = unshare(CLONE_NEWUSER) == 0 ? 0 : errno;
    (void)!write(sync[1], &error, sizeof(error));
    if (error != 0) _exit(error);
    char byte;
    if (read(go[0], &byte, 1) != 1) _exit(EPROTO);
    if (setresgid(0, 0, 0) != 0 || setresuid(0, 0, 0) != 0) _exit(errno);
    _exit(getuid() == 0 ? 0 : EPERM);
  }
  close(sync[1]);
  close(go[0]);
  if (pid < 0) {
    close(sync[0]);
    close(go[1]);
    return Fail("user_namespaces", "fork: " + ErrnoText(errno));
  }
  int error = 0;
  if (read(sync[0], &error, sizeof(error)) != sizeof(error)) error = EPROTO;
  std::string step = "unshare(CLONE_NEWUSER)";
  if (error == 0) {
    const std::string dir = "/proc/" + std::to_string(pid);
    Status map = WriteExistingFile(dir + "/setgroups", "deny");
    if (map.ok()) map = WriteExistingFile(dir + "/uid_map", "0 1000000000 1\n");
    if (map.ok()) map = WriteExistingFile(dir + "/gid_map", "0 1000000000 1\n");
    if (!map.ok()) {
      step = "writing the id maps";
      error = map.error_number() != 0 ? map.error_number() : EIO;
    }
    (void)!write(go[1], "g", 1);
  }
  close(sync[0]);
  close(go[1]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (error == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    step = "becoming root in it";
    error = WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
  }
  if (error != 0) {
    return Fail("user_namespaces", step + ": " + ErrnoText(error) +
                                       ": sandboxes need user namespaces (a seccomp or LSM policy on corrald may forbid them)");
  }
  return Ok("user_namespaces", "a user namespace with an id map works (max_user_namespaces " + max + ")" + notes);
}

CheckResult CheckOverlayfs(const DoctorOptions& options) {
  if (!options.probe_namespaces) return Ok("overlayfs", "not probed");
  char dir[] = "/tmp/corral-doctor-XXXXXX";
  if (mkdtemp(dir) == nullptr) return Fail("overlayfs", "mkdtemp: " + ErrnoText(errno));
  const std::string base = dir;
  // In a private mount namespace, on a tmpfs of its own: nothing outlives the child.
  int error = InChild([&base]() -> int {
    if (unshare(CLONE_NEWNS) != 0) return errno;
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return errno;
    if (mount("tmpfs", base.c_str(), "tmpfs", 0, "size=1m") != 0) return errno;
    for (const char* sub : {"/lower", "/upper", "/work", "/merged"}) {
      if (mkdir((base + sub).c_str(), 0755) != 0) return errno;
    }
    const std::string opts = "lowerdir=" + base + "/lower,upperdir=" + base + "/upper,workdir=" + base + "/work";
    if (mount("overlay", (base + "/merged").c_str(), "overlay", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) return errno;
    return 0;
  });
  rmdir(dir);
  if (error != 0) {
    return Fail("overlayfs", "mounting an overlay: " + ErrnoText(error) +
                                 ": every sandbox's root is one (modprobe overlay; CONFIG_OVERLAY_FS)");
  }
  return Ok("overlayfs", "an overlay mounts (in a private mount namespace, as corrald mounts sandbox roots)");
}

CheckResult CheckCgroups(const DoctorOptions& options) {
  auto backend = cgroups::DetectBackend(options.cgroup_mount);
  if (!backend.ok()) {
    return Fail("cgroups", "no usable cgroup hierarchy at " + options.cgroup_mount + ": " + backend.status().ToString());
  }
  const std::string version = std::string("cgroup ") + (*backend)->name();
  std::string missing;
  for (const std::string& c : (*backend)->MissingControllers(options.cgroup_mount)) {
    missing += (missing.empty() ? "" : ", ") + c;
  }
  if (!missing.empty()) {
    return Fail("cgroups", version + " without the " + missing +
                               " controller(s): corral enforces CPU, memory and process limits with them");
  }
  // The daemon's subtree: can it make (and, on v2, enable controllers for) a cgroup there? What
  // the probe makes goes again: the probe, and the parents it had to make.
  // Unset in corrald.toml: the CLI is no systemd service, and corrald outside one uses "corral".
  const std::string cgroup_parent = options.cgroup_parent.empty() ? "corral" : options.cgroup_parent;
  const std::string probe = cgroup_parent + "/doctor-" + std::to_string(getpid());
  std::vector<std::string> made_parents;
  for (size_t slash = cgroup_parent.find('/');; slash = cgroup_parent.find('/', slash + 1)) {
    const std::string parent = cgroup_parent.substr(0, slash);
    // Where the parent shows (v2: its directory; v1: in each hierarchy, the memory one first).
    auto where = (*backend)->ViewDirs(parent);
    struct stat st {};
    if (!where.ok() || where->empty() || stat(where->front().host_dir.c_str(), &st) != 0) {
      made_parents.insert(made_parents.begin(), parent);
    }
    if (slash == std::string::npos) break;
  }
  Status made = (*backend)->Create(probe);
  if (!made.ok()) {
    return Fail("cgroups", "cannot create " + options.cgroup_mount + "/" + probe + ": " + made.ToString() +
                               (*backend)->CreateFailureHint());
  }
  (void)(*backend)->RemoveIfEmpty(probe);
  for (const std::string& parent : made_parents) (void)(*backend)->RemoveIfEmpty(parent);  // deepest first
  return Ok("cgroups", version + " at " + options.cgroup_mount +
                           ", controllers present, " + cgroup_parent + "/ writable");
}

CheckResult CheckSeccomp() {
  if (prctl(PR_GET_SECCOMP) < 0) return Fail("seccomp", "prctl(PR_GET_SECCOMP): " + ErrnoText(errno) + ": no seccomp in this kernel");
  struct Action {
    uint32_t action;
    const char* name;
  };
  std::string missing;
  for (Action a : {Action{SECCOMP_RET_ALLOW, "allow"}, Action{SECCOMP_RET_ERRNO, "errno"},
                   Action{SECCOMP_RET_KILL_PROCESS, "kill_process"}}) {
    uint32_t action = a.action;
    if (syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action) != 0) {
      missing += std::string(missing.empty() ? "" : ", ") + a.name + " (" + ErrnoName(errno) + ")";
    }
  }
  if (!missing.empty()) return Fail("seccomp", "filter actions unavailable: " + missing);
  return Ok("seccomp", "filters with the actions corral uses (allow, errno, kill_process)");
}

CheckResult CheckOpenat2() {
  struct open_how how = {};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  long fd = syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof(how));
  if (fd < 0) {
    return Fail("openat2", "openat2: " + ErrnoText(errno) +
                               ": the file API resolves every path inside its sandbox with it (Linux 5.6)");
  }
  close(static_cast<int>(fd));
  return Ok("openat2", "RESOLVE_IN_ROOT works");
}

CheckResult CheckLandlock() {
  long abi = syscall(SYS_landlock_create_ruleset, nullptr, 0, LANDLOCK_CREATE_RULESET_VERSION);
  if (abi < 0) {
    return Warn("landlock", "unavailable (" + ErrnoName(errno) +
                                (errno == EOPNOTSUPP ? ": built but not enabled; add landlock to the lsm= boot parameter"
                                                     : "") +
                                "): nothing is lost today (corral does not apply Landlock yet); a later version will "
                                "use it as a second fence around files");
  }
  return Ok("landlock", "ABI " + std::to_string(abi) + " (not applied yet)");
}

CheckResult CheckPidfdAndClone3() {
  long fd = syscall(SYS_pidfd_open, getpid(), 0);
  if (fd < 0) return Fail("pidfd_clone3", "pidfd_open: " + ErrnoText(errno) + ": corrald watches sandboxes with pidfds (Linux 5.3)");
  close(static_cast<int>(fd));
  // A size of 0 is refused (EINVAL) before anything is created; ENOSYS means no clone3.
  if (syscall(SYS_clone3, nullptr, 0) == 0 || errno == ENOSYS || errno == EPERM) {
    return Fail("pidfd_clone3", "clone3: " + ErrnoText(errno) + ": sandboxes are created with clone3 (Linux 5.3)");
  }
  return Ok("pidfd_clone3", "pidfd_open and clone3 present");
}

CheckResult CheckNetworkNamespaces(const DoctorOptions& options) {
  if (!options.probe_namespaces) return Ok("network_namespaces", "not probed");
  int error = InChild([]() -> int {
    if (unshare(CLONE_NEWNET) != 0) return errno;
    // Its loopback up, as every sandbox's (the daemon's services listen there).
    int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (sock < 0) return errno;
    struct ifreq ifr = {};
    strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    if (ioctl(sock, SIOCGIFFLAGS, &ifr) != 0) return errno;
    ifr.ifr_flags |= IFF_UP;
    if (ioctl(sock, SIOCSIFFLAGS, &ifr) != 0) return errno;
    return 0;
  });
  if (error != 0) {
    return Fail("network_namespaces", "a network namespace with its loopback up: " + ErrnoText(error) +
                                          ": every sandbox has one");
  }
  return Ok("network_namespaces", "a network namespace with its loopback up works");
}

std::string NearestExistingDir(const std::string& path) {
  std::string dir = path.empty() ? "/" : path;
  struct stat st;
  while (stat(dir.c_str(), &st) != 0 && dir != "/") {
    size_t slash = dir.rfind('/');
    dir = slash == 0 || slash == std::string::npos ? "/" : dir.substr(0, slash);
  }
  return dir;
}

CheckResult CheckStateDir(const std::string& state_dir) {
  // The directory, or the nearest parent that exists (before the first start).
  std::string dir = state_dir.empty() ? "/" : state_dir;
  struct statvfs vfs {};
  while (statvfs(dir.c_str(), &vfs) != 0) {
    if (errno != ENOENT || dir == "/") return Fail("state_dir", "statvfs " + dir + ": " + ErrnoText(errno));
    size_t slash = dir.rfind('/');
    dir = slash == 0 || slash == std::string::npos ? "/" : dir.substr(0, slash);
  }
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  const bool has_inodes = vfs.f_files != 0;  // btrfs and others report none: not limited
  const uint64_t free_inodes = vfs.f_favail;
  const std::string where = state_dir + (dir == state_dir ? "" : " (on " + dir + ")");
  const std::string figures = std::to_string(free_bytes >> 20) + " MiB free" +
                              (has_inodes ? ", " + std::to_string(free_inodes) + " inodes free" : "");
  if (free_bytes < kDoctorFailFreeBytes || (has_inodes && free_inodes < kDoctorFailFreeInodes)) {
    return Fail("state_dir", where + ": " + figures + ": too little for sandboxes' disks and the store "
                             "(at least " + std::to_string(kDoctorFailFreeBytes >> 20) + " MiB and " +
                             std::to_string(kDoctorFailFreeInodes) + " inodes); free some, or set daemon.state_dir");
  }
  if (free_bytes < kDoctorWarnFreeBytes || (has_inodes && free_inodes < kDoctorWarnFreeInodes)) {
    return Warn("state_dir", where + ": " + figures + ": a few sandboxes at most (their disks are sparse files that "
                             "fill as they write)");
  }
  return Ok("state_dir", where + ": " + figures);
}

CheckResult CheckClaudeCode(const std::string& claude, const std::string& expected_version) {
  const std::string path = FindExecutable(claude);
  const std::string install = "npm install -g @anthropic-ai/claude-code" +
                              (expected_version.empty() ? std::string() : "@" + expected_version) +
                              " (dist/install-deps.sh does it)";
  if (path.empty()) return Warn("claude_code", claude + " not found: agent sessions cannot start; " + install);
  // `claude --version`, with a deadline: "2.1.330 (Claude Code)".
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Warn("claude_code", "pipe: " + ErrnoText(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  char* argv[] = {const_cast<char*>(path.c_str()), const_cast<char*>("--version"), nullptr};
  pid_t pid = -1;
  int spawned = posix_spawn(&pid, path.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  if (spawned != 0) {
    close(out[0]);
    return Warn("claude_code", path + ": cannot run it: " + ErrnoText(spawned) + "; " + install);
  }
  std::string text;
  struct timespec start {};
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    struct timespec now {};
    clock_gettime(CLOCK_MONOTONIC, &now);
    const long left_ms = 15000 - ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
    if (left_ms <= 0) break;
    struct pollfd p = {out[0], POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left_ms)) <= 0) break;
    char buf[256];
    ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0 || text.size() > 4096) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  kill(pid, SIGKILL);  // done, or past its deadline: either way it is not needed any more
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string version = Trim(text.substr(0, text.find(' ')));
  if (version.empty()) return Warn("claude_code", path + " --version printed nothing: agent sessions may not start; " + install);
  if (!expected_version.empty() && version != expected_version) {
    return Warn("claude_code", path + " is " + version + "; corral is tested with " + expected_version +
                                   ": sessions may misread its output; " + install);
  }
  return Ok("claude_code", path + " " + version);
}

std::vector<CheckResult> RunDoctor(const DoctorOptions& options) {
  std::string release = options.kernel_release;
  if (release.empty()) {
    struct utsname u {};
    if (uname(&u) == 0) release = u.release;
  }
  return {CheckKernel(release),
          CheckUserNamespaces(options),
          CheckOverlayfs(options),
          CheckCgroups(options),
          CheckSeccomp(),
          CheckOpenat2(),
          CheckLandlock(),
          CheckPidfdAndClone3(),
          CheckNetworkNamespaces(options),
          CheckStateDir(options.state_dir),
          CheckOpenFiles(options),
          CheckNamespaceLimits(options),
          CheckLayers(options),
          CheckCgroupJoin(options),
          CheckImages(options),
          CheckClaudeCode(options.claude, options.claude_version)};
}

bool AnyFailed(const std::vector<CheckResult>& results) {
  for (const auto& r : results) {
    if (r.level == CheckLevel::kFail) return true;
  }
  return false;
}

std::string FormatDoctor(const std::vector<CheckResult>& results) {
  std::string out;
  for (const auto& r : results) {
    char head[64];
    snprintf(head, sizeof(head), "%-5s %-19s ", CheckLevelName(r.level), r.name.c_str());
    out += head + r.detail + "\n";
  }
  return out;
}

std::string DoctorJson(const std::vector<CheckResult>& results) {
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& r : results) {
    std::string level = CheckLevelName(r.level);
    for (char& c : level) c = static_cast<char>(tolower(c));
    checks.push_back({{"name", r.name}, {"level", level}, {"detail", r.detail}});
  }
  return nlohmann::json{{"ok", !AnyFailed(results)}, {"checks", checks}}.dump();
}

}  // namespace corral::supervisor
