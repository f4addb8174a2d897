#include "supervisor/commands/init_client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "supervisor/commands/init_frame.h"

namespace corral::supervisor {
namespace {

using initproto::Header;
using initproto::MsgType;

Status Send(int fd, MsgType type, const void* body, size_t size, const std::vector<int>& fds = {}) {
  if (size > initproto::kMaxMessageBytes - sizeof(Header)) {
    return Status::Error("init message too large", E2BIG);
  }
  if (fds.size() > static_cast<size_t>(initproto::kMaxFds)) return Status::Error("too many fds", EINVAL);
  ssize_t n = initproto::SendFrame(fd, type, body, static_cast<uint32_t>(size), fds.data(), fds.size());
  if (n < 0) return ErrnoError("send to corral-init");
  if (static_cast<size_t>(n) != sizeof(Header) + size) return Status::Error("short send to corral-init", EIO);
  return Status();
}

Status MakePipe(UniqueFd& read_end, UniqueFd& write_end) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoError("pipe");
  read_end.reset(fds[0]);
  write_end.reset(fds[1]);
  return Status();
}

Status SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return ErrnoError("O_NONBLOCK");
  return Status();
}

}  // namespace

StatusOr<CommandFds> SendExec(int control, const ExecRequest& request) {
  if (request.argv.empty()) return Status::Error("exec: empty argv", EINVAL);
  if (request.cgroup_join_fds.size() > initproto::kMaxJoinFds) return Status::Error("exec: too many cgroup files", EINVAL);
  CommandFds mine;
  UniqueFd child_sync;
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return ErrnoError("socketpair");
  mine.sync.reset(pair[0]);
  child_sync.reset(pair[1]);
  // Every message the child sends then carries its pid, as seen from here.
  int one = 1;
  if (setsockopt(mine.sync.get(), SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) != 0) {
    return ErrnoError("SO_PASSCRED");
  }
  std::vector<int> fds = {child_sync.get()};
  UniqueFd child_stdin, child_stdout, child_stderr;
  if (!request.pty) {
    if (request.stdin_open) {
      RETURN_IF_ERROR(MakePipe(child_stdin, mine.stdin_w));
    } else {
      child_stdin.reset(open("/dev/null", O_RDONLY | O_CLOEXEC));
      if (!child_stdin) return ErrnoError("open /dev/null");
    }
    RETURN_IF_ERROR(MakePipe(mine.stdout_r, child_stdout));
    RETURN_IF_ERROR(MakePipe(mine.stderr_r, child_stderr));
    if (request.stdio_owner) {
      // A pipe's inode is made owned by whoever made it (root here), mode 0600: the command could
      // not open it by path. /dev/null (a closed stdin) is the host's, 0666: left alone.
      for (const UniqueFd* fd : {&mine.stdin_w, &child_stdout, &child_stderr}) {
        if (*fd && fchown(fd->get(), request.stdio_owner->uid, request.stdio_owner->gid) != 0) {
          return ErrnoError("chown the command's stdio");
        }
      }
    }
    fds.insert(fds.end(), {child_stdin.get(), child_stdout.get(), child_stderr.get()});
  }
  fds.insert(fds.end(), request.cgroup_join_fds.begin(), request.cgroup_join_fds.end());
  if (!request.pty) {
    fds.insert(fds.end(), {mine.stdout_r.get(), mine.stderr_r.get()});
    if (mine.stdin_w) fds.push_back(mine.stdin_w.get());
  }
  initproto::ExecBody body = {};
  body.seq = request.seq;
  body.uid = request.uid;
  body.gid = request.gid;
  body.flags = request.pty ? initproto::kExecPty : 0;
  if (!request.cgroup_join_fds.empty()) {
    body.flags |= initproto::kExecJoinCgroup |
                  (static_cast<uint32_t>(request.cgroup_join_fds.size()) << initproto::kJoinShift);
  }
  body.rows = request.rows;
  body.cols = request.cols;
  body.argc = static_cast<uint32_t>(request.argv.size());
  body.envc = static_cast<uint32_t>(request.env.size());
  body.n_child_fds = (request.pty ? 1 : 4) + static_cast<uint32_t>(request.cgroup_join_fds.size());
  body.n_keep_fds = request.pty ? 0 : (mine.stdin_w ? 3 : 2);
  std::string payload(reinterpret_cast<const char*>(&body), sizeof(body));
  auto add = [&](const std::string& text) -> Status {
    if (text.find('\0') != std::string::npos) return Status::Error("exec: NUL byte in an argument", EINVAL);
    payload += text;
    payload += '\0';
    return Status();
  };
  RETURN_IF_ERROR(add(request.cwd));
  for (const auto& arg : request.argv) RETURN_IF_ERROR(add(arg));
  for (const auto& var : request.env) RETURN_IF_ERROR(add(var));
  RETURN_IF_ERROR(Send(control, MsgType::kExec, payload.data(), payload.size(), fds));
  for (UniqueFd* fd : {&mine.sync, &mine.stdin_w, &mine.stdout_r, &mine.stderr_r}) {
    if (*fd) RETURN_IF_ERROR(SetNonBlocking(fd->get()));
  }
  return mine;
}

