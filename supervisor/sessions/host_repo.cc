#include "supervisor/sessions/host_repo.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/syscall.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "common/unique_fd.h"

namespace corral::supervisor {
namespace {

std::optional<std::string> RealPath(const std::string& path) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) return std::nullopt;
  return std::string(resolved);
}

bool IsUnder(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/');
}

std::string LastLines(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  constexpr size_t kMax = 2000;
  if (text.size() > kMax) text = "..." + text.substr(text.size() - kMax);
  return text;
}

// In the child, between fork and exec: no allocation, only async-signal-safe calls.
[[noreturn]] void ExecGit(const char* dir, uid_t uid, gid_t gid, int out, int err) {
  if (dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(126);
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0 || dup2(null, 0) < 0) _exit(126);
  // Nothing else of the daemon's: its sockets, the store, other sandboxes' fds. (close_range:
  // Linux 5.9; older kernels answer ENOSYS and get the loop.)
  if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0) {
    for (int fd = 3; fd < 65536; ++fd) (void)close(fd);
  }
  sigset_t all;
  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  signal(SIGPIPE, SIG_DFL);
  // Raw syscalls: this process has one thread now, and glibc's wrappers would try to reach the
  // parent's others (its setxid broadcast).
  if (uid != 0 || gid != 0) {
    if (syscall(SYS_setgroups, 0, nullptr) != 0 || syscall(SYS_setresgid, gid, gid, gid) != 0 ||
        syscall(SYS_setresuid, uid, uid, uid) != 0) {
      _exit(126);
    }
  }
  if (chdir(dir) != 0) _exit(126);
  const char* argv[] = {"git", "-c", "core.fsmonitor=false", "bundle", "create", "-q", "-", "--all", nullptr};
  const char* envp[] = {"PATH=/usr/bin:/bin", "HOME=/nonexistent", "LC_ALL=C", "GIT_CONFIG_NOSYSTEM=1",
                        "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", nullptr};
  for (const char* git : {"/usr/bin/git", "/usr/local/bin/git", "/bin/git"}) {
    execve(git, const_cast<char* const*>(argv), const_cast<char* const*>(envp));
  }
  _exit(127);
}

}  // namespace

StatusOr<std::string> ResolveAllowedRepo(const std::string& path, const std::vector<std::string>& allowed) {
  if (path.empty() || path[0] != '/') return Status::Error("repo.path: an absolute path on the host", EINVAL);
  const Status refused = Status::Error("repo.path: " + path + " is not under execute.allowed_repo_paths", EPERM);
  if (allowed.empty()) return refused;
  const std::optional<std::string> resolved = RealPath(path);
  for (const std::string& dir : allowed) {
    const std::optional<std::string> real_dir = RealPath(dir);
    if (!real_dir) continue;
    if (!resolved) {
      // Only where the operator allows may a caller learn that a path does not exist.
      if (IsUnder(path, dir)) return Status::Error("repo.path: " + path + " does not exist", EINVAL);
      continue;
    }
    if (!IsUnder(*resolved, *real_dir)) continue;
    struct stat st;
    if (stat(resolved->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return Status::Error("repo.path: " + path + " is not a directory", EINVAL);
    }
    return *resolved;
  }
  return refused;
}

StatusOr<std::string> BundleHostRepo(const std::string& dir, size_t max_bytes, std::chrono::milliseconds timeout) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return ErrnoError("stat " + dir);
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return ErrnoError("pipe");
  UniqueFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return ErrnoError("pipe");
  UniqueFd err_read(err_pipe[0]), err_write(err_pipe[1]);
  const pid_t pid = fork();
  if (pid < 0) return ErrnoError("fork for git");
  if (pid == 0) ExecGit(dir.c_str(), st.st_uid, st.st_gid, out_write.get(), err_write.get());
  out_write.reset();
  err_write.reset();

  std::string out, err;
  Status failure;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool out_open = true, err_open = true;
  while ((out_open || err_open) && failure.ok()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      failure = Status::Error("git bundle create in " + dir + " took longer than " +
                                  std::to_string(timeout.count() / 1000) + " s",
                              ETIMEDOUT);
      break;
    }
    struct pollfd fds[2] = {{out_open ? out_read.get() : -1, POLLIN, 0}, {err_open ? err_read.get() : -1, POLLIN, 0}};
    int ready = poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0) {
      if (errno == EINTR) continue;
      failure = ErrnoError("poll");
      break;
    }
    char buffer[65536];
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        (i == 0 ? out_open : err_open) = false;
        continue;
      }
      if (i == 1) {
        if (err.size() < 65536) err.append(buffer, static_cast<size_t>(n));
        continue;
      }
      if (out.size() + static_cast<size_t>(n) > max_bytes) {
        failure = Status::Error("the bundle of " + dir + " is larger than " + std::to_string(max_bytes) +
                                    " bytes (execute.max_bundle)",
                                EFBIG);
        break;
      }
      out.append(buffer, static_cast<size_t>(n));
    }
  }
  if (!failure.ok()) (void)kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!failure.ok()) return failure;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return out;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return Status::Error("git is not installed on the host", ENOTSUP);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 126) {
    return Status::Error("could not run git as the owner of " + dir, EACCES);
  }
  std::string message = LastLines(err);
  return Status::Error("git bundle create in " + dir + ": " + (message.empty() ? "git failed" : message), EINVAL);
}

}  // namespace corral::supervisor
