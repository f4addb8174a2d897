// corral-init: PID 1 of every sandbox.
//
//   corral-init -- CMD [ARGS...]
//   corral-init --control        (the daemon's persistent sandboxes: see control.h)
//
// Starts CMD, forwards the signals a supervisor sends (TERM, INT, HUP, QUIT, USR1, USR2, WINCH,
// CONT) to it, reaps every zombie in the sandbox (orphans are re-parented to PID 1), and exits
// with CMD's status when CMD ends: its exit code, or 128+N when a signal N killed it. When fd 3
// is open (a pipe to the launcher), init writes 'R' there once its signal handlers are in place,
// and at the end the raw wait status of CMD (4 bytes): a PID 1 cannot die of its own signal, so
// this lets the launcher report the signal itself rather than 128+N. When
// PID 1 exits the kernel kills everything left in the sandbox's pid namespace.
//
// Exec'd from a sealed memfd and linked statically: nothing inside the sandbox can replace it,
// and it needs nothing from the image.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "tools/corral-init/control.h"

namespace {

volatile sig_atomic_t g_child = 0;

constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT};

void Forward(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

void WriteAll(int fd, const char* text) {
  size_t len = strlen(text);
  while (len > 0) {
    ssize_t n = write(fd, text, len);
    if (n <= 0) return;
    text += n;
    len -= static_cast<size_t>(n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "--control") == 0) {
    // --listeners=N: fds 4 .. 3+N are listening sockets on the loopback, for the daemon.
    int listeners = 0;
    if (argc == 3 && strncmp(argv[2], "--listeners=", 12) == 0) {
      listeners = atoi(argv[2] + 12);
    } else if (argc != 2) {
      WriteAll(2, "usage: corral-init --control [--listeners=N]\n");
      return 125;
    }
    if (listeners < 0 || listeners > 8) return 125;
    return corral::init::RunControl(listeners);
  }
  int first = 1;
  if (first < argc && strcmp(argv[first], "--") == 0) ++first;
  if (first >= argc) {
    WriteAll(2, "usage: corral-init -- CMD [ARGS...]\n");
    return 125;
  }
  const bool have_status_fd = fcntl(3, F_GETFD) >= 0;

  // Block the forwarded signals until the child exists, so none is lost in between.
  sigset_t forwarded, old;
  sigemptyset(&forwarded);
  for (int sig : kForwarded) sigaddset(&forwarded, sig);
  sigprocmask(SIG_BLOCK, &forwarded, &old);
  struct sigaction action = {};
  action.sa_handler = Forward;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (int sig : kForwarded) sigaction(sig, &action, nullptr);
  // Tell the launcher that signals can be forwarded now: until a pid namespace's init has a
  // handler for a signal, the kernel drops it, so the launcher holds them back until this byte.
  if (have_status_fd) {
    const char ready = 'R';
    ssize_t ignored = write(3, &ready, 1);
    (void)ignored;
  }

  pid_t child = fork();
  if (child < 0) {
    WriteAll(2, "corral-init: fork failed\n");
    return 125;
  }
  if (child == 0) {
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : kForwarded) sigaction(sig, &dfl, nullptr);
    sigprocmask(SIG_SETMASK, &old, nullptr);
    if (have_status_fd) close(3);
    execvp(argv[first], argv + first);
    int err = errno;
    WriteAll(2, "corral-init: cannot run '");
    WriteAll(2, argv[first]);
    WriteAll(2, "': ");
    WriteAll(2, strerror(err));
    WriteAll(2, "\n");
    _exit(err == ENOENT ? 127 : 126);
  }
  g_child = child;
  sigprocmask(SIG_SETMASK, &old, nullptr);

  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      return 125;  // ECHILD: cannot happen while the child has not been reaped.
    }
    if (pid != child) continue;  // An orphan: reaped, nothing else to do.
    if (have_status_fd) {
      ssize_t ignored = write(3, &status, sizeof(status));
      (void)ignored;
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 125;
  }
}