Status SendSignal(int control, uint64_t seq, int signal) {
  initproto::SignalBody body = {seq, signal, 0};
  return Send(control, MsgType::kSignal, &body, sizeof(body));
}

Status SendAck(int control, uint64_t seq) {
  initproto::SeqBody body = {seq};
  return Send(control, MsgType::kAck, &body, sizeof(body));
}

Status SendCloseStdin(int control, uint64_t seq) {
  initproto::SeqBody body = {seq};
  return Send(control, MsgType::kCloseStdin, &body, sizeof(body));
}

Status SendKeep(int control, uint64_t seq, int fd) {
  initproto::SeqBody body = {seq};
  return Send(control, MsgType::kKeep, &body, sizeof(body), {fd});
}

Status SendHello(int control) { return Send(control, MsgType::kHello, nullptr, 0); }

Status SendChildGo(int sync) { return Send(sync, MsgType::kChildGo, nullptr, 0); }

StatusOr<std::optional<InitMessage>> ReceiveMessage(int fd, bool nonblocking) {
  static thread_local std::vector<char> buffer(initproto::kMaxMessageBytes);
  InitMessage out;
  bool truncated = false;
  ssize_t n = initproto::ReceiveFrame(fd, buffer.data(), buffer.size(), nonblocking ? MSG_DONTWAIT : 0,
                                      &out.sender_pid, &truncated,
                                      [&out](int received) { out.fds.emplace_back(received); });
  if (n < 0) return ErrnoError("receive from corral-init");
  if (n == 0) return std::optional<InitMessage>();
  if (truncated) return Status::Error("truncated message from corral-init", EMSGSIZE);
  if (static_cast<size_t>(n) < sizeof(Header)) return Status::Error("short message from corral-init", EPROTO);
  Header header;
  memcpy(&header, buffer.data(), sizeof(header));
  if (header.body_size != static_cast<size_t>(n) - sizeof(Header)) {
    return Status::Error("malformed message from corral-init", EPROTO);
  }
  out.type = header.type;
  out.body.assign(buffer.data() + sizeof(Header), buffer.data() + n);
  for (auto& received : out.fds) {
    // Received fds are as blocking as the sender had them; the event loop wants them not to be.
    (void)SetNonBlocking(received.get());
  }
  return std::optional<InitMessage>(std::move(out));
}

StatusOr<InitHello> Hello(int control, std::chrono::milliseconds timeout,
                          const std::function<void(InitMessage)>& other) {
  RETURN_IF_ERROR(SendHello(control));
  InitHello hello;
  for (;;) {
    struct pollfd pfd = {control, POLLIN, 0};
    int ready;
    do {
      ready = poll(&pfd, 1, static_cast<int>(timeout.count()));
    } while (ready < 0 && errno == EINTR);
    if (ready < 0) return ErrnoError("wait for corral-init's hello");
    if (ready == 0) return Status::Error("corral-init did not answer hello", ETIMEDOUT);
    ASSIGN_OR_RETURN(std::optional<InitMessage> message, ReceiveMessage(control, true));
    if (!message) return Status::Error("corral-init closed the connection during hello", ECONNRESET);
    switch (message->type) {
      case MsgType::kHelloDone: {
        initproto::HelloDoneBody done{};
        if (message->BodyAs(done)) hello.version = done.version;  // none: an older init's 0
        return hello;
      }
      case MsgType::kCommandState: {
        HeldCommand held;
        if (!message->BodyAs(held.state)) return Status::Error("bad command state from corral-init", EPROTO);
        held.fds = std::move(message->fds);
        hello.commands[held.state.seq] = std::move(held);
        break;
      }
      case MsgType::kListeners:
        hello.listeners = std::move(message->fds);
        break;
      default:
        if (other) other(std::move(*message));
        break;
    }
  }
}

}  // namespace corral::supervisor
