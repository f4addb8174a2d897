// corral-init's control mode: PID 1 of a persistent sandbox, running commands for corrald.
//
// The wire format and the start-up handshake of a command are in supervisor/commands/init_protocol.h.
// This process holds CAP_SETUID, CAP_SETGID and CAP_KILL in the sandbox's own user namespace
// (ambient, from the launcher) and nothing else; every command drops them before exec. It is
// not dumpable, so nothing inside the sandbox can reach its file descriptors through /proc.
#include "tools/corral-init/control.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "supervisor/commands/init_frame.h"
#include "supervisor/commands/init_protocol.h"
#include "tools/corral-init/raw_syscall.h"

extern char** environ;

namespace corral::init {
namespace {

using initproto::ChildStep;
using initproto::Header;
using initproto::MsgType;

constexpr int kListenFd = 3;
constexpr int kIgnored[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGTSTP,
                            SIGTTIN, SIGTTOU};

struct Command {
  uint64_t seq = 0;
  pid_t pid = -1;
  bool running = true;
  int wait_status = 0;
  std::vector<int> kept;  // the daemon's ends by position (-1: closed), held across a restart
  std::unique_ptr<struct Spawn> spawn;  // what the child reads until it is reaped
};

struct Message {
  Header header{};
  std::vector<char> body;
  std::vector<int> fds;
};

alignas(Header) char g_buffer[initproto::kMaxMessageBytes];

void CloseAll(std::vector<int>& fds) {
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  fds.clear();
}

// One datagram with up to kMaxFds descriptors (close-on-exec here: children dup2 what they use).
// Returns 0 on EOF, -1 on error, 1 with a message.
int Receive(int fd, Message& out) {
  out.fds.clear();
  bool truncated = false;
  ssize_t n = initproto::ReceiveFrame(fd, g_buffer, sizeof(g_buffer), 0, nullptr, &truncated,
                                      [&out](int received) { out.fds.push_back(received); });
  if (n <= 0) return n == 0 ? 0 : -1;
  if (truncated || static_cast<size_t>(n) < sizeof(Header)) {
    CloseAll(out.fds);
    return -1;
  }
  memcpy(&out.header, g_buffer, sizeof(Header));
  if (out.header.body_size != static_cast<size_t>(n) - sizeof(Header)) {
    CloseAll(out.fds);
    return -1;
  }
  out.body.assign(g_buffer + sizeof(Header), g_buffer + n);
  return 1;
}

bool Send(int fd, MsgType type, const void* body, uint32_t size, const int* fds = nullptr,
          int nfds = 0) {
  return initproto::SendFrame(fd, type, body, size, fds, static_cast<size_t>(nfds)) ==
         static_cast<ssize_t>(sizeof(Header) + size);
}

// ---- The command's side, from clone to execve ----
//
// The child is cloned with CLONE_VM: it runs in PID 1's memory until execve, so starting a
// command copies no page tables and breaks no copy-on-write pages (on a virtualised host, a
// fork of PID 1 and the faults after it were most of a command's start-up). PID 1 goes on
// serving meanwhile. The child therefore reads only its Spawn (kept until the child is reaped),
// writes only its own stack, and makes raw system calls: no errno (PID 1's, shared), no malloc,
// no locks.

// Everything one child reads, at a fixed address until the child is reaped.
struct Spawn {
  initproto::ExecBody body{};
  std::vector<char> strings;  // the message's cwd, argv and env, NUL-terminated
  const char* cwd = nullptr;
  const char* path = nullptr;  // the command's PATH, for the search
  std::vector<char*> argv;     // argc + NULL
  std::vector<char*> sh_argv;  // "/bin/sh", (file), argv[1..], NULL: for a file without #!
  std::vector<char*> env;      // envc + NULL
  // sync, then stdin, stdout, stderr (not for a PTY), then the files that join the cgroup.
  int child_fds[4 + initproto::kMaxJoinFds] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
  uint32_t first_join = 0;  // index of the first join file in child_fds
  uint32_t n_join = 0;
  int close_fds[3] = {-1, -1, -1};  // PID 1's own: the listener, the daemon's connection, signalfd
  void* stack = nullptr;
  size_t stack_bytes = 0;

