// Escapes tried from inside a sandbox (THREATS.md A, B, D), each with a positive control.
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "common/file_util.h"
#include "tests/root/root_test_util.h"

namespace corral::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class IsolationTest : public SandboxTest {};

std::string StatusField(const std::string& status, const std::string& field) {
  std::istringstream in(status);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::string value = line.substr(field.size() + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      return value;
    }
  }
  return "";
}

TEST_F(IsolationTest, ProcessStatusShowsNoPrivilege) {
  for (const char* user : {"agent", "root"}) {
    CorralResult r = RunCorral({"run", "--user", user, "--", "cat", "/proc/self/status"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(StatusField(r.out, "Seccomp"), "2") << user;
    EXPECT_EQ(StatusField(r.out, "NoNewPrivs"), "1") << user;
    EXPECT_EQ(StatusField(r.out, "CapEff"), "0000000000000000") << user;
    EXPECT_EQ(StatusField(r.out, "CapPrm"), "0000000000000000") << user;
    EXPECT_EQ(StatusField(r.out, "CapInh"), "0000000000000000") << user;
    EXPECT_EQ(StatusField(r.out, "CapAmb"), "0000000000000000") << user;
    EXPECT_EQ(StatusField(r.out, "CapBnd"), "0000000000000000") << user;
  }
  CorralResult agent = RunCorral({"run", "--", "id"});
  EXPECT_EQ(agent.out, "uid=1000(agent) gid=1000(agent) groups=1000(agent)\n");
  CorralResult root = RunCorral({"run", "--user", "root", "--", "id"});
  EXPECT_EQ(root.out, "uid=0(root) gid=0(root) groups=0(root)\n");
}

TEST_F(IsolationTest, HostSeesAnUnprivilegedUid) {
  pid_t corral = StartCorral({"run", "--user", "root", "--", "sleep", "30"});
  ASSERT_TRUE(WaitFor([] { return SandboxPids().size() >= 2; }, 10));
  for (pid_t pid : SandboxPids()) {
    auto status = ReadFileToString("/proc/" + std::to_string(pid) + "/status");
    if (!status.ok()) continue;
    std::istringstream uids(StatusField(*status, "Uid"));
    unsigned long real_uid = 0, effective_uid = 0;
    uids >> real_uid >> effective_uid;
    EXPECT_GE(real_uid, 0x40000000ul) << "pid " << pid;
    EXPECT_GE(effective_uid, 0x40000000ul) << "pid " << pid;
    EXPECT_EQ(StatusField(*status, "CapEff"), "0000000000000000");
  }
  kill(corral, SIGTERM);
  int status;
  waitpid(corral, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << "SIGTERM is forwarded to the command";
}

TEST_F(IsolationTest, DeniedSyscallsFailWithEpermWhileOrdinaryWorkSucceeds) {
  const std::vector<std::string> denied = {
      "unshare_user", "clone_newuser", "setns", "mount", "umount2", "pivot_root", "fsopen",
      "open_tree", "move_mount", "mount_setattr", "bpf", "perf_event_open", "userfaultfd",
      "keyctl", "add_key", "kexec_load", "finit_module", "open_by_handle_at", "process_vm_writev",
      "swapon", "syslog", "ptrace", "socket_alg", "socket_vsock", "socket_packet", "socket_raw",
      "tiocsti"};
  const std::vector<std::string> allowed = {"fork", "thread", "file", "pipe", "socket_unix",
                                            "socket_inet", "netlink", "clone_plain"};
  std::vector<std::string> args = {"run", "--", FixturePath("syscall_probe")};
  args.insert(args.end(), denied.begin(), denied.end());
  args.insert(args.end(), allowed.begin(), allowed.end());
  args.insert(args.end(), {"clone3", "io_uring_setup", "syscall500"});
  CorralResult r = RunCorral(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const auto& name : denied) EXPECT_THAT(r.out, HasSubstr(name + " errno=EPERM\n")) << r.out;
  for (const auto& name : allowed) EXPECT_THAT(r.out, HasSubstr(name + " ok\n")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("clone3 errno=ENOSYS\n"));
  EXPECT_THAT(r.out, ::testing::AnyOf(HasSubstr("io_uring_setup errno=EPERM\n"),
                                      HasSubstr("io_uring_setup errno=ENOSYS\n")));
  EXPECT_THAT(r.out, ::testing::AnyOf(HasSubstr("syscall500 errno=EPERM\n"),
                                      HasSubstr("syscall500 errno=ENOSYS\n")));
}

TEST_F(IsolationTest, InitIsASealedMemfdNothingInsideCanOverwrite) {
  // As root inside (the same uid as corral-init), so /proc/1/exe is reachable at all.
  CorralResult r = RunCorral({"run", "--user", "root", "--", "sh", "-c",
                              "readlink /proc/1/exe; head -c 4 /proc/1/exe | od -An -c | tr -d ' ';"
                              "echo x >> /proc/1/exe && echo appended;"
                              "echo x > /proc/1/exe && echo overwritten; echo done"});
  EXPECT_THAT(r.out, HasSubstr("/memfd:corral-init (deleted)\n")) << r.out;
  EXPECT_THAT(r.out, HasSubstr("177ELF\n"));  // positive control: it is readable, and an ELF
  EXPECT_THAT(r.out, Not(HasSubstr("appended")));
  EXPECT_THAT(r.out, Not(HasSubstr("overwritten")));
  EXPECT_THAT(r.out, HasSubstr("done"));
}

TEST_F(IsolationTest, ProcAndSysSecretsAreMasked) {
  CorralResult r = RunCorral({"run", "--user", "root", "--", "sh", "-c",
                              "cat /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug 2>/dev/null | wc -c;"
                              "ls -A /sys/firmware /sys/devices/virtual/powercap 2>/dev/null | grep -vc ':$';"
                              "echo c > /proc/sysrq-trigger && echo sysrq-written;"
                              "echo x > /proc/sys/kernel/core_pattern && echo core-written;"
                              "umount /proc/keys && echo unmounted;"
                              "cat /proc/self/cmdline | tr '\\0' ' '; echo"});
  EXPECT_THAT(r.out, HasSubstr("0\n0\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("written")));
  EXPECT_THAT(r.out, Not(HasSubstr("unmounted")));
  EXPECT_THAT(r.out, HasSubstr("cat /proc/self/cmdline"));  // positive control: /proc works
  auto core_pattern = ReadFileToString("/proc/sys/kernel/core_pattern");
  EXPECT_NE(*core_pattern, "x\n");
}

TEST_F(IsolationTest, MountingProcOrSysfsFails) {
  CorralResult r = RunCorral({"run", "--user", "root", "--", "sh", "-c",
                              "mkdir -p /tmp/p; mount -t proc proc /tmp/p && echo proc-mounted;"
                              "mount -t sysfs sysfs /tmp/p && echo sysfs-mounted;"
                              "mount -t tmpfs tmpfs /tmp/p && echo tmpfs-mounted; echo done"});
  EXPECT_THAT(r.out, Not(HasSubstr("mounted")));
  EXPECT_THAT(r.out, HasSubstr("done"));
}

TEST_F(IsolationTest, DevHoldsOnlyTheMinimalSet) {
  CorralResult r = RunCorral({"run", "--user", "root", "--", "sh", "-c", "ls -A /dev | sort | tr '\\n' ' '"});
  EXPECT_EQ(r.out, "core fd full null ptmx pts random shm stderr stdin stdout tty urandom zero ");
  CorralResult mknod = RunCorral({"run", "--user", "root", "--", "sh", "-c",
                                  "mknod /tmp/sda b 8 0 && echo made; head -c 4 /dev/zero | wc -c"});
  EXPECT_THAT(mknod.out, Not(HasSubstr("made")));
  EXPECT_THAT(mknod.out, HasSubstr("4\n"));  // positive control: /dev/zero works
}

TEST_F(IsolationTest, NoHostFileOutsideTheImageAndBinds) {
  const std::string canary_dir = "/var/tmp/corral-canary-" + std::to_string(getpid());
  ASSERT_TRUE(MakeDirs(canary_dir).ok());
  ASSERT_TRUE(WriteNewFile(canary_dir + "/canary", "host secret\n").ok());
  CorralResult r = RunCorral({"run", "--user", "root", "--", "sh", "-c",
                              "cat " + canary_dir + "/canary; test -e /etc/shadow && echo shadow;"
                              "test -e /etc/ssh && echo ssh; test -e /root/.bash_history && echo history;"
                              "ls /home"});
  EXPECT_THAT(r.out, Not(HasSubstr("host secret")));
  EXPECT_THAT(r.out, Not(HasSubstr("shadow")));
  EXPECT_THAT(r.out, Not(HasSubstr("ssh")));
  EXPECT_EQ(r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1), "agent\n");
  // Positive control: the same file through a read-only bind.
  CorralResult bound = RunCorral({"run", "--bind", canary_dir + ":/mnt/canary:ro", "--", "sh", "-c",
                                  "cat /mnt/canary/canary; echo x > /mnt/canary/new && echo wrote"});
  EXPECT_EQ(bound.out, "host secret\n");
  struct stat st;
  EXPECT_NE(stat((canary_dir + "/new").c_str(), &st), 0);
  (void)RemoveTree(canary_dir);
}

TEST_F(IsolationTest, ImageIsReadOnlyAndMountsAreNosuid) {
  CorralResult r = RunCorral({"run", "--user", "root", "--", "sh", "-c",
                              "touch /usr/bin/corral-was-here && echo wrote-usr;"
                              "awk '$5 == \"/\" {print $6}' /proc/self/mountinfo | grep -c nosuid;"
                              "awk '$6 !~ /nosuid/' /proc/self/mountinfo | wc -l;"
                              "touch /etc/new-file && echo wrote-etc"});
  EXPECT_THAT(r.out, Not(HasSubstr("wrote-usr")));
  EXPECT_EQ(r.out.substr(0, 4), "1\n0\n") << "the root is nosuid, and so is every other mount";
  EXPECT_THAT(r.out, HasSubstr("wrote-etc"));  // the writable layer works
  struct stat st;
  EXPECT_NE(stat("/usr/bin/corral-was-here", &st), 0);
}

TEST_F(IsolationTest, SetuidBinariesGrantNothing) {
  // su is setuid root on the host; inside, the mount is nosuid and no_new_privs is set.
  CorralResult r = RunCorral({"run", "--", "sh", "-c", "ls -l /usr/bin/su | cut -c1-10; su -c id root </dev/null; id -u"});
  EXPECT_THAT(r.out, HasSubstr("-rwsr-xr-x"));
  EXPECT_THAT(r.out, Not(HasSubstr("uid=0")));
  EXPECT_THAT(r.out, HasSubstr("1000\n"));
}

TEST_F(IsolationTest, OnlyLoopbackAndNoHostServices) {
  // A host service on 127.0.0.1 that the sandbox must not reach.
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  socklen_t len = sizeof(addr);
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  CorralResult r = RunCorral({"run", "--", "python3", "-c",
                              "import os, socket\n"
                              "print(sorted(os.listdir('/sys/class/net')))\n"
                              "s = socket.socket()\n"
                              "try:\n"
                              "  s.connect(('127.0.0.1', " + port + ")); print('host reached')\n"
                              "except OSError as e: print('refused', e.errno)\n"
                              "s6 = socket.socket(socket.AF_INET6)\n"
                              "try:\n"
                              "  s6.connect(('::1', " + port + ")); print('[::1] reached')\n"
                              "except OSError as e: print('v6 refused', e.errno)\n"
                              "srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen()\n"
                              "c = socket.create_connection(srv.getsockname()); print('own lo ok')\n"});
  close(listener);
  EXPECT_THAT(r.out, HasSubstr("['lo']\n"));
  EXPECT_THAT(r.out, Not(HasSubstr("[::1] reached")));
  EXPECT_THAT(r.out, HasSubstr("refused"));
  EXPECT_THAT(r.out, Not(HasSubstr("host reached")));
  EXPECT_THAT(r.out, HasSubstr("own lo ok"));
}

TEST_F(IsolationTest, RootInsideCannotReconfigureTheNetworkOrTheHostName) {
  CorralResult r = RunCorral({"run", "--user", "root", "--", "sh", "-c",
                              "ip link set lo down 2>&1 || echo link-denied;"
                              "ip addr add 10.9.9.9/8 dev lo 2>&1 || echo addr-denied;"
                              "ip route add default dev lo 2>&1 || echo route-denied;"
                              "hostname evil 2>&1 || echo hostname-denied;"
                              "ip -o link show | wc -l; hostname"});
  for (const char* denied : {"link-denied", "addr-denied", "route-denied", "hostname-denied"}) {
    EXPECT_THAT(r.out, HasSubstr(denied)) << r.out;
  }
  // Positive controls: reading the configuration works, and nothing changed.
  EXPECT_THAT(r.out, HasSubstr("1\ncorral\n"));
}

TEST_F(IsolationTest, ConcurrentSandboxesCannotSeeOrSignalEachOther) {
  const std::string out_dir = "/var/tmp/corral-a-" + std::to_string(getpid());
  ASSERT_TRUE(MakeDirs(out_dir).ok());
  ASSERT_EQ(chmod(out_dir.c_str(), 0777), 0);
  // Sandbox A sleeps, then writes a file through a bind: proof it survived B.
  pid_t a = StartCorral({"run", "--bind", out_dir + ":/out", "--user", "root", "--", "sh", "-c",
                         "sleep 2; echo alive > /out/a"});
  ASSERT_TRUE(WaitFor([] { return SandboxPids().size() >= 2; }, 10));
  CorralResult b = RunCorral({"run", "--user", "root", "--", "python3", "-c",
                              "import os, signal\n"
                              "import subprocess\n"
                              "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
                              "child = subprocess.Popen(['sleep', '30'])\n"
                              "os.kill(-1, signal.SIGKILL)\n"
                              "print('child', child.wait())\n"});
  EXPECT_EQ(b.out, "[1, 2]\nchild -9\n") << "B sees only its init and itself, and kills only its own";
  int status = 0;
  waitpid(a, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  auto written = ReadFileToString(out_dir + "/a");
  EXPECT_TRUE(written.ok() && *written == "alive\n") << "sandbox A was disturbed";
  (void)RemoveTree(out_dir);
}

TEST_F(IsolationTest, WorkspacePersistsAcrossRuns) {
  const std::string ws = TestStateDir() + "/ws-" + std::to_string(getpid());
  CorralResult w = RunCorral({"run", "--workspace", ws, "--", "sh", "-c",
                              "echo persisted > ~/note; mkdir -p ~/proj && echo code > ~/proj/main.c"});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  CorralResult r = RunCorral({"run", "--workspace", ws, "--", "sh", "-c",
                              "cat ~/note ~/proj/main.c; stat -c %U ~/note"});
  EXPECT_EQ(r.out, "persisted\ncode\nagent\n") << r.err;
  // Positive control: without the workspace nothing persists.
  CorralResult e = RunCorral({"run", "--", "sh", "-c", "cat ~/note 2>/dev/null || echo none"});
  EXPECT_EQ(e.out, "none\n");
  // The lower layers were not touched: the note lives only in the workspace's upper dir.
  struct stat st;
  EXPECT_EQ(stat((ws + "/upper/home/agent/note").c_str(), &st), 0);
}

TEST_F(IsolationTest, WorkspaceInUseIsRefused) {
  const std::string ws = TestStateDir() + "/ws-busy-" + std::to_string(getpid());
  pid_t first = StartCorral({"run", "--workspace", ws, "--", "sleep", "2"});
  ASSERT_TRUE(WaitFor([] { return SandboxPids().size() >= 2; }, 10));
  CorralResult second = RunCorral({"run", "--workspace", ws, "--", "true"});
  EXPECT_EQ(second.exit_code, 125);
  EXPECT_THAT(second.err, HasSubstr("in use"));
  int status;
  waitpid(first, &status, 0);
  EXPECT_EQ(RunCorral({"run", "--workspace", ws, "--", "true"}).exit_code, 0);
}

TEST_F(IsolationTest, DiskCapStopsWritesInsideOnly) {
  CorralResult r = RunCorral({"run", "--disk", "16M", "--", "sh", "-c",
                              "head -c 4M /dev/zero > ~/small && echo small-ok;"
                              "head -c 64M /dev/zero > ~/big || echo big-failed;"
                              "head -c 64M /dev/zero > /tmp/big || echo tmp-failed"});
  EXPECT_THAT(r.out, HasSubstr("small-ok"));
  EXPECT_THAT(r.out, HasSubstr("big-failed"));
  EXPECT_THAT(r.out, HasSubstr("tmp-failed"));
  EXPECT_THAT(r.err, HasSubstr("No space left on device"));
}

TEST_F(IsolationTest, DiskCapOfAWorkspacePersistsAndHolds) {
  const std::string ws = TestStateDir() + "/ws-disk-" + std::to_string(getpid());
  CorralResult w = RunCorral({"run", "--workspace", ws, "--disk", "16M", "--", "sh", "-c",
                              "echo kept > ~/note && echo small-ok;"
                              "head -c 64M /dev/zero > ~/big || echo big-failed; rm -f ~/big"});
  EXPECT_THAT(w.out, HasSubstr("small-ok"));
  EXPECT_THAT(w.out, HasSubstr("big-failed"));
  EXPECT_THAT(w.err, HasSubstr("No space left on device"));
  // The host file system holds only the sparse image, and no loop device is left attached.
  struct stat st;
  ASSERT_EQ(stat((ws + "/disk.img").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 16 << 20);
  EXPECT_NE(stat((ws + "/upper").c_str(), &st), 0);
  EXPECT_TRUE(WaitFor([&] { return LoopDevicesBacking(ws + "/disk.img").empty(); }, 5));
  // The next run, with or without repeating --disk, sees the file.
  CorralResult r = RunCorral({"run", "--workspace", ws, "--", "cat", "/home/agent/note"});
  EXPECT_EQ(r.out, "kept\n") << r.err;
  // A different cap is refused rather than silently ignored.
  CorralResult other = RunCorral({"run", "--workspace", ws, "--disk", "32M", "--", "true"});
  EXPECT_EQ(other.exit_code, 125);
  EXPECT_THAT(other.err, HasSubstr("resizing is not supported"));
  // So is capping a workspace that was made without a cap.
  const std::string plain = TestStateDir() + "/ws-plain-" + std::to_string(getpid());
  ASSERT_EQ(RunCorral({"run", "--workspace", plain, "--", "true"}).exit_code, 0);
  CorralResult capped = RunCorral({"run", "--workspace", plain, "--disk", "16M", "--", "true"});
  EXPECT_EQ(capped.exit_code, 125);
  EXPECT_THAT(capped.err, HasSubstr("created without --disk"));
}

TEST_F(IsolationTest, ManyEmptyFilesHitTheInodeCap) {
  CorralResult r = RunCorral({"run", "--disk", "16M", "--", "python3", "-c",
                              "import os\n"
                              "n = 0\n"
                              "try:\n"
                              "  while n < 1000000:\n"
                              "    open('/tmp/f%d' % n, 'w').close(); n += 1\n"
                              "except OSError as e: print('stopped', e.errno, n < 100000)\n"}, 120);
  EXPECT_THAT(r.out, HasSubstr("stopped 28 True")) << r.out << r.err;
}

TEST_F(IsolationTest, OrphansAreReaped) {
  CorralResult r = RunCorral({"run", "--", FixturePath("orphans"), "2000"}, 120);
  EXPECT_EQ(r.out, "zombies=0\n") << r.err;
}

TEST_F(IsolationTest, SymlinkedMountpointInAnImageFailsClosed) {
  const std::string image = TestStateDir() + "/img-" + std::to_string(getpid());
  const std::string victim = TestStateDir() + "/victim-" + std::to_string(getpid());
  ASSERT_TRUE(MakeDirs(image + "/bin").ok());
  ASSERT_TRUE(MakeDirs(victim).ok());
  ASSERT_EQ(system(("cp /bin/busybox " + image + "/bin/busybox").c_str()), 0);
  // Positive control: the image works, with a bind.
  CorralResult ok = RunCorral({"run", "--image", image, "--bind", "/var/tmp:/data", "--",
                               "/bin/busybox", "echo", "image-ok"});
  EXPECT_EQ(ok.out, "image-ok\n") << ok.err << ok.outcome.dump();
  // /data in the image is a symlink to a host directory: the bind must not follow it.
  ASSERT_EQ(symlink(victim.c_str(), (image + "/data").c_str()), 0);
  CorralResult bad = RunCorral({"run", "--image", image, "--bind", "/var/tmp:/data", "--",
                                "/bin/busybox", "true"});
  EXPECT_EQ(bad.exit_code, 125);
  EXPECT_EQ(bad.outcome["outcome"], "setup_failed");
  EXPECT_EQ(bad.outcome["setup_step"], "bind /var/tmp on /data") << bad.outcome.dump();
  EXPECT_EQ(bad.outcome["errno"], "ELOOP");
  (void)RemoveTree(image);
  (void)RemoveTree(victim);
}

TEST_F(IsolationTest, WritesToTheImageStayInTheWritableLayer) {
  const std::string image = TestStateDir() + "/img-rw-" + std::to_string(getpid());
  ASSERT_TRUE(MakeDirs(image + "/bin").ok());
  ASSERT_EQ(system(("cp /bin/busybox " + image + "/bin/busybox").c_str()), 0);
  ASSERT_TRUE(WriteNewFile(image + "/shared.txt", "original\n", 0666).ok());
  ASSERT_EQ(chmod((image + "/shared.txt").c_str(), 0666), 0);
  CorralResult r = RunCorral({"run", "--user", "root", "--image", image, "--", "/bin/busybox", "sh", "-c",
                              "echo changed > /shared.txt && cat /shared.txt;"
                              "/bin/busybox rm /bin/busybox.missing 2>/dev/null;"
                              "echo x > /bin/setuid-me && /bin/busybox chmod 4755 /bin/setuid-me && echo made-setuid"});
  EXPECT_THAT(r.out, HasSubstr("changed\n")) << r.err;  // the sandbox sees its own write
  auto host = ReadFileToString(image + "/shared.txt");
  EXPECT_EQ(*host, "original\n") << "a write inside reached the image";
  struct stat st;
  EXPECT_NE(stat((image + "/bin/setuid-me").c_str(), &st), 0) << "a file made inside reached the image";
  (void)RemoveTree(image);
}

TEST_F(IsolationTest, SysvIpcIsPrivateToEachSandbox) {
  // A's shared memory segment is invisible to B, which has its own ipc namespace.
  const std::string out_dir = "/var/tmp/corral-ipc-" + std::to_string(getpid());
  ASSERT_TRUE(MakeDirs(out_dir).ok());
  ASSERT_EQ(chmod(out_dir.c_str(), 0777), 0);
  pid_t a = StartCorral({"run", "--bind", out_dir + ":/out", "--", "python3", "-c",
                         "import ctypes, time\n"
                         "libc = ctypes.CDLL(None)\n"
                         "shmid = libc.shmget(0x1234, 4096, 0o1600)\n"
                         "open('/out/a', 'w').write(str(shmid))\n"
                         "time.sleep(3)\n"});
  ASSERT_TRUE(WaitFor([&] { return ReadFileToString(out_dir + "/a").ok(); }, 10));
  EXPECT_NE(*ReadFileToString(out_dir + "/a"), "-1") << "positive control: A made its segment";
  CorralResult b = RunCorral({"run", "--", "python3", "-c",
                              "import ctypes\n"
                              "libc = ctypes.CDLL(None)\n"
                              "print(libc.shmget(0x1234, 4096, 0o600))\n"});
  EXPECT_EQ(b.out, "-1\n") << "B found A's segment";
  int status;
  waitpid(a, &status, 0);
  (void)RemoveTree(out_dir);
}

TEST_F(IsolationTest, SymlinkedProcInAWorkspaceFailsClosed) {
  const std::string ws = TestStateDir() + "/ws-evil-" + std::to_string(getpid());
  const std::string victim = TestStateDir() + "/victim2-" + std::to_string(getpid());
  ASSERT_TRUE(MakeDirs(victim).ok());
  ASSERT_EQ(RunCorral({"run", "--workspace", ws, "--", "true"}).exit_code, 0);  // control
  ASSERT_EQ(symlink(victim.c_str(), (ws + "/upper/proc").c_str()), 0);
  CorralResult bad = RunCorral({"run", "--workspace", ws, "--", "true"});
  EXPECT_EQ(bad.exit_code, 125);
  EXPECT_EQ(bad.outcome["setup_step"], "mount proc on /proc") << bad.outcome.dump();
  EXPECT_EQ(bad.outcome["errno"], "ELOOP");
  struct stat st;
  EXPECT_NE(stat((victim + "/self").c_str(), &st), 0) << "proc was mounted on the host path";
  (void)RemoveTree(victim);
}

}  // namespace
}  // namespace corral::test
