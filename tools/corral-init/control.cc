// corral-init's control mode: PID 1 of a persistent sandbox, running commands for corrald.
//
// The wire format and the start-up handshake of a command are in supervisor/init_protocol.h.
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
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "supervisor/init_protocol.h"

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
  struct iovec iov = {g_buffer, sizeof(g_buffer)};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * initproto::kMaxFds)];
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return n == 0 ? 0 : -1;
  out.fds.clear();
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const int* fds = reinterpret_cast<const int*>(CMSG_DATA(c));
      for (size_t i = 0; i < count; ++i) out.fds.push_back(fds[i]);
    }
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 || static_cast<size_t>(n) < sizeof(Header)) {
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
  Header header = {type, size};
  struct iovec iov[2] = {{&header, sizeof(header)}, {const_cast<void*>(body), size}};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * initproto::kMaxFds)] = {};
  struct msghdr msg = {};
  msg.msg_iov = iov;
  msg.msg_iovlen = size > 0 ? 2 : 1;
  if (nfds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  ssize_t n;
  do {
    n = sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(sizeof(header) + size);
}

// ---- The command's side, from fork to execve ----

[[noreturn]] void ChildFail(int sync, ChildStep step, int error) {
  initproto::ChildFailedBody body = {static_cast<int32_t>(step), error};
  Send(sync, MsgType::kChildFailed, &body, sizeof(body));
  _exit(step == ChildStep::kExec ? (error == ENOENT ? 127 : 126) : 125);
}

struct ExecRequest {
  initproto::ExecBody body{};
  const char* cwd = nullptr;
  std::vector<char*> argv;
  std::vector<char*> env;
};

bool ParseExec(Message& message, ExecRequest& request) {
  if (message.body.size() < sizeof(initproto::ExecBody)) return false;
  memcpy(&request.body, message.body.data(), sizeof(initproto::ExecBody));
  const auto& b = request.body;
  if (b.argc == 0 || b.n_child_fds == 0 || b.n_child_fds + b.n_keep_fds != message.fds.size()) {
    return false;
  }
  const bool pty = (b.flags & initproto::kExecPty) != 0;
  if (b.n_child_fds != (pty ? 1u : 4u) || b.n_keep_fds > (pty ? 1u : 3u)) return false;
  // The strings: cwd, argv, env, each NUL-terminated, nothing after them.
  char* p = message.body.data() + sizeof(initproto::ExecBody);
  char* end = message.body.data() + message.body.size();
  std::vector<char*> strings;
  while (p < end) {
    char* nul = static_cast<char*>(memchr(p, '\0', static_cast<size_t>(end - p)));
    if (nul == nullptr) return false;
    strings.push_back(p);
    p = nul + 1;
  }
  if (strings.size() != 1 + static_cast<size_t>(b.argc) + b.envc) return false;
  request.cwd = strings[0];
  request.argv.assign(strings.begin() + 1, strings.begin() + 1 + b.argc);
  request.argv.push_back(nullptr);
  request.env.assign(strings.begin() + 1 + b.argc, strings.end());
  request.env.push_back(nullptr);
  return true;
}

[[noreturn]] void CommandChild(ExecRequest& request, const std::vector<int>& child_fds) {
  const int sync = child_fds[0];
  sigset_t empty;
  sigemptyset(&empty);
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : kIgnored) sigaction(sig, &dfl, nullptr);
  sigaction(SIGCHLD, &dfl, nullptr);
  sigprocmask(SIG_SETMASK, &empty, nullptr);

  // Barrier 1 and 2: the daemon learns our pid from this message's credentials and puts us in
  // the command's cgroup before we run anything of the command's.
  if (!Send(sync, MsgType::kChildHello, nullptr, 0)) _exit(125);
  Message go;
  if (Receive(sync, go) != 1 || go.header.type != MsgType::kChildGo) _exit(125);

  if (setsid() < 0) ChildFail(sync, ChildStep::kSetsid, errno);
  const uid_t uid = request.body.uid;
  const gid_t gid = request.body.gid;
  if (setgroups(0, nullptr) != 0 || setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0) {
    ChildFail(sync, ChildStep::kCredentials, errno);
  }
  // A uid change has already cleared every capability; for root inside, clear them here.
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capset, &header, data) != 0 ||
      prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    ChildFail(sync, ChildStep::kCredentials, errno);
  }

  if ((request.body.flags & initproto::kExecPty) != 0) {
    // Opened as the command's user, so the terminal belongs to it.
    int master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) ChildFail(sync, ChildStep::kPty, errno);
    int unlock = 0;
    if (ioctl(master, TIOCSPTLCK, &unlock) != 0) ChildFail(sync, ChildStep::kPty, errno);
    struct winsize size = {request.body.rows, request.body.cols, 0, 0};
    if (size.ws_row > 0 && size.ws_col > 0) ioctl(master, TIOCSWINSZ, &size);
    int slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY);
    if (slave < 0) ChildFail(sync, ChildStep::kPty, errno);
    if (!Send(sync, MsgType::kChildPty, nullptr, 0, &master, 1)) _exit(125);
    close(master);
    if (ioctl(slave, TIOCSCTTY, 0) != 0) ChildFail(sync, ChildStep::kPty, errno);
    for (int target = 0; target < 3; ++target) {
      if (dup2(slave, target) != target) ChildFail(sync, ChildStep::kStdio, errno);
    }
    if (slave > 2) close(slave);
  } else {
    for (int target = 0; target < 3; ++target) {
      if (dup2(child_fds[1 + target], target) != target) ChildFail(sync, ChildStep::kStdio, errno);
    }
  }
  if (chdir(request.cwd) != 0) ChildFail(sync, ChildStep::kChdir, errno);
  // execvp searches the PATH of `environ`: make it the command's.
  environ = request.env.data();
  execvp(request.argv[0], request.argv.data());
  ChildFail(sync, ChildStep::kExec, errno);
}

// ---- PID 1 ----

class Controller {
 public:
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
  fcntl(kListenFd, F_SETFD, FD_CLOEXEC);

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
  ExecRequest request;
  if (!ParseExec(message, request)) {
    CloseAll(message.fds);
    return;
  }
  const uint32_t n_child = request.body.n_child_fds;
  std::vector<int> child_fds(message.fds.begin(), message.fds.begin() + n_child);
  std::vector<int> kept(message.fds.begin() + n_child, message.fds.end());
  pid_t pid = fork();
  if (pid == 0) {
    close(kListenFd);
    if (conn_ >= 0) close(conn_);
    close(signal_fd_);
    CommandChild(request, child_fds);
  }
  CloseAll(child_fds);
  if (pid < 0) {
    initproto::ExecFailedBody body = {request.body.seq, errno, 0};
    CloseAll(kept);
    if (conn_ >= 0 && !Send(conn_, MsgType::kExecFailed, &body, sizeof(body))) Drop();
    return;
  }
  Command command;
  command.seq = request.body.seq;
  command.pid = pid;
  command.kept = std::move(kept);
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
  if (!Send(conn_, MsgType::kHelloDone, nullptr, 0)) Drop();
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
        ReportExit(command);
        break;
      }
    }
    // Anything else was an orphan re-parented to us: reaped, nothing to report.
  }
}

}  // namespace

int RunControl() { return Controller().Run(); }

}  // namespace corral::init