  ~Spawn() {
    if (stack != nullptr) munmap(stack, stack_bytes);
  }
};

constexpr size_t kChildStackBytes = 64 * 1024;

// Parses an exec request into `spawn` (the body is moved there). fds are not taken.
bool ParseExec(Message& message, Spawn& spawn) {
  if (message.body.size() < sizeof(initproto::ExecBody)) return false;
  memcpy(&spawn.body, message.body.data(), sizeof(initproto::ExecBody));
  const auto& b = spawn.body;
  if (b.argc == 0 || b.n_child_fds == 0 || b.n_child_fds + b.n_keep_fds != message.fds.size()) {
    return false;
  }
  const bool pty = (b.flags & initproto::kExecPty) != 0;
  const uint32_t n_join = (b.flags & initproto::kExecJoinCgroup) != 0 ? (b.flags >> initproto::kJoinShift) & 0xff : 0;
  if ((b.flags & initproto::kExecJoinCgroup) != 0 && (n_join == 0 || n_join > initproto::kMaxJoinFds)) return false;
  if (b.n_child_fds != (pty ? 1u : 4u) + n_join || b.n_keep_fds > (pty ? 1u : 3u)) return false;
  spawn.first_join = b.n_child_fds - n_join;
  spawn.n_join = n_join;
  // The strings: cwd, argv, env, each NUL-terminated, nothing after them.
  spawn.strings.assign(message.body.begin() + sizeof(initproto::ExecBody), message.body.end());
  char* p = spawn.strings.data();
  char* end = p + spawn.strings.size();
  std::vector<char*> strings;
  while (p < end) {
    char* nul = static_cast<char*>(memchr(p, '\0', static_cast<size_t>(end - p)));
    if (nul == nullptr) return false;
    strings.push_back(p);
    p = nul + 1;
  }
  if (strings.size() != 1 + static_cast<size_t>(b.argc) + b.envc) return false;
  spawn.cwd = strings[0];
  spawn.argv.assign(strings.begin() + 1, strings.begin() + 1 + b.argc);
  spawn.argv.push_back(nullptr);
  spawn.env.assign(strings.begin() + 1 + b.argc, strings.end());
  spawn.env.push_back(nullptr);
  static char sh[] = "/bin/sh";
  spawn.sh_argv.push_back(sh);
  spawn.sh_argv.push_back(nullptr);  // the file, set by the child
  spawn.sh_argv.insert(spawn.sh_argv.end(), spawn.argv.begin() + 1, spawn.argv.end());
  // execvp's default when the environment has no PATH.
  spawn.path = "/bin:/usr/bin";
  for (char* var : spawn.env) {
    if (var != nullptr && strncmp(var, "PATH=", 5) == 0) spawn.path = var + 5;
  }
  return true;
}

bool RawSend(int fd, MsgType type, const void* body, uint32_t size, int pass_fd = -1) {
  initproto::OutFrame frame;
  frame.Fill(type, body, size, &pass_fd, pass_fd >= 0 ? 1 : 0);
  return RawSyscallRetry(SYS_sendmsg, fd, &frame.msg, MSG_NOSIGNAL) == static_cast<long>(frame.bytes());
}

[[noreturn]] void RawExit(int code) {
  for (;;) RawSyscall(SYS_exit_group, code);
}

[[noreturn]] void ChildFail(int sync, ChildStep step, long error) {
  initproto::ChildFailedBody body = {static_cast<int32_t>(step), static_cast<int32_t>(error)};
  RawSend(sync, MsgType::kChildFailed, &body, sizeof(body));
  RawExit(step == ChildStep::kExec ? (error == ENOENT ? 127 : 126) : 125);
}

// execvp's search, on the stack: each PATH entry in turn; EACCES is kept if nothing is found; a
// file the kernel cannot execute (no #!) is run by /bin/sh, as POSIX shells and execvp do.
long ExecSearch(const Spawn& spawn) {
  const char* file = spawn.argv[0];
  char** env = const_cast<char**>(spawn.env.data());
  auto exec = [&](const char* path) {
    long rc = RawSyscall(SYS_execve, path, spawn.argv.data(), env);
    if (rc == -ENOEXEC) {
      char** sh = const_cast<char**>(spawn.sh_argv.data());
      sh[1] = const_cast<char*>(path);  // our own copy of the memory is about to go
      rc = RawSyscall(SYS_execve, "/bin/sh", sh, env);
    }
    return rc;
  };
  if (file[0] == '\0') return -ENOENT;
  if (strchr(file, '/') != nullptr) return exec(file);
  const size_t file_len = strlen(file);
  char candidate[4096];
  bool denied = false;
  for (const char* dir = spawn.path;;) {
    const char* colon = strchr(dir, ':');
    const size_t dir_len = colon != nullptr ? static_cast<size_t>(colon - dir) : strlen(dir);
    if (dir_len + 1 + file_len < sizeof(candidate)) {
      size_t n = 0;
      if (dir_len == 0) {
        candidate[n++] = '.';  // an empty entry is the working directory
      } else {
        memcpy(candidate, dir, dir_len);
        n = dir_len;
      }
      candidate[n++] = '/';
      memcpy(candidate + n, file, file_len + 1);
      long rc = exec(candidate);
      switch (-rc) {
        case EACCES:
          denied = true;
          break;
        case ENOENT:
        case ENOTDIR:
        case ESTALE:
        case ENODEV:
        case ETIMEDOUT:
        case ELOOP:
        case ENAMETOOLONG:
          break;
        default:
          return rc;
      }
    }
    if (colon == nullptr) break;
    dir = colon + 1;
  }
  return denied ? -EACCES : -ENOENT;
}

int CommandChild(void* arg) {
  const Spawn& spawn = *static_cast<const Spawn*>(arg);
  const int sync = spawn.child_fds[0];
  for (int fd : spawn.close_fds) {
    if (fd >= 0) RawSyscall(SYS_close, fd);
  }
  // Default dispositions (PID 1 ignores the usual termination signals), then an empty mask (we
  // start with every signal blocked, see OnExec; PID 1 blocks SIGCHLD for its signalfd): a
  // signal sent to us meanwhile acts now. The kernel's struct sigaction: handler, flags,
  // restorer, mask.
  struct {
    void* handler;
    unsigned long flags;
    void* restorer;
    uint64_t mask;
  } dfl = {nullptr /* SIG_DFL */, 0, nullptr, 0};
  for (int sig : kIgnored) RawSyscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof(uint64_t));
  RawSyscall(SYS_rt_sigaction, SIGCHLD, &dfl, nullptr, sizeof(uint64_t));
  const uint64_t empty = 0;
  RawSyscall(SYS_rt_sigprocmask, SIG_SETMASK, &empty, nullptr, sizeof(uint64_t));

