// The wire format between corrald and corral-init's control mode (`corral-init --control`).
//
// corral-init is PID 1 of a persistent sandbox. Its fd 3 is a listening SOCK_SEQPACKET unix
// socket that the daemon bound at a host path before the launch (<run_dir>/sandboxes/<id>/ctl):
// the path is not mounted inside the sandbox, so only the host can connect. One connection at
// a time; a new one replaces the old (that is how a restarted daemon takes over).
//
// Every message is one datagram: a Header, then the body, with file descriptors as SCM_RIGHTS.
//
//   daemon -> init   kExec      ExecBody + strings; fds: child fds (sync, and stdin, stdout,
//                               stderr unless PTY), then the daemon's own ends to keep:
//                               stdout, stderr and, when the command has a stdin pipe, stdin
//                    kKeep      SeqBody; fds: more to keep for the command (a PTY master)
//                    kSignal    SignalBody: signal the command's process group
//                    kCloseStdin SeqBody: init closes its copy of the command's stdin pipe
//                               (so the daemon's close reaches the command as EOF)
//                    kAck       SeqBody: the daemon has the command's exit and its output;
//                               init closes what it kept and forgets the command
//                    kHello     (no body): init answers one kCommandState per command it holds,
//                               with the kept fds, then kListeners (when it holds any), then
//                               kHelloDone (HelloDoneBody: its protocol version; none: 0)
//   init -> daemon   kExited    ExitedBody, when init reaps a command's main process
//                    kCommandState, kListeners (no body; fds: the loopback listeners, in the
//                               order of the sandbox's ports), kHelloDone
//                    kExecFailed ExecFailedBody: init could not start the child
//
// Starting one command, version 1 (kExecJoinCgroup: the daemon made the command's cgroup and
// sends, after the child's fds, the files that join it: cgroups::CgroupBackend::OpenSelfJoin):
//   init:    clone (CLONE_VM)
//   child:   writes "0" to each join file (it is in the command's own cgroup before it runs
//            anything of the command's; no global cgroup lock, no wait for the daemon), closes
//            them, setsid, drops to the command's user (and every capability), opens its PTY
//            (sends the master as kChildPty), dup2s stdio, chdir, execve. A failed step is
//            kChildFailed {step, errno}; the sync socket is close-on-exec, so EOF means exec'd.
// Version 0 (no kExecJoinCgroup: how a daemon spoke to an init of an older release, still spoken
// to sandboxes that such an init runs): before setsid the child sends kChildHello on sync (the
// daemon holds the other end with SO_PASSCRED set, so the kernel attaches the child's pid as the
// daemon sees it), the daemon writes that pid into the command's cgroup.procs and sends kChildGo.
//
// The daemon's ends of the pipes (and the PTY master) are also held by init, so a daemon that
// dies does not take a command's stdio with it: the command blocks on a full pipe until a new
// daemon connects, says kHello and gets them back.
#pragma once

#include <cstdint>

namespace corral::initproto {

inline constexpr uint32_t kMaxMessageBytes = 256 * 1024;
inline constexpr int kMaxFds = 16;

// What this init speaks (kHelloDone's body); an init without a body speaks 0.
inline constexpr uint32_t kProtocolVersion = 1;

enum class MsgType : uint32_t {
  kHello = 1,
  kExec = 2,
  kKeep = 3,
  kSignal = 4,
  kAck = 5,
  kCloseStdin = 6,
  kExited = 101,
  kCommandState = 102,
  kHelloDone = 103,
  kExecFailed = 104,
  kListeners = 105,  // answer to kHello, before kHelloDone: the loopback listeners, by position
  // On a command's sync socket.
  kChildHello = 201,
  kChildGo = 202,
  kChildPty = 203,
  kChildFailed = 204,
};

struct Header {
  MsgType type;
  uint32_t body_size;
};

inline constexpr uint32_t kExecPty = 1;
// Version 1: the last n of the child fds join the command's cgroup; n = (flags >> kJoinShift) & 0xff.
inline constexpr uint32_t kExecJoinCgroup = 2;
inline constexpr uint32_t kJoinShift = 8;
inline constexpr uint32_t kMaxJoinFds = 8;

// Followed by body_size - sizeof(ExecBody) bytes: cwd, argv[0..argc), env[0..envc), each
// NUL-terminated. fds: n_child_fds for the child (sync first, then stdin, stdout, stderr unless
// PTY, then the join files), then n_keep_fds to keep.
struct ExecBody {
  uint64_t seq;
  uint32_t uid;
  uint32_t gid;
  uint32_t flags;
  uint16_t rows;
  uint16_t cols;
  uint32_t argc;
  uint32_t envc;
  uint32_t n_child_fds;
  uint32_t n_keep_fds;
};

struct HelloDoneBody {
  uint32_t version;
  uint32_t reserved;
};

struct SeqBody {
  uint64_t seq;
};

struct SignalBody {
  uint64_t seq;
  int32_t signal;
  uint32_t reserved;
};

struct ExitedBody {
  uint64_t seq;
  int32_t wait_status;  // as waitpid(2) returns it
  uint32_t reserved;
};

struct ExecFailedBody {
  uint64_t seq;
  int32_t error;
  uint32_t reserved;
};

// Kept fds by position: stdout, stderr, stdin for a pipe command; the master for a PTY.
inline constexpr int kKeptStdout = 0;
inline constexpr int kKeptStderr = 1;
inline constexpr int kKeptStdin = 2;
inline constexpr int kKeptPtyMaster = 0;

// fds: the kept fds still open, in position order; bit i of fd_mask says position i is among
// them (a closed stdin is not).
struct CommandStateBody {
  uint64_t seq;
  int32_t running;      // 1 while the main process has not been reaped
  int32_t wait_status;  // when not running
  int32_t pid;          // inside the sandbox's pid namespace
  uint32_t fd_mask;
};

enum class ChildStep : int32_t {
  kSetsid = 1,
  kCredentials = 2,
  kPty = 3,
  kStdio = 4,
  kChdir = 5,
  kExec = 6,
  kJoinCgroup = 7,
};

struct ChildFailedBody {
  int32_t step;
  int32_t error;
};

inline const char* ChildStepName(int32_t step) {
  switch (static_cast<ChildStep>(step)) {
    case ChildStep::kSetsid: return "setsid";
    case ChildStep::kCredentials: return "set user";
    case ChildStep::kPty: return "open pty";
    case ChildStep::kStdio: return "stdio";
    case ChildStep::kChdir: return "chdir";
    case ChildStep::kExec: return "execve";
    case ChildStep::kJoinCgroup: return "join cgroup";
  }
  return "start command";
}

}  // namespace corral::initproto
