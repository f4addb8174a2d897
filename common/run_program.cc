#include "common/run_program.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "common/unique_fd.h"

namespace corral {

Status RunProgram(const std::vector<std::string>& args) {
  if (args.empty() || args[0].empty() || args[0][0] != '/') return Status::Error("run: not an absolute path", EINVAL);
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& arg : copy) argv.push_back(arg.data());
  argv.push_back(nullptr);
  char* envp[] = {const_cast<char*>("PATH=/usr/sbin:/usr/bin:/sbin:/bin"), const_cast<char*>("LC_ALL=C"), nullptr};
  int err[2];
  if (pipe2(err, O_CLOEXEC) != 0) return ErrnoError("pipe");
  UniqueFd err_read(err[0]), err_write(err[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, err_write.get(), 2);
  pid_t pid;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&actions);
  err_write.reset();
  if (rc != 0) return ErrnoError("run " + args[0], rc);
  std::string said;
  char buf[512];
  for (ssize_t n; (n = read(err_read.get(), buf, sizeof(buf))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    if (said.size() < 2048) said.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return Status();
  if (said.size() > 2048) said.resize(2048);
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
  for (char& c : said) c = c == '\n' ? ' ' : c;
  const std::string how = WIFEXITED(status) ? "exited with " + std::to_string(WEXITSTATUS(status))
                                            : "died of signal " + std::to_string(WTERMSIG(status));
  return Status::Error(args[0] + " " + how + (said.empty() ? "" : ": " + said), EIO);
}

}  // namespace corral