  long rc;
  if (spawn.n_join > 0) {
    // Into the command's own cgroup before we run anything of the command's: "0" moves us.
    for (uint32_t i = 0; i < spawn.n_join; ++i) {
      const int fd = spawn.child_fds[spawn.first_join + i];
      if ((rc = RawSyscallRetry(SYS_write, fd, "0", 1)) != 1) ChildFail(sync, ChildStep::kJoinCgroup, rc < 0 ? -rc : EIO);
      RawSyscall(SYS_close, fd);
    }
  } else {
    // Version 0: the daemon learns our pid from this message's credentials and puts us in the
    // command's cgroup, then says go.
    if (!RawSend(sync, MsgType::kChildHello, nullptr, 0)) RawExit(125);
    Header go = {};
    struct iovec iov = {&go, sizeof(go)};
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (RawSyscallRetry(SYS_recvmsg, sync, &msg, MSG_CMSG_CLOEXEC) != sizeof(go) || go.type != MsgType::kChildGo) {
      RawExit(125);
    }
  }

  if ((rc = RawSyscall(SYS_setsid)) < 0) ChildFail(sync, ChildStep::kSetsid, -rc);
  const long uid = spawn.body.uid;
  const long gid = spawn.body.gid;
  if ((rc = RawSyscall(SYS_setgroups, 0, nullptr)) < 0 || (rc = RawSyscall(SYS_setresgid, gid, gid, gid)) < 0 ||
      (rc = RawSyscall(SYS_setresuid, uid, uid, uid)) < 0) {
    ChildFail(sync, ChildStep::kCredentials, -rc);
  }
  // A uid change has already cleared every capability; for root inside, clear them here.
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if ((rc = RawSyscall(SYS_capset, &header, data)) < 0 ||
      (rc = RawSyscall(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)) < 0) {
    ChildFail(sync, ChildStep::kCredentials, -rc);
  }

