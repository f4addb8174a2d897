// cgwrap: give a command its own memory+pids cgroup, the way a sandbox runtime would, for the
// cold-start benchmark (bench/cold_start.sh). bubblewrap makes no cgroup, so it runs under this.
//
//   cgwrap v1|v2 BASE MEM_BYTES PIDS -- CMD [ARGS...]
//
// v1: mkdir /sys/fs/cgroup/{memory,pids}/BASE/cw-<pid>; v2: mkdir /sys/fs/cgroup/BASE/cw-<pid>
// (BASE must exist; on v2 with +memory +pids in its cgroup.subtree_control). Writes the limits
// (v1: memory.limit_in_bytes and memory.memsw.limit_in_bytes when present = swap off, pids.max;
// v2: memory.max, memory.swap.max=0, pids.max), vforks; the child joins the cgroup(s) and execs
// CMD; the parent waits, rmdirs the cgroup(s) and exits with CMD's status (128+N for a signal).
// Its cost over running CMD directly: one exec of this small static binary, one vfork, 1-2 mkdir,
// 3 limit writes, 1-2 cgroup.procs writes, 1-2 rmdir. (Exit 125: cgwrap itself failed; 127: exec
// of CMD failed.)
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char* what, const char* path) {
  fprintf(stderr, "cgwrap: %s %s: %s\n", what, path, strerror(errno));
  exit(125);
}

// write a string to DIR/FILE; missing files are skipped only when optional
static int put(const char* dir, const char* file, const char* val, int optional) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, file);
  int fd = open(p, O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    if (optional && errno == ENOENT) return 0;
    return -1;
  }
  ssize_t n = write(fd, val, strlen(val));
  int e = errno;
  close(fd);
  errno = e;
  return n == (ssize_t)strlen(val) ? 0 : -1;
}

int main(int argc, char** argv) {
  if (argc < 7 || strcmp(argv[5], "--") != 0) {
    fprintf(stderr, "usage: cgwrap v1|v2 BASE MEM_BYTES PIDS -- CMD [ARGS...]\n");
    return 125;
  }
  const int v2 = strcmp(argv[1], "v2") == 0;
  const char *base = argv[2], *mem = argv[3], *pids = argv[4];
  char dirs[2][256];
  int nd = 0;
  if (v2) {
    snprintf(dirs[nd++], sizeof dirs[0], "/sys/fs/cgroup/%s/cw-%d", base, (int)getpid());
  } else {
    snprintf(dirs[nd++], sizeof dirs[0], "/sys/fs/cgroup/memory/%s/cw-%d", base, (int)getpid());
    snprintf(dirs[nd++], sizeof dirs[0], "/sys/fs/cgroup/pids/%s/cw-%d", base, (int)getpid());
  }
  for (int i = 0; i < nd; i++)
    if (mkdir(dirs[i], 0755) != 0) die("mkdir", dirs[i]);
  if (v2) {
    if (put(dirs[0], "memory.max", mem, 0) || put(dirs[0], "memory.swap.max", "0", 1) ||
        put(dirs[0], "pids.max", pids, 0))
      die("limits in", dirs[0]);
  } else {
    if (put(dirs[0], "memory.limit_in_bytes", mem, 0) ||
        put(dirs[0], "memory.memsw.limit_in_bytes", mem, 1) || put(dirs[1], "pids.max", pids, 0))
      die("limits in", dirs[0]);
  }
  // vfork (no page-table copy): the child joins the cgroup(s) with plain open/write/close on
  // paths prepared here, then execs CMD; the parent waits, then removes the cgroup(s).
  char procs[2][sizeof dirs[0] + 16];  // "%.255s": dirs[i] fits, and gcc can see it
  for (int i = 0; i < nd; i++) snprintf(procs[i], sizeof procs[i], "%.255s/cgroup.procs", dirs[i]);
  pid_t pid = vfork();
  if (pid < 0) die("vfork", "");
  if (pid == 0) {
    for (int i = 0; i < nd; i++) {
      int fd = open(procs[i], O_WRONLY | O_CLOEXEC);
      if (fd < 0 || write(fd, "0", 1) != 1) _exit(125);
      close(fd);
    }
    execv(argv[6], argv + 6);
    _exit(127);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) die("waitpid", "");
  for (int i = 0; i < nd; i++) {
    // an exited (reaped) task can linger in the cgroup for a moment: retry EBUSY briefly
    for (int t = 0; rmdir(dirs[i]) != 0; t++) {
      if (errno != EBUSY || t > 2000) die("rmdir", dirs[i]);
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    }
  }
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  return 128 + WTERMSIG(st);
}
