// The daemon's side of supervisor/commands/init_protocol.h: framing, file descriptors and credentials.
//
// Plain functions over raw fds, usable blocking (tests, recovery) and from the event loop (wait
// for readability, then Receive with `nonblocking`).
#pragma once

#include <chrono>
#include <functional>
#include <map>

#include <sys/types.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "supervisor/commands/init_protocol.h"

namespace corral::supervisor {

struct ExecRequest {
  uint64_t seq = 0;
  uid_t uid = 1000;
  gid_t gid = 1000;
  bool pty = false;
  uint16_t rows = 24;
  uint16_t cols = 80;
  std::string cwd = "/";
  std::vector<std::string> argv;
  std::vector<std::string> env;  // KEY=VALUE
  bool stdin_open = true;         // false: the command's stdin is /dev/null
  // Host ids that get the command's stdio pipes: the command's own (its sandbox's uid base plus
  // uid and gid inside), so that it can reopen them by path (/dev/stdout, /dev/fd/1,
  // /proc/self/fd/1) as a program in a container can. The pipes keep their mode 0600 and
  // reopening goes through /proc/<pid>/fd, which needs ptrace access to a process holding them:
  // the command's own user in its own sandbox, no one else (see SendExec). Unset: they stay
  // root's on the host, which nothing inside can open by path.
  struct HostIds {
    uid_t uid;
    gid_t gid;
  };
  std::optional<HostIds> stdio_owner;
  // Protocol version 1 (init_protocol.h): the files the child writes "0" to, itself, to join the
  // command's cgroup (CgroupBackend::OpenSelfJoin; borrowed: SendExec sends copies). Empty: the
  // version-0 handshake, where the daemon moves the child on its kChildHello.
  std::vector<int> cgroup_join_fds;
};

// The daemon's ends of a command's stdio (non-blocking, close-on-exec).
struct CommandFds {
  UniqueFd sync;      // SEQPACKET, SO_PASSCRED: the child's handshake
  UniqueFd stdin_w;   // not for a PTY, nor when stdin is not open
  UniqueFd stdout_r;  // a PTY's master comes later, over `sync`
  UniqueFd stderr_r;
};

// Makes the pipes (or, for a PTY, only the sync pair), gives them to `stdio_owner` when it is
// set (fchown: a pipe is one inode for both ends), sends kExec with the child's ends and the
// daemon's ends for init to keep, and returns the daemon's ends. A PTY needs nothing of the
// kind: the command opens it itself, as its own user.
StatusOr<CommandFds> SendExec(int control, const ExecRequest& request);
Status SendSignal(int control, uint64_t seq, int signal);
Status SendAck(int control, uint64_t seq);
Status SendCloseStdin(int control, uint64_t seq);
Status SendKeep(int control, uint64_t seq, int fd);
Status SendHello(int control);
Status SendChildGo(int sync);

struct InitMessage {
  initproto::MsgType type{};
  std::vector<char> body;
  std::vector<UniqueFd> fds;
  pid_t sender_pid = 0;  // from SCM_CREDENTIALS (translated to our pid namespace), 0 if none

  template <typename T>
  bool BodyAs(T& out) const {
    if (body.size() < sizeof(T)) return false;
    memcpy(&out, body.data(), sizeof(T));
    return true;
  }
};

// One message. nullopt on EOF. With `nonblocking`, EAGAIN when none is waiting.
StatusOr<std::optional<InitMessage>> ReceiveMessage(int fd, bool nonblocking);

// What init holds, as its answer to kHello tells it.
struct HeldCommand {
  initproto::CommandStateBody state{};
  std::vector<UniqueFd> fds;  // the kept fds still open, by position (see state.fd_mask)
};
struct InitHello {
  std::map<uint64_t, HeldCommand> commands;  // by seq
  std::vector<UniqueFd> listeners;           // the loopback listeners, in the order of the ports
  uint32_t version = 0;                      // the protocol init speaks (initproto::kProtocolVersion)
};

// Says kHello on `control` and reads init's answer up to kHelloDone (init answers at once;
// `timeout` bounds the wait for each message). Messages of other kinds that arrive meanwhile
// (a command's kExited) are given to `other`.
StatusOr<InitHello> Hello(int control, std::chrono::milliseconds timeout,
                          const std::function<void(InitMessage)>& other);

}  // namespace corral::supervisor