  if ((spawn.body.flags & initproto::kExecPty) != 0) {
    // Opened as the command's user, so the terminal belongs to it.
    const long master = RawSyscall(SYS_openat, AT_FDCWD, "/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) ChildFail(sync, ChildStep::kPty, -master);
    int unlock = 0;
    if ((rc = RawSyscall(SYS_ioctl, master, TIOCSPTLCK, &unlock)) < 0) ChildFail(sync, ChildStep::kPty, -rc);
    struct winsize size = {spawn.body.rows, spawn.body.cols, 0, 0};
    if (size.ws_row > 0 && size.ws_col > 0) RawSyscall(SYS_ioctl, master, TIOCSWINSZ, &size);
    const long slave = RawSyscall(SYS_ioctl, master, TIOCGPTPEER, O_RDWR | O_NOCTTY);
    if (slave < 0) ChildFail(sync, ChildStep::kPty, -slave);
    if (!RawSend(sync, MsgType::kChildPty, nullptr, 0, static_cast<int>(master))) RawExit(125);
    RawSyscall(SYS_close, master);
    if ((rc = RawSyscall(SYS_ioctl, slave, TIOCSCTTY, 0)) < 0) ChildFail(sync, ChildStep::kPty, -rc);
    for (int target = 0; target < 3; ++target) {
      if ((rc = RawSyscall(SYS_dup3, slave, target, 0)) < 0 && !(rc == -EINVAL && slave == target)) {
        ChildFail(sync, ChildStep::kStdio, -rc);
      }
    }
    if (slave > 2) RawSyscall(SYS_close, slave);
  } else {
    for (int target = 0; target < 3; ++target) {
      const int from = spawn.child_fds[1 + target];
      // dup3 refuses from == to (dup2 would keep it, and keep its close-on-exec).
      if (from == target) {
        rc = RawSyscall(SYS_fcntl, from, F_SETFD, 0);
      } else {
        rc = RawSyscall(SYS_dup3, from, target, 0);
      }
      if (rc < 0) ChildFail(sync, ChildStep::kStdio, -rc);
    }
  }
  if ((rc = RawSyscall(SYS_chdir, spawn.cwd)) < 0) ChildFail(sync, ChildStep::kChdir, -rc);
  ChildFail(sync, ChildStep::kExec, -ExecSearch(spawn));
}

// ---- PID 1 ----

class Controller {
 public:
  explicit Controller(int listeners) : listeners_(listeners) {}
  int Run();

 private:
  void Accept();
  void Drop();
  void OnMessage(Message& message);
  void OnExec(Message& message);
  void OnHello();
  void ReapChildren();
  Command* Find(uint64_t seq);
  void ReportExit(const Command& command);

