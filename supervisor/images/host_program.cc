#include "supervisor/images/host_program.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "common/unique_fd.h"

namespace corral::supervisor {
namespace {

// In the child, between fork and exec: only async-signal-safe calls on prepared arrays.
[[noreturn]] void ExecHostProgram(const std::vector<char*>& argv, const std::vector<char*>& envp, int out) {
  if (setpgid(0, 0) != 0) _exit(126);  // its group: killed whole when cut short
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) _exit(126);
  if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0) {
    for (int fd = 3; fd < 65536; ++fd) (void)close(fd);
  }
  sigset_t all;
  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  execve(argv[0], argv.data(), envp.data());
  if (argv[0][0] != '/') {
    for (const char* dir : {"/usr/bin/", "/usr/local/bin/", "/bin/"}) {
      char path[4096];
      size_t n = 0;
      for (const char* p = dir; *p != '\0' && n + 1 < sizeof(path); ++p) path[n++] = *p;
      for (const char* p = argv[0]; *p != '\0' && n + 1 < sizeof(path); ++p) path[n++] = *p;
      path[n] = '\0';
      execve(path, argv.data(), envp.data());
    }
  }
  _exit(127);
}

}  // namespace

StatusOr<int> RunHostProgram(const HostProgram& program, const std::function<void(std::string_view)>& output) {
  if (program.argv.empty() || program.argv[0].empty()) return Status::Error("no program to run", EINVAL);
  std::vector<std::string> words = program.argv, env = program.env;
  std::vector<char*> argv, envp;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  for (std::string& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return ErrnoError("pipe");
  UniqueFd out_read(pipe_fds[0]), out_write(pipe_fds[1]);
  const pid_t pid = fork();
  if (pid < 0) return ErrnoError("fork for " + words[0]);
  if (pid == 0) ExecHostProgram(argv, envp, out_write.get());
  out_write.reset();
  (void)setpgid(pid, pid);  // also here: no kill before the child's own setpgid misses the group
  const bool timed = program.timeout.count() > 0;
  const auto deadline = std::chrono::steady_clock::now() + program.timeout;
  bool timed_out = false, stopped = false;
  char buffer[4096];
  for (;;) {
    int wait_ms = program.stop != nullptr ? 1000 : -1;
    if (program.stop != nullptr && program.stop->load()) {
      stopped = true;
      break;
    }
    if (timed) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        timed_out = true;
        break;
      }
      wait_ms = static_cast<int>(std::min<int64_t>(left.count(), 1000));
    }
    struct pollfd fd = {out_read.get(), POLLIN, 0};
    const int ready = poll(&fd, 1, wait_ms);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    const ssize_t n = read(out_read.get(), buffer, sizeof(buffer));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    output(std::string_view(buffer, static_cast<size_t>(n)));
  }
  // Cut short: the whole group (mmdebstrap's apt and dpkg, skopeo's helpers), not only the child.
  if (timed_out || stopped) (void)kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Status::Error(words[0] + " took longer than " + std::to_string(program.timeout.count() / 1000) + " s",
                         ETIMEDOUT);
  }
  if (stopped) return Status::Error(words[0] + " was stopped: the daemon is stopping", ECANCELED);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return Status::Error("cannot run " + words[0], ENOENT);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace corral::supervisor
