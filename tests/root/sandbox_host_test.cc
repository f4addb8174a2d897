// A persistent sandbox driven by hand through corral-init's control protocol: the layer under
// corrald, tested on the real kernel without the daemon.
#include "supervisor/sandboxes/sandbox_host.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <thread>

#include "cgroups/cgroup_backend.h"
#include "common/file_util.h"
#include "isolation/cpu_affinity.h"
#include "supervisor/ids.h"
#include "supervisor/commands/init_client.h"
#include "tests/root/host_sandbox_shape.h"
#include "tests/root/sandbox_host_fixture.h"
#include "tests/root/init_test_util.h"
#include "tests/root/root_test_util.h"

namespace corral::supervisor {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class SandboxHostTest : public SandboxHostFixture {};

TEST_F(SandboxHostTest, RunsCommandsAsTheAgentWithTheirOwnStdio) {
  StartSandbox();
  Finished result = Run(Sh("echo out; echo err >&2; id -u; pwd; exit 3"));
  ASSERT_TRUE(WIFEXITED(result.wait_status));
  EXPECT_EQ(WEXITSTATUS(result.wait_status), 3);
  EXPECT_EQ(result.out, "out\n1000\n/home/agent\n");
  EXPECT_EQ(result.err, "err\n");
}

TEST_F(SandboxHostTest, CommandsHoldNoCapabilitiesEvenAsRootInside) {
  StartSandbox();
  // Positive control: init itself holds exactly SETUID, SETGID and KILL (bits 7, 6 and 5).
  auto init_status = ReadFileToString("/proc/" + std::to_string(running_->pid) + "/status");
  ASSERT_TRUE(init_status.ok());
  EXPECT_THAT(*init_status, HasSubstr("CapEff:\t00000000000000e0"));
  Finished result = Run(Sh("grep -E '^(Uid|CapEff|CapPrm|CapAmb|NoNewPrivs)' /proc/self/status", 0));
  EXPECT_THAT(result.out, HasSubstr("CapEff:\t0000000000000000"));
  EXPECT_THAT(result.out, HasSubstr("CapPrm:\t0000000000000000"));
  EXPECT_THAT(result.out, HasSubstr("CapAmb:\t0000000000000000"));
  EXPECT_THAT(result.out, HasSubstr("NoNewPrivs:\t1"));
  EXPECT_THAT(result.out, HasSubstr("Uid:\t0\t0\t0\t0"));
}

TEST_F(SandboxHostTest, EachCommandRunsInItsOwnCgroup) {
  StartSandbox();
  Finished result = Run(Sh("cat /proc/self/cgroup; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"));
  EXPECT_GT(result.stats.cpu_usage_usec, 0u);
  EXPECT_THAT(result.out, HasSubstr("cmd-1"));
  // The command's cgroup is gone once it has finished; the sandbox's stays while it runs.
  auto children = host_->backend().ListChildren(host_->SandboxCgroup(shape_.id));
  ASSERT_TRUE(children.ok());
  EXPECT_THAT(*children, ::testing::ElementsAre(host_->SandboxCgroup(shape_.id) + "/init"));
}

// The child joins its cgroup before anything of the command's runs: a join file it cannot write
// (here one open read-only) is a setup failure, and the program never starts. Control: the same
// command with the real files runs.
TEST_F(SandboxHostTest, ACommandThatCannotJoinItsCgroupNeverRuns) {
  StartSandbox();
  ExecRequest request = Sh("touch /tmp/ran");
  UniqueFd read_only(open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(read_only);
  request.cgroup_join_fds = {read_only.get()};
  Finished refused = Run(request);
  EXPECT_EQ(refused.failed_step, static_cast<int>(initproto::ChildStep::kJoinCgroup));
  EXPECT_EQ(refused.failed_errno, EBADF);
  EXPECT_TRUE(WIFEXITED(refused.wait_status) && WEXITSTATUS(refused.wait_status) == 125) << refused.wait_status;
  EXPECT_EQ(Run(Sh("test -e /tmp/ran && echo ran || echo absent")).out, "absent\n");
  Finished control = Run(Sh("touch /tmp/ran && cat /proc/self/cgroup"));
  EXPECT_EQ(control.failed_step, 0);
  EXPECT_THAT(control.out, HasSubstr(":/cmd-3\n"));
  EXPECT_EQ(Run(Sh("test -e /tmp/ran && echo ran || echo absent")).out, "ran\n");
}

// An init of this release says which protocol it speaks; the daemon gives its children the join
// files only then (an init without a version gets the version-0 handshake, below).
TEST_F(SandboxHostTest, InitSaysItsProtocolVersion) {
  StartSandbox();
  auto hello = Hello(running_->control.get(), std::chrono::seconds(5), nullptr);
  ASSERT_TRUE(hello.ok()) << hello.status().ToString();
  EXPECT_EQ(hello->version, initproto::kProtocolVersion);
  EXPECT_GE(hello->version, 1u);
}

TEST_F(SandboxHostTest, AMissingProgramIsAnExecFailureWithItsErrno) {
  StartSandbox();
  ExecRequest request = Sh("");
  request.argv = {"/no/such/program"};
  Finished result = Run(request);
  EXPECT_EQ(result.failed_step, static_cast<int>(initproto::ChildStep::kExec));
  EXPECT_EQ(result.failed_errno, ENOENT);
  ASSERT_TRUE(WIFEXITED(result.wait_status));
  EXPECT_EQ(WEXITSTATUS(result.wait_status), 127);
  // Positive control: a program that exists runs.
  request.argv = {"/bin/true"};
  EXPECT_EQ(Run(request).failed_step, 0);
}

// corral-init starts commands with CLONE_VM and its own PATH search (execvp's is not safe in a
// child that shares its parent's memory): it must find what execvp finds and fail as it fails.
TEST_F(SandboxHostTest, ThePathSearchFindsWhatExecvpFinds) {
  StartSandbox();
  // Setup: a directory with a script without #!, one not executable, and one that is.
  ASSERT_EQ(Run(Sh("mkdir -p bin && printf 'echo no-shebang \"$@\"\\n' > bin/plain && chmod 755 bin/plain && "
                   "printf '#!/bin/sh\\necho denied\\n' > bin/noexec && chmod 644 bin/noexec && "
                   "cp bin/noexec bin/runs && chmod 755 bin/runs && printf '#!/bin/sh\\necho second\\n' > "
                   "bin/second && chmod 755 bin/second"))
                .wait_status,
            0);
  ExecRequest request = Sh("");
  request.env = {"PATH=/nonexistent:/home/agent/bin:/usr/bin", "HOME=/home/agent"};
  // Found in a later PATH entry, the earlier one missing.
  request.argv = {"runs"};
  Finished found = Run(request);
  EXPECT_EQ(found.failed_step, 0);
  EXPECT_EQ(found.out, "denied\n");
  EXPECT_EQ(found.wait_status, 0);
  // A file the kernel cannot execute (no #!) is run by /bin/sh, with its arguments.
  request.argv = {"plain", "a", "b c"};
  Finished plain = Run(request);
  EXPECT_EQ(plain.failed_step, 0);
  EXPECT_EQ(plain.out, "no-shebang a b c\n");
  // Not executable, and nothing further on the PATH: EACCES (126), not ENOENT.
  request.argv = {"noexec"};
  Finished denied = Run(request);
  EXPECT_EQ(denied.failed_step, static_cast<int>(initproto::ChildStep::kExec));
  EXPECT_EQ(denied.failed_errno, EACCES);
  ASSERT_TRUE(WIFEXITED(denied.wait_status));
  EXPECT_EQ(WEXITSTATUS(denied.wait_status), 126);
  // Not anywhere: ENOENT (127).
  request.argv = {"no-such-command-anywhere"};
  Finished missing = Run(request);
  EXPECT_EQ(missing.failed_errno, ENOENT);
  ASSERT_TRUE(WIFEXITED(missing.wait_status));
  EXPECT_EQ(WEXITSTATUS(missing.wait_status), 127);
  // A denied file earlier on the PATH does not hide an executable one further on.
  request.env = {"PATH=/home/agent/bin:/usr/bin", "HOME=/home/agent"};
  ASSERT_EQ(Run(Sh("cp bin/noexec bin/second_denied && mkdir -p bin2 && cp bin/second bin2/second_denied"))
                .wait_status,
            0);
  request.env = {"PATH=/home/agent/bin:/home/agent/bin2", "HOME=/home/agent"};
  request.argv = {"second_denied"};
  Finished later = Run(request);
  EXPECT_EQ(later.failed_step, 0);
  EXPECT_EQ(later.out, "second\n");
  // Without PATH in the environment, execvp's default (/bin:/usr/bin) is searched.
  request.env = {"HOME=/home/agent"};
  request.argv = {"true"};
  EXPECT_EQ(Run(request).wait_status, 0);
}

// PID 1 ignores the usual termination signals and blocks SIGCHLD; a command gets the defaults.
TEST_F(SandboxHostTest, ACommandStartsWithDefaultSignalsAndAnEmptyMask) {
  StartSandbox();
  ExecRequest request = Sh("");
  request.argv = {"grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"};
  Finished result = Run(request);
  EXPECT_THAT(result.out, HasSubstr("SigIgn:\t0000000000000000"));
  EXPECT_THAT(result.out, HasSubstr("SigBlk:\t0000000000000000"));
  // Positive control: init itself (serving us, so past its set-up) ignores some and blocks
  // SIGCHLD (bit 17 = 0x10000).
  auto init_status = ReadFileToString("/proc/" + std::to_string(running_->pid) + "/status");
  ASSERT_TRUE(init_status.ok());
  EXPECT_THAT(*init_status, ::testing::Not(HasSubstr("SigIgn:\t0000000000000000")));
  EXPECT_THAT(*init_status, HasSubstr("SigBlk:\t0000000000010000"));
}

TEST_F(SandboxHostTest, APtyCommandHasAControllingTerminalOwnedByItsUser) {
  StartSandbox();
  ExecRequest request = Sh("tty; stat -c %u $(tty); stty size");
  request.pty = true;
  request.rows = 33;
  request.cols = 101;
  Finished result = Run(request);
  EXPECT_THAT(result.out, HasSubstr("/dev/pts/0"));
  EXPECT_THAT(result.out, HasSubstr("1000"));
  EXPECT_THAT(result.out, HasSubstr("33 101"));
}

// Also the version-0 handshake (how the daemon starts commands in a sandbox whose init is of an
// older release, and how an older daemon speaks to this init): the child says hello, the daemon
// moves it into its cgroup and says go.
TEST_F(SandboxHostTest, ARestartedDaemonGetsTheRunningCommandAndItsPipesBack) {
  StartSandbox();
  ExecRequest request = Sh("echo before; read line; echo after:$line");
  request.seq = ++seq_;
  auto fds = SendExec(running_->control.get(), request);
  ASSERT_TRUE(fds.ok());
  auto hello = Expect(fds->sync.get(), MsgType::kChildHello);
  ASSERT_TRUE(hello.has_value());
  ASSERT_TRUE(host_->CreateCommandCgroup(shape_.id, request.seq).ok());
  ASSERT_TRUE(host_->backend().Attach(host_->CommandCgroup(shape_.id, request.seq), hello->sender_pid).ok());
  ASSERT_TRUE(SendChildGo(fds->sync.get()).ok());
  auto where = host_->backend().ProcessCgroup(hello->sender_pid);
  ASSERT_TRUE(where.ok()) << where.status().ToString();
  EXPECT_EQ(*where, host_->CommandCgroup(shape_.id, request.seq));
  // The daemon "dies": every fd it had goes.
  fds = CommandFds();
  running_->control.reset();

  auto control = ConnectControl(host_->ControlPath(shape_.id));
  ASSERT_TRUE(control.ok()) << control.status().ToString();
  running_->control = std::move(*control);
  ASSERT_TRUE(SendHello(running_->control.get()).ok());
  auto state = Expect(running_->control.get(), MsgType::kCommandState);
  ASSERT_TRUE(state.has_value());
  initproto::CommandStateBody body;
  ASSERT_TRUE(state->BodyAs(body));
  EXPECT_EQ(body.seq, request.seq);
  EXPECT_EQ(body.running, 1);
  ASSERT_EQ(state->fds.size(), 3u);
  EXPECT_EQ(body.fd_mask, 7u);
  ASSERT_TRUE(Expect(running_->control.get(), MsgType::kHelloDone).has_value());
  // The command is still there, blocked on its stdin: the pipes survived. Kept fds come back
  // as stdout, stderr, stdin.
  ASSERT_EQ(write(state->fds[2].get(), "x\n", 2), 2);
  state->fds[2].reset();
  ASSERT_TRUE(SendCloseStdin(running_->control.get(), request.seq).ok());
  std::string out = Drain(state->fds[0].get());
  EXPECT_EQ(out, "before\nafter:x\n");
  auto exited = Expect(running_->control.get(), MsgType::kExited);
  ASSERT_TRUE(exited.has_value());
  ASSERT_TRUE(host_->FinishCommandCgroup(shape_.id, request.seq).ok());
  ASSERT_TRUE(SendAck(running_->control.get(), request.seq).ok());
}

// The daemon's services on the sandbox's loopback: init listens on the sandbox's ports from its
// start, holds the sockets, and hands them to every daemon that says hello.
TEST_F(SandboxHostTest, LoopbackListenersReachTheDaemonAndOnlyThem) {
  shape_.loopback_ports = {7880, 7881};
  StartSandbox();
  auto hello = Hello(running_->control.get(), std::chrono::seconds(5), nullptr);
  ASSERT_TRUE(hello.ok()) << hello.status().ToString();
  ASSERT_EQ(hello->listeners.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    struct sockaddr_in address = {};
    socklen_t length = sizeof(address);
    ASSERT_EQ(getsockname(hello->listeners[i].get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
    EXPECT_EQ(ntohs(address.sin_port), shape_.loopback_ports[i]);
    EXPECT_EQ(ntohl(address.sin_addr.s_addr), INADDR_LOOPBACK);
  }
  // A command inside connects to the first port: the daemon's end accepts and answers.
  const int listener = hello->listeners[0].get();
  std::string received;
  std::thread server([&] {
    struct pollfd pfd = {listener, POLLIN, 0};
    if (poll(&pfd, 1, 10000) != 1) return;
    UniqueFd connection(accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
    if (!connection) return;
    char buffer[64];
    ssize_t n = read(connection.get(), buffer, sizeof(buffer));
    if (n > 0) received.assign(buffer, static_cast<size_t>(n));
    (void)!write(connection.get(), "pong\n", 5);
  });
  Finished talked = Run(Sh("exec bash -c 'exec 3<>/dev/tcp/127.0.0.1/7880 && echo ping >&3 && read -r l <&3 && echo $l'"));
  server.join();
  EXPECT_EQ(received, "ping\n");
  EXPECT_EQ(talked.out, "pong\n");
  EXPECT_EQ(talked.wait_status, 0) << talked.err;
  // A port nobody listens on is refused: the loopback has exactly the daemon's services.
  Finished refused = Run(Sh("exec bash -c 'exec 3<>/dev/tcp/127.0.0.1/7882'"));
  EXPECT_NE(refused.wait_status, 0);
  EXPECT_THAT(refused.err, HasSubstr("Connection refused"));
  // No command inherits init's sockets: only its own stdio (pipes) and ls's directory.
  Finished fds = Run(Sh("ls -l /proc/self/fd/ | grep -c socket: || true"));
  EXPECT_EQ(fds.out, "0\n");
  // A daemon that comes back (a new connection, another hello) gets the same sockets again.
  struct stat before = {}, after = {};
  ASSERT_EQ(fstat(listener, &before), 0);
  running_->control.reset();
  auto control = ConnectControl(host_->ControlPath(shape_.id));
  ASSERT_TRUE(control.ok()) << control.status().ToString();
  running_->control = std::move(*control);
  auto again = Hello(running_->control.get(), std::chrono::seconds(5), nullptr);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_EQ(again->listeners.size(), 2u);
  ASSERT_EQ(fstat(again->listeners[0].get(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
}

// Control: a sandbox without ports has no listener, and its init hands over none.
TEST_F(SandboxHostTest, WithoutPortsTheLoopbackHasNoListener) {
  StartSandbox();
  auto hello = Hello(running_->control.get(), std::chrono::seconds(5), nullptr);
  ASSERT_TRUE(hello.ok()) << hello.status().ToString();
  EXPECT_TRUE(hello->listeners.empty());
  Finished refused = Run(Sh("exec bash -c 'exec 3<>/dev/tcp/127.0.0.1/7880'"));
  EXPECT_NE(refused.wait_status, 0);
  EXPECT_THAT(refused.err, HasSubstr("Connection refused"));
}

TEST_F(SandboxHostTest, SignalsReachTheCommandsProcessGroup) {
  StartSandbox();
  ExecRequest request = Sh("sleep 100 & sleep 100; echo never");
  request.seq = ++seq_;
  auto fds = SendExec(running_->control.get(), request);
  ASSERT_TRUE(fds.ok());
  auto hello = Expect(fds->sync.get(), MsgType::kChildHello);
  ASSERT_TRUE(hello.has_value());
  ASSERT_TRUE(host_->CreateCommandCgroup(shape_.id, request.seq).ok());
  ASSERT_TRUE(host_->backend().Attach(host_->CommandCgroup(shape_.id, request.seq), hello->sender_pid).ok());
  ASSERT_TRUE(SendChildGo(fds->sync.get()).ok());
  // Wait until both sleeps run, then TERM the group.
  ASSERT_TRUE(test::WaitFor([&] {
    auto procs = host_->backend().Procs(host_->CommandCgroup(shape_.id, request.seq));
    return procs.ok() && procs->size() == 3;
  }, 10));
  ASSERT_TRUE(SendSignal(running_->control.get(), request.seq, SIGTERM).ok());
  auto exited = Expect(running_->control.get(), MsgType::kExited);
  ASSERT_TRUE(exited.has_value());
  initproto::ExitedBody body;
  exited->BodyAs(body);
  ASSERT_TRUE(WIFSIGNALED(body.wait_status));
  EXPECT_EQ(WTERMSIG(body.wait_status), SIGTERM);
  EXPECT_EQ(Drain(fds->stdout_r.get()), "");
  ASSERT_TRUE(host_->FinishCommandCgroup(shape_.id, request.seq).ok());
  ASSERT_TRUE(SendAck(running_->control.get(), request.seq).ok());
}

TEST_F(SandboxHostTest, FilesSurviveStopAndStart) {
  StartSandbox();
  EXPECT_EQ(Run(Sh("echo kept > ~/note; echo gone > /tmp/scratch")).wait_status, 0);
  ASSERT_TRUE(host_->Stop(shape_.id, &*running_).ok());
  running_.reset();
  EXPECT_TRUE(test::SandboxCgroups().empty());
  struct stat st;
  EXPECT_NE(stat(host_->ControlPath(shape_.id).c_str(), &st), 0);
  EXPECT_EQ(stat(host_->SandboxLayer(shape_.id).path.c_str(), &st), 0);

  StartSandbox();
  Finished result = Run(Sh("cat ~/note; cat /tmp/scratch 2>/dev/null || echo no-scratch"));
  EXPECT_EQ(result.out, "kept\nno-scratch\n");
}

TEST_F(SandboxHostTest, TheControlSocketIsOutOfReachInside) {
  StartSandbox();
  const std::string path = host_->ControlPath(shape_.id);
  // Root inside sees neither the socket's path nor init's copy of it (init is not dumpable,
  // so its fd links need CAP_SYS_PTRACE, which nothing inside has); its own fds it can read.
  Finished result = Run(Sh("test -e " + path + " && echo visible || echo absent; "
                           "readlink /proc/1/fd/3 2>&1 || echo init-fd-denied; "
                           "readlink /proc/self/fd/0 >/dev/null && echo own-fd-ok", 0));
  EXPECT_THAT(result.out, HasSubstr("absent"));
  EXPECT_THAT(result.out, HasSubstr("init-fd-denied"));
  EXPECT_THAT(result.out, HasSubstr("own-fd-ok"));
  // Positive control: the host sees the socket.
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
}

TEST_F(SandboxHostTest, AdoptFindsALiveInitAndRefusesADeadOne) {
  StartSandbox();
  auto adopted = host_->Adopt(shape_.id, running_->pid, running_->start_time);
  ASSERT_TRUE(adopted.ok()) << adopted.status().ToString();
  ASSERT_TRUE(adopted->has_value());
  EXPECT_EQ((*adopted)->pid, running_->pid);
  // A wrong start time is another process that happens to have the pid.
  auto wrong = host_->Adopt(shape_.id, running_->pid, running_->start_time + 1);
  ASSERT_TRUE(wrong.ok());
  EXPECT_FALSE(wrong->has_value());
}

// ---- What a command sees of itself (issue 16 §5) ----

ExecRequest::HostIds OwnIds(const HostSandboxShape& shape, uid_t uid) {
  return {static_cast<uid_t>(shape.uid_base + uid), static_cast<gid_t>(shape.uid_base + uid)};
}

// The daemon gives every command but an agent session its stdio pipes: the command reopens them
// by path, as agent and as root inside.
TEST_F(SandboxHostTest, ACommandReopensItsOwnStdioPipesByPath) {
  StartSandbox();
  for (uid_t uid : {1000u, 0u}) {
    ExecRequest request = Sh("echo out >/dev/stdout && echo err >/dev/stderr && echo fd >/proc/self/fd/1 && "
                             "echo fd2 >/dev/fd/2 && cat /dev/stdin && stat -L -c %u:%a /dev/stdout", uid);
    request.stdio_owner = OwnIds(shape_, uid);
    Finished result = Run(request);
    EXPECT_EQ(result.wait_status, 0) << uid << ": " << result.err;
    EXPECT_EQ(result.out, "out\nfd\n" + std::to_string(uid) + ":600\n") << uid;
    EXPECT_EQ(result.err, "err\nfd2\n") << uid;
  }
  // Denial beside it: pipes the daemon keeps (an agent session's event stream) are root's on the
  // host, unmapped inside: not even their own command opens them by path.
  Finished kept = Run(Sh("echo out >/dev/stdout || echo refused; stat -L -c %u /dev/stdout", 1000));
  EXPECT_EQ(kept.out, "refused\n65534\n");
  EXPECT_THAT(kept.err, HasSubstr("Permission denied"));
}

// Reopening goes through /proc/<pid>/fd: ptrace access to a process holding the pipe (same user,
// or CAP_SYS_PTRACE, which nothing inside has), then the inode's 0600. So another user of the
// same sandbox cannot reach a command's stdio; the same user can, as in a container.
TEST_F(SandboxHostTest, AnotherUserInsideCannotOpenACommandsStdio) {
  StartSandbox();
  ExecRequest request = Sh("exec sleep 60");
  request.stdio_owner = OwnIds(shape_, 1000);
  request.seq = ++seq_;
  auto fds = SendExec(running_->control.get(), request);
  ASSERT_TRUE(fds.ok());
  auto hello = Expect(fds->sync.get(), MsgType::kChildHello);
  ASSERT_TRUE(hello.has_value());
  ASSERT_TRUE(host_->CreateCommandCgroup(shape_.id, request.seq).ok());
  ASSERT_TRUE(host_->backend().Attach(host_->CommandCgroup(shape_.id, request.seq), hello->sender_pid).ok());
  ASSERT_TRUE(SendChildGo(fds->sync.get()).ok());
  ASSERT_TRUE(test::WaitFor([&] {
    auto comm = ReadFileToString("/proc/" + std::to_string(hello->sender_pid) + "/comm");
    return comm.ok() && *comm == "sleep\n";
  }, 10));
  // From the host: the pipe is the agent's host uid's alone.
  struct stat st;
  ASSERT_EQ(stat(("/proc/" + std::to_string(hello->sender_pid) + "/fd/1").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, static_cast<uid_t>(shape_.uid_base + 1000));
  EXPECT_EQ(st.st_mode & 07777, 0600u);

  const std::string target = "/proc/$(pgrep -x sleep)/fd/1";
  Finished root = Run(Sh("echo from-root > " + target + " && echo wrote || echo refused", 0));
  EXPECT_EQ(root.out, "refused\n");
  EXPECT_THAT(root.err, HasSubstr("Permission denied"));
  Finished agent = Run(Sh("echo from-agent > " + target + " && echo wrote", 1000));
  EXPECT_EQ(agent.out, "wrote\n") << agent.err;

  ASSERT_TRUE(SendSignal(running_->control.get(), request.seq, SIGKILL).ok());
  ASSERT_TRUE(Expect(running_->control.get(), MsgType::kExited).has_value());
  EXPECT_EQ(Drain(fds->stdout_r.get()), "from-agent\n");
  ASSERT_TRUE(host_->FinishCommandCgroup(shape_.id, request.seq).ok());
  ASSERT_TRUE(SendAck(running_->control.get(), request.seq).ok());
}

// The cgroup namespace is rooted at the sandbox's cgroup, which /sys/fs/cgroup shows read-only;
// the command's own cgroup repeats the sandbox's limits, so what a program finds at the path
// /proc/self/cgroup names is the sandbox's limit.
TEST_F(SandboxHostTest, ACommandSeesTheSandboxsLimitsAtItsOwnCgroupAndAtTheRoot) {
  shape_.cpu_millicores = 500;
  StartSandbox();
  const bool v2 = host_->backend().version() == cgroups::CgroupVersion::kV2;
  const std::string memory = v2 ? "memory.max" : "memory/memory.limit_in_bytes";
  const std::string pids = v2 ? "pids.max" : "pids/pids.max";
  const std::string own = v2 ? "cmd-1/memory.max" : "memory/cmd-1/memory.limit_in_bytes";
  // The path of the command's cgroup, as the command reads it (v1: the memory hierarchy's).
  const std::string path = v2 ? "sed -n 's/^0:://p'" : "sed -n 's/^[0-9]*:memory://p'";
  Finished result = Run(Sh(path + " /proc/self/cgroup; cd /sys/fs/cgroup; cat " + memory + " " + pids + " " + own +
                           "; find " + (v2 ? "." : "memory") + " -mindepth 1 -type d | sort"));
  ASSERT_EQ(result.wait_status, 0) << result.err;
  const std::string limit = std::to_string(shape_.memory_bytes) + "\n";
  EXPECT_EQ(result.out, "/cmd-1\n" + limit + "64\n" + limit +
                            (v2 ? "./cmd-1\n./init\n" : "memory/cmd-1\nmemory/init\n"));
  EXPECT_THAT(result.out, Not(HasSubstr(shape_.id)));
  // Read-only, for root inside too; control: the value is unchanged.
  Finished write = Run(Sh("echo 1 > /sys/fs/cgroup/" + memory + " || echo refused; mkdir /sys/fs/cgroup/x || "
                          "echo refused; cat /sys/fs/cgroup/" + memory, 0));
  EXPECT_EQ(write.out, "refused\nrefused\n" + limit);
  EXPECT_THAT(write.err, HasSubstr("Read-only file system"));
  // The host side: the command's cgroup got the sandbox's limits; the sandbox's are unchanged.
  auto sandbox = host_->backend().ReadLimits(host_->SandboxCgroup(shape_.id));
  ASSERT_TRUE(sandbox.ok());
  EXPECT_EQ(sandbox->memory_max_bytes, shape_.memory_bytes);
  EXPECT_EQ(sandbox->cpu_quota_us, 50000u);
  // A command's cgroup repeats the memory and pids limits, not the CPU quota (a quota write walks
  // every task group of the host): that stays the sandbox's alone, and still bounds the command.
  ASSERT_TRUE(host_->CreateCommandCgroup(shape_.id, 99).ok());
  auto command = host_->backend().ReadLimits(host_->CommandCgroup(shape_.id, 99));
  ASSERT_TRUE(command.ok()) << command.status().ToString();
  EXPECT_EQ(command->memory_max_bytes, shape_.memory_bytes);
  EXPECT_EQ(command->pids_max, sandbox->pids_max);
  EXPECT_FALSE(command->cpu_quota_us.has_value());
  EXPECT_TRUE(host_->RemoveCommandCgroup(shape_.id, 99).ok());
}

TEST_F(SandboxHostTest, NodeInACommandReportsTheSandboxsMemoryAndCpus) {
  if (access("/usr/bin/node", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/node on this host";
  auto allowed = isolation::AllowedCpus();
  ASSERT_TRUE(allowed.ok());
  shape_.cpu_millicores = 1000;
  StartSandbox();
  Finished result = Run(Sh("node -e \"console.log(process.constrainedMemory(), require('os').availableParallelism())\"; "
                           "nproc; python3 -c 'import os; print(os.cpu_count())'"));
  EXPECT_EQ(result.out, std::to_string(shape_.memory_bytes) + " 1\n1\n1\n") << result.err;
  if (allowed->size() < 2) GTEST_SKIP() << "one CPU here: the control below would show nothing";
  // Control: a sandbox without a CPU limit sees every CPU.
  ASSERT_TRUE(host_->Stop(shape_.id, &*running_).ok());
  running_.reset();
  shape_.cpu_millicores = 0;
  StartSandbox();
  Finished free = Run(Sh("node -e \"console.log(require('os').availableParallelism())\"; nproc"));
  const std::string all = std::to_string(allowed->size()) + "\n";
  EXPECT_EQ(free.out, all + all) << free.err;
}

// /proc/PID/stat read past a command name with spaces and parentheses in it: a sleeping
// child's state and start time, then a zombie's, then nothing once it is reaped.
TEST(ProcStatTest, StateAndStartTimeReadPastAnyCommandName) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    prctl(PR_SET_NAME, "a) R 1 (b");
    (void)!write(ready[1], "x", 1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char byte;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  char state = '?';
  for (int i = 0; i < 200 && (state = ProcessState(child)) != 'S'; ++i) usleep(5000);
  EXPECT_EQ(state, 'S');
  const uint64_t started = ProcessStartTime(child);
  EXPECT_GT(started, 0u);
  EXPECT_GE(started, ProcessStartTime(getpid()));
  ASSERT_EQ(kill(child, SIGKILL), 0);
  for (int i = 0; i < 200 && (state = ProcessState(child)) != 'Z'; ++i) usleep(5000);
  EXPECT_EQ(state, 'Z');
  EXPECT_EQ(ProcessStartTime(child), started);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  EXPECT_EQ(ProcessState(child), '?');
  EXPECT_EQ(ProcessStartTime(child), 0u);
}

}  // namespace
}  // namespace corral::supervisor