  int conn_ = -1;
  int signal_fd_ = -1;
  int listeners_ = 0;  // fds kListenFd + 1 ...
  std::vector<Command> commands_;
};

int Controller::Run() {
  // Nothing inside may read our fds through /proc or signal us into exiting.
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // The launcher's stdio are the daemon's; PID 1 has no use for them.
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    for (int fd = 0; fd < 3; ++fd) dup2(null, fd);
    if (null > 2) close(null);
  }
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  for (int sig : kIgnored) sigaction(sig, &ignore, nullptr);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, nullptr);
  signal_fd_ = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) return 125;
  // The control listener and the loopback listeners stay here: no command inherits them.
  for (int fd = kListenFd; fd <= kListenFd + listeners_; ++fd) fcntl(fd, F_SETFD, FD_CLOEXEC);

  for (;;) {
    struct pollfd fds[3] = {{signal_fd_, POLLIN, 0}, {kListenFd, POLLIN, 0}, {conn_, POLLIN, 0}};
    if (poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      return 125;
    }
    if (fds[0].revents & POLLIN) ReapChildren();
    if (fds[1].revents & POLLIN) Accept();
    if (conn_ >= 0 && (fds[2].revents & (POLLIN | POLLHUP | POLLERR))) {
      Message message;
      int got = Receive(conn_, message);
      if (got <= 0) {
        Drop();
      } else {
        OnMessage(message);
      }
    }
  }
}

void Controller::Accept() {
  int fd = accept4(kListenFd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return;
  // The newest connection wins: a restarted daemon replaces the one that died.
  Drop();
  conn_ = fd;
  // A daemon that stops reading must not wedge PID 1: sends give up after a second, and the
  // connection is dropped (the daemon reconnects and asks for the state again).
  struct timeval timeout = {1, 0};
  setsockopt(conn_, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
}

void Controller::Drop() {
  if (conn_ >= 0) close(conn_);
  conn_ = -1;
}

Command* Controller::Find(uint64_t seq) {
  for (auto& command : commands_) {
    if (command.seq == seq) return &command;
  }
  return nullptr;
}

void Controller::OnMessage(Message& message) {
  switch (message.header.type) {
    case MsgType::kExec:
      OnExec(message);
      return;
    case MsgType::kHello:
      CloseAll(message.fds);
      OnHello();
      return;
    case MsgType::kKeep:
    case MsgType::kSignal:
    case MsgType::kAck:
    case MsgType::kCloseStdin:
      break;
    default:
      CloseAll(message.fds);
      return;
  }
  if (message.body.size() < sizeof(uint64_t)) {
    CloseAll(message.fds);
    return;
  }
  uint64_t seq;
  memcpy(&seq, message.body.data(), sizeof(seq));
  Command* command = Find(seq);
  if (command == nullptr) {
    CloseAll(message.fds);
    return;
  }
  if (message.header.type == MsgType::kKeep) {
    command->kept.insert(command->kept.end(), message.fds.begin(), message.fds.end());
    return;
  }
  CloseAll(message.fds);
  if (message.header.type == MsgType::kSignal && message.body.size() >= sizeof(initproto::SignalBody)) {
    initproto::SignalBody body;
    memcpy(&body, message.body.data(), sizeof(body));
    if (command->running && body.signal > 0 && body.signal < 65) {
      // The command leads its own session and process group.
      if (kill(-command->pid, body.signal) != 0) kill(command->pid, body.signal);
    }
  } else if (message.header.type == MsgType::kCloseStdin) {
    const size_t stdin_slot = initproto::kKeptStdin;
    if (command->kept.size() > stdin_slot && command->kept[stdin_slot] >= 0) {
      close(command->kept[stdin_slot]);
      command->kept[stdin_slot] = -1;
    }
  } else if (message.header.type == MsgType::kAck && !command->running) {
    CloseAll(command->kept);
    commands_.erase(commands_.begin() + (command - commands_.data()));
  }
}

void Controller::OnExec(Message& message) {
  auto spawn = std::make_unique<Spawn>();
  if (!ParseExec(message, *spawn)) {
    CloseAll(message.fds);
    return;
  }
  const uint32_t n_child = spawn->body.n_child_fds;
  for (uint32_t i = 0; i < n_child; ++i) spawn->child_fds[i] = message.fds[i];
  std::vector<int> kept(message.fds.begin() + n_child, message.fds.end());
  spawn->close_fds[0] = kListenFd;
  spawn->close_fds[1] = conn_;
  spawn->close_fds[2] = signal_fd_;
  int error = 0;
  pid_t pid = -1;
  spawn->stack_bytes = kChildStackBytes;
  spawn->stack = mmap(nullptr, spawn->stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (spawn->stack == MAP_FAILED) {
    spawn->stack = nullptr;
    error = errno;
  } else {
    // The lowest page stays unmapped: an overflow faults instead of writing PID 1's memory.
    mprotect(spawn->stack, 4096, PROT_NONE);
    // The child starts with every signal blocked: until it has reset the dispositions it
    // inherits from PID 1 (which ignores SIGTERM, SIGINT, ...), a signal the daemon sends it (a
    // `signal` request right after `exec`) would be discarded as ignored; blocked, it is kept
    // pending and acts, with its default action, once the child unblocks it.
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    pid = clone(CommandChild, static_cast<char*>(spawn->stack) + spawn->stack_bytes, CLONE_VM | SIGCHLD,
                spawn.get());
    if (pid < 0) error = errno;
    sigprocmask(SIG_SETMASK, &old, nullptr);
  }
  for (uint32_t i = 0; i < n_child; ++i) close(spawn->child_fds[i]);
  if (pid < 0) {
    initproto::ExecFailedBody body = {spawn->body.seq, error, 0};
    CloseAll(kept);
    if (conn_ >= 0 && !Send(conn_, MsgType::kExecFailed, &body, sizeof(body))) Drop();
    return;
  }
  Command command;
  command.seq = spawn->body.seq;
  command.pid = pid;
  command.kept = std::move(kept);
  command.spawn = std::move(spawn);
  commands_.push_back(std::move(command));
}

void Controller::OnHello() {
  for (const auto& command : commands_) {
    std::vector<int> open_fds;
    uint32_t mask = 0;
    for (size_t i = 0; i < command.kept.size() && i < 32; ++i) {
      if (command.kept[i] < 0) continue;
      open_fds.push_back(command.kept[i]);
      mask |= 1u << i;
    }
    initproto::CommandStateBody body = {command.seq, command.running ? 1 : 0, command.wait_status,
                                        command.pid, mask};
    if (!Send(conn_, MsgType::kCommandState, &body, sizeof(body), open_fds.data(),
              static_cast<int>(open_fds.size()))) {
      Drop();
      return;
    }
  }
  if (listeners_ > 0) {
    int fds[initproto::kMaxFds];
    for (int i = 0; i < listeners_; ++i) fds[i] = kListenFd + 1 + i;
    if (!Send(conn_, MsgType::kListeners, nullptr, 0, fds, listeners_)) {
      Drop();
      return;
    }
  }
  const initproto::HelloDoneBody done = {initproto::kProtocolVersion, 0};
  if (!Send(conn_, MsgType::kHelloDone, &done, sizeof(done))) Drop();
}

void Controller::ReportExit(const Command& command) {
  if (conn_ < 0) return;  // the next kHello reports it
  initproto::ExitedBody body = {command.seq, command.wait_status, 0};
  if (!Send(conn_, MsgType::kExited, &body, sizeof(body))) Drop();
}

void Controller::ReapChildren() {
  struct signalfd_siginfo info;
  while (read(signal_fd_, &info, sizeof(info)) == sizeof(info)) {
  }
  for (;;) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (auto& command : commands_) {
      if (command.pid == pid && command.running) {
        command.running = false;
        command.wait_status = status;
        command.spawn.reset();
        ReportExit(command);
        break;
      }
    }
    // Anything else was an orphan re-parented to us: reaped, nothing to report.
  }
}

}  // namespace

int RunControl(int listeners) { return Controller(listeners).Run(); }

}  // namespace corral::init
