// The file API's kernel side against a real persistent sandbox: round trips as the agent, and
// every way out of the sandbox's root we could think of (THREATS.md rows 15-18).
#include "supervisor/sandboxes/sandbox_files.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/openat2.h>

#include <chrono>
#include <iostream>
#include <optional>
#include <map>
#include <memory>

#include "cgroups/cgroup_backend.h"
#include "common/file_util.h"
#include "supervisor/ids.h"
#include "supervisor/commands/init_client.h"
#include "supervisor/sandboxes/sandbox_host.h"
#include "tests/root/host_sandbox_shape.h"
#include "tests/root/init_test_util.h"
#include "tests/root/root_test_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using initproto::MsgType;

constexpr uint64_t kMaxBytes = 1 << 20;
constexpr const char* kHostname = "sbfiles";

// ---- Tar archives built and read in the test ----

struct TarSpec {
  std::string name;
  mode_t type = AE_IFREG;
  std::string content;   // a file's bytes or a symlink's target
  std::string hardlink;  // non-empty: a hard link to this name
  mode_t perm = 0644;
};

la_ssize_t AppendToString(archive*, void* data, const void* buffer, size_t length) {
  static_cast<std::string*>(data)->append(static_cast<const char*>(buffer), length);
  return static_cast<la_ssize_t>(length);
}

std::string MakeTar(const std::vector<TarSpec>& specs) {
  std::string out;
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  archive_write_open(a, &out, nullptr, AppendToString, nullptr);
  for (const TarSpec& spec : specs) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, spec.name.c_str());
    archive_entry_set_filetype(entry, spec.type);
    archive_entry_set_perm(entry, spec.perm);
    const bool has_data = spec.type == AE_IFREG && spec.hardlink.empty();
    if (!spec.hardlink.empty()) archive_entry_set_hardlink(entry, spec.hardlink.c_str());
    if (spec.type == AE_IFLNK) archive_entry_set_symlink(entry, spec.content.c_str());
    if (spec.type == AE_IFCHR) archive_entry_set_rdev(entry, makedev(1, 3));
    if (has_data) archive_entry_set_size(entry, static_cast<la_int64_t>(spec.content.size()));
    EXPECT_GE(archive_write_header(a, entry), ARCHIVE_WARN) << archive_error_string(a);
    if (has_data) archive_write_data(a, spec.content.data(), spec.content.size());
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

struct TarItemSeen {
  mode_t type = 0;
  std::string data;  // file bytes or symlink target
  mode_t perm = 0;
};

std::map<std::string, TarItemSeen> ParseTar(const std::string& tar) {
  std::map<std::string, TarItemSeen> out;
  archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  EXPECT_EQ(archive_read_open_memory(a, tar.data(), tar.size()), ARCHIVE_OK);
  archive_entry* entry;
  int r;
  // ARCHIVE_WARN: a name libarchive could not translate in the C locale (kept as raw bytes).
  while ((r = archive_read_next_header(a, &entry)) == ARCHIVE_OK || r == ARCHIVE_WARN) {
    TarItemSeen seen;
    seen.type = archive_entry_filetype(entry);
    seen.perm = archive_entry_perm(entry);
    if (seen.type == AE_IFLNK) seen.data = archive_entry_symlink(entry);
    char buf[4096];
    la_ssize_t n;
    while ((n = archive_read_data(a, buf, sizeof(buf))) > 0) seen.data.append(buf, static_cast<size_t>(n));
    std::string name = archive_entry_pathname(entry);
    if (!name.empty() && name.back() == '/') name.pop_back();
    out[name] = seen;
  }
  archive_read_free(a);
  return out;
}

// The thread's "Uid:"/"Gid:" lines (real, effective, saved, fs) and "Groups:".
std::string ThreadCredentials() {
  auto status = ReadFileToString("/proc/thread-self/status");
  if (!status.ok()) return "";
  std::string out;
  size_t pos = 0;
  while (pos < status->size()) {
    size_t end = status->find('\n', pos);
    std::string line = status->substr(pos, end - pos);
    if (line.rfind("Uid:", 0) == 0 || line.rfind("Gid:", 0) == 0 || line.rfind("Groups:", 0) == 0) {
      out += line + "\n";
    }
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return out;
}

bool Exists(const std::string& host_path) {
  struct stat st;
  return lstat(host_path.c_str(), &st) == 0;
}

class SandboxFilesTest : public test::SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped()) return;
    struct open_how how = {};
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_IN_ROOT;
    long probe = syscall(SYS_openat2, AT_FDCWD, "/", &how, sizeof(how));
    if (probe < 0) GTEST_SKIP() << "openat2 unavailable: " << ErrnoName(errno);
    close(static_cast<int>(probe));
    config_.state_dir = test::TestStateDir();
    config_.run_dir = test::TestRunDir();
    config_.cgroup_parent = test::TestCgroupParent();
    auto backend = cgroups::DetectBackend(config_.cgroup_mount);
    ASSERT_TRUE(backend.ok()) << backend.status().ToString();
    backend_ = std::move(*backend);
    host_ = std::make_unique<SandboxHost>(config_, *backend_, std::string(CORRAL_BIN_DIR) + "/corral-init");
    shape_.id = NewId("sb");
    // A uid range of our own, apart from sandbox_host_test's.
    shape_.uid_base = kUidFirst + (15000 + getpid() % 300) * kUidStep;
    shape_.memory_bytes = 256 << 20;
    shape_.pids = 64;
    shape_.disk_bytes = 256 << 20;
    shape_.hostname = kHostname;
    auto started = host_->Start(shape_.id, shape_.Spec(*host_));
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    running_ = std::move(*started);
    root_prefix_ = "/proc/" + std::to_string(running_->pid) + "/root";
    root_ = UniqueFd(open(root_prefix_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(root_.valid()) << ErrnoName(errno);
    agent_ = static_cast<uid_t>(shape_.uid_base + 1000);
    files_ = std::make_unique<SandboxFiles>(root_.get(), agent_, agent_, kMaxBytes);
  }
  void TearDown() override {
    files_.reset();
    root_.reset();
    if (host_) {
      EXPECT_TRUE(host_->Stop(shape_.id, running_ ? &*running_ : nullptr).ok());
      EXPECT_TRUE(host_->Destroy(shape_.id).ok());
    }
    SandboxTest::TearDown();
  }

  // The host's view of a path inside, for assertions only (the code under test never builds one).
  std::string HostPath(const std::string& inside) const { return root_prefix_ + inside; }

  struct Started {
    uint64_t seq = 0;
    CommandFds fds;
  };

  Started Begin(ExecRequest request) {
    Started started;
    request.seq = started.seq = ++seq_;
    auto fds = SendExec(running_->control.get(), request);
    EXPECT_TRUE(fds.ok()) << fds.status().ToString();
    if (!fds.ok()) return started;
    started.fds = std::move(*fds);
    auto hello = Expect(started.fds.sync.get(), MsgType::kChildHello);
    EXPECT_TRUE(hello.has_value());
    if (!hello) return started;
    EXPECT_TRUE(host_->CreateCommandCgroup(shape_.id, request.seq).ok());
    EXPECT_TRUE(host_->backend().Attach(host_->CommandCgroup(shape_.id, request.seq), hello->sender_pid).ok());
    EXPECT_TRUE(SendChildGo(started.fds.sync.get()).ok());
    // EOF on the sync socket: the command has exec'd (or failed).
    while (WaitReadable(started.fds.sync.get())) {
      auto message = ReceiveMessage(started.fds.sync.get(), true);
      if (!message.ok() || !message->has_value()) break;
    }
    started.fds.stdin_w.reset();
    return started;
  }

  // Waits for the command's end (after `signal`, if any) and returns its wait status.
  int Finish(Started& started, int signal = 0) {
    const int control = running_->control.get();
    if (signal != 0) { EXPECT_TRUE(SendSignal(control, started.seq, signal).ok()); }
    int wait_status = -1;
    auto exited = Expect(control, MsgType::kExited);
    EXPECT_TRUE(exited.has_value());
    if (exited) {
      initproto::ExitedBody body;
      exited->BodyAs(body);
      wait_status = body.wait_status;
    }
    EXPECT_TRUE(host_->FinishCommandCgroup(shape_.id, started.seq).ok());
    EXPECT_TRUE(SendAck(control, started.seq).ok());
    return wait_status;
  }

  // Runs a shell script inside to its end; returns its stdout (stderr appended on failure).
  std::string Sh(const std::string& script, uid_t uid = 1000) {
    ExecRequest request;
    request.argv = {"sh", "-c", script};
    request.uid = uid;
    request.gid = uid;
    request.env = {"PATH=/usr/bin:/bin", "HOME=/home/agent"};
    request.cwd = "/home/agent";
    Started started = Begin(request);
    std::string out = Drain(started.fds.stdout_r.get());
    std::string err = Drain(started.fds.stderr_r.get());
    int wait_status = Finish(started);
    EXPECT_EQ(wait_status, 0) << script << "\n" << err;
    return wait_status == 0 ? out : out + err;
  }

  Started Background(const std::string& script, uid_t uid = 1000) {
    ExecRequest request;
    request.argv = {"sh", "-c", script};
    request.uid = uid;
    request.gid = uid;
    request.env = {"PATH=/usr/bin:/bin"};
    request.cwd = "/home/agent";
    return Begin(request);
  }

  // A temporary directory on the host, removed after the test.
  std::string HostTempDir() {
    return host_dirs_.emplace_back(std::make_unique<test::TempDir>("files-canary"))->path();
  }

  DaemonConfig config_;
  std::unique_ptr<cgroups::CgroupBackend> backend_;
  std::unique_ptr<SandboxHost> host_;
  HostSandboxShape shape_;
  std::optional<SandboxProcess> running_;
  uint64_t seq_ = 0;
  std::string root_prefix_;
  UniqueFd root_;
  uid_t agent_ = 0;
  std::unique_ptr<SandboxFiles> files_;
  std::vector<std::unique_ptr<test::TempDir>> host_dirs_;
};

void ExpectErrno(const Status& status, int error_number, const std::string& what) {
  EXPECT_FALSE(status.ok()) << what;
  EXPECT_EQ(status.error_number(), error_number) << what << ": " << status.ToString();
}

// ---- Round trips ----

TEST_F(SandboxFilesTest, WritesAppendsAndReadsAsTheAgent) {
  umask(022);  // the daemon's usual umask; the API's modes are exact regardless
  auto size = files_->Write("/home/agent/note.txt", "hello", 0666);
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, 5u);
  size = files_->Write("/home/agent/note.txt", " world", 0600, /*append=*/true);
  ASSERT_TRUE(size.ok()) << size.status().ToString();
  EXPECT_EQ(*size, 11u);
  auto data = files_->Read("/home/agent/note.txt");
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(*data, "hello world");
  // Inside: owned by the agent (uid 1000), the mode asked for at creation, readable by it.
  EXPECT_EQ(Sh("stat -c '%u %g %a' note.txt; cat note.txt"), "1000 1000 666\nhello world");
  // Truncates without append.
  size = files_->Write("/home/agent/note.txt", "x");
  ASSERT_TRUE(size.ok());
  EXPECT_EQ(*size, 1u);
  EXPECT_EQ(*files_->Read("/home/agent/note.txt"), "x");
  // An empty file.
  ASSERT_TRUE(files_->Write("/home/agent/empty", "").ok());
  EXPECT_EQ(*files_->Read("/home/agent/empty"), "");
}

TEST_F(SandboxFilesTest, StatAndListDescribeEntriesWithoutFollowingSymlinks) {
  Sh("mkdir sub && printf 12345 > sub/f && chmod 0640 sub/f && ln -s f sub/link && mkfifo sub/fifo && "
     "mkdir sub/dir");
  auto info = files_->Stat("/home/agent/sub/f");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->name, "f");
  EXPECT_EQ(info->type, "file");
  EXPECT_EQ(info->size, 5u);
  EXPECT_EQ(info->mode, 0640u);
  EXPECT_NEAR(static_cast<double>(info->mtime), static_cast<double>(time(nullptr)), 60);
  info = files_->Stat("/home/agent/sub/link");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->type, "symlink");
  EXPECT_EQ(info->size, 1u);  // the target's length: not followed
  info = files_->Stat("/");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->name, "/");
  EXPECT_EQ(info->type, "dir");
  info = files_->Stat("/home/agent/sub/..");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->name, "..");
  EXPECT_EQ(info->type, "dir");

  auto entries = files_->List("/home/agent/sub");
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  std::vector<std::string> seen;
  for (const FileInfo& entry : *entries) seen.push_back(entry.name + ":" + entry.type);
  EXPECT_THAT(seen, ElementsAre("dir:dir", "f:file", "fifo:other", "link:symlink"));
  ExpectErrno(files_->Stat("/home/agent/missing").status(), ENOENT, "stat missing");
  ExpectErrno(files_->List("/home/agent/sub/f").status(), ENOTDIR, "list a file");
  ExpectErrno(files_->Read("/home/agent/sub").status(), EISDIR, "read a directory");
  // Messages name the path as given, never the host's view of it.
  Status missing = files_->Read("/home/agent/missing").status();
  EXPECT_THAT(missing.message(), HasSubstr("/home/agent/missing"));
  EXPECT_THAT(missing.message(), Not(HasSubstr(root_prefix_)));
}

TEST_F(SandboxFilesTest, MkdirRenameAndRemove) {
  umask(022);
  ASSERT_TRUE(files_->Mkdir("/home/agent/a/b/c", 0770, /*parents=*/true).ok());
  EXPECT_EQ(Sh("stat -c '%u %a' a a/b a/b/c"), "1000 770\n1000 770\n1000 770\n");
  EXPECT_TRUE(files_->Mkdir("/home/agent/a/b/c", 0755, true).ok());  // mkdir -p: exists
  ExpectErrno(files_->Mkdir("/home/agent/a/b/c", 0755, false), EEXIST, "mkdir existing");
  ExpectErrno(files_->Mkdir("/home/agent/x/y", 0755, false), ENOENT, "mkdir without parent");
  ASSERT_TRUE(files_->Write("/home/agent/a/file", "f").ok());
  ExpectErrno(files_->Mkdir("/home/agent/a/file", 0755, true), EEXIST, "mkdir -p over a file");
  ExpectErrno(files_->Mkdir("/home/agent/a/file/sub", 0755, true), ENOTDIR, "mkdir -p under a file");
  ExpectErrno(files_->Mkdir("/home/agent/s", 04755, false), EINVAL, "setuid dir");
  ExpectErrno(files_->Mkdir("/", 0755, true), EINVAL, "mkdir /");

  // Rename: never replaces.
  ASSERT_TRUE(files_->Write("/home/agent/other", "o").ok());
  ExpectErrno(files_->Rename("/home/agent/a/file", "/home/agent/other"), EEXIST, "rename onto a file");
  EXPECT_EQ(*files_->Read("/home/agent/a/file"), "f");
  EXPECT_EQ(*files_->Read("/home/agent/other"), "o");
  ASSERT_TRUE(files_->Rename("/home/agent/a", "/home/agent/a2").ok());
  EXPECT_EQ(*files_->Read("/home/agent/a2/file"), "f");
  ExpectErrno(files_->Rename("/home/agent/a", "/home/agent/a3"), ENOENT, "rename missing");

  // Remove: a file, an empty directory, a tree (only with recursive).
  ASSERT_TRUE(files_->Remove("/home/agent/other").ok());
  ExpectErrno(files_->Remove("/home/agent/a2"), ENOTEMPTY, "rmdir non-empty");
  ASSERT_TRUE(files_->Remove("/home/agent/a2", /*recursive=*/true).ok());
  EXPECT_FALSE(Exists(HostPath("/home/agent/a2")));
  EXPECT_FALSE(Exists(HostPath("/home/agent/other")));
  ExpectErrno(files_->Remove("/home/agent/a2"), ENOENT, "remove missing");
  ExpectErrno(files_->Remove("/"), EINVAL, "remove /");
  ExpectErrno(files_->Remove("/home/agent/.."), EINVAL, "remove ..");
}

TEST_F(SandboxFilesTest, RecursiveRemoveNeverFollowsSymlinks) {
  Sh("mkdir -p keep tree/sub && echo kept > keep/file && echo x > tree/sub/x && "
     "ln -s /home/agent/keep tree/abs && ln -s ../../keep tree/sub/rel && ln -s / tree/root");
  ASSERT_TRUE(files_->Remove("/home/agent/tree", true).ok());
  EXPECT_FALSE(Exists(HostPath("/home/agent/tree")));
  EXPECT_EQ(*files_->Read("/home/agent/keep/file"), "kept\n");
  EXPECT_TRUE(Exists(HostPath("/etc/hostname")));
  // A symlink given as the path is removed itself, not what it points to.
  Sh("ln -s /home/agent/keep link");
  ASSERT_TRUE(files_->Remove("/home/agent/link", true).ok());
  EXPECT_EQ(*files_->Read("/home/agent/keep/file"), "kept\n");
}

// Mounts a tmpfs on `target` in the sandbox's mount namespace (the host's root can; nothing
// inside can).
void MountTmpfsInside(pid_t init, const std::string& target) {
  const std::string ns_path = "/proc/" + std::to_string(init) + "/ns/mnt";
  const std::string file = target + "/inside";
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int ns = open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWNS) != 0) _exit(1);
    if (mount("tmpfs", target.c_str(), "tmpfs", 0, "mode=0777,size=1m") != 0) _exit(2);
    int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0 || write(fd, "mounted", 7) != 7) _exit(3);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "mount inside failed: " << status;
}

TEST_F(SandboxFilesTest, RemoveAndTarStopAtMountPoints) {
  Sh("mkdir -p m/mnt && echo a > m/a && echo z > m/z");
  MountTmpfsInside(running_->pid, "/home/agent/m/mnt");
  EXPECT_EQ(*files_->Read("/home/agent/m/mnt/inside"), "mounted");  // control: the mount is there

  auto tar = files_->TarDirectory("/home/agent/m");
  ASSERT_TRUE(tar.ok()) << tar.status().ToString();
  auto items = ParseTar(*tar);
  EXPECT_EQ(items.count("a"), 1u);
  EXPECT_EQ(items.count("z"), 1u);
  EXPECT_EQ(items.count("mnt"), 0u);
  EXPECT_EQ(items.count("mnt/inside"), 0u);

  ExpectErrno(files_->Remove("/home/agent/m/mnt", true), EBUSY, "remove a mount point");
  ExpectErrno(files_->Rename("/home/agent/m/mnt", "/home/agent/m/moved"), EBUSY, "rename a mount point");
  ExpectErrno(files_->Remove("/home/agent/m", true), EBUSY, "remove a tree holding a mount");
  // The mount and what is in it are untouched; the part before it went.
  EXPECT_EQ(*files_->Read("/home/agent/m/mnt/inside"), "mounted");
  EXPECT_FALSE(Exists(HostPath("/home/agent/m/a")));
}

// ---- Permissions ----

TEST_F(SandboxFilesTest, TheKernelChecksAccessAsTheAgent) {
  // Root inside owns "/", so it can make files there that the agent may not read or change.
  Sh("mkdir /rootdir && echo private > /rootdir/private && chmod 0600 /rootdir/private && "
     "echo public > /rootdir/public && chmod 0644 /rootdir/public", 0);
  ExpectErrno(files_->Read("/rootdir/private").status(), EACCES, "read root's 0600 file");
  EXPECT_EQ(*files_->Read("/rootdir/public"), "public\n");  // control
  ExpectErrno(files_->Write("/rootdir/public", "x").status(), EACCES, "write root's file");
  ExpectErrno(files_->Write("/rootdir/new", "x").status(), EACCES, "create in root's dir");
  ExpectErrno(files_->Mkdir("/rootdir/d"), EACCES, "mkdir in root's dir");
  ExpectErrno(files_->Remove("/rootdir/public"), EACCES, "remove root's file");
  EXPECT_EQ(*files_->Read("/rootdir/public"), "public\n");
  ASSERT_TRUE(files_->Write("/home/agent/mine", "x").ok());  // control
  // Rename out of the agent's home into root's directory: EACCES, nothing moved.
  ExpectErrno(files_->Rename("/home/agent/mine", "/rootdir/mine"), EACCES, "rename into root's dir");
  EXPECT_TRUE(Exists(HostPath("/home/agent/mine")));
}

TEST_F(SandboxFilesTest, TheDaemonsSupplementaryGroupsDoNotApply) {
  // A file of root inside's group (host gid uid_base), group-readable only.
  Sh("echo grp > /grpfile && chmod 0640 /grpfile", 0);
  const gid_t sandbox_root_group = static_cast<gid_t>(shape_.uid_base);
  ASSERT_EQ(setgroups(1, &sandbox_root_group), 0);  // the whole test process, for now
  // Control: a thread acting as the agent but keeping that group can read it...
  setfsgid(agent_);
  setfsuid(agent_);
  UniqueFd with_group(openat(root_.get(), "grpfile", O_RDONLY | O_CLOEXEC));
  const int open_errno = errno;
  setfsuid(0);
  setfsgid(0);
  EXPECT_TRUE(with_group.valid()) << ErrnoName(open_errno);
  // ...the API drops the groups for its calls, and restores them afterwards.
  const std::string before = ThreadCredentials();
  ExpectErrno(files_->Read("/grpfile").status(), EACCES, "read via a daemon group");
  EXPECT_EQ(ThreadCredentials(), before);
  ASSERT_EQ(setgroups(0, nullptr), 0);
  Sh("chmod 0644 /grpfile", 0);
  EXPECT_EQ(*files_->Read("/grpfile"), "grp\n");  // control
}

TEST_F(SandboxFilesTest, TheThreadsIdentityIsRestoredAfterEveryCall) {
  const std::string before = ThreadCredentials();
  ASSERT_THAT(before, HasSubstr("Uid:\t0\t0\t0\t0"));
  EXPECT_TRUE(files_->Write("/home/agent/f", "x").ok());
  EXPECT_EQ(ThreadCredentials(), before);
  EXPECT_FALSE(files_->Read("/root/nothing").ok());  // EACCES on the way
  EXPECT_EQ(ThreadCredentials(), before);
  EXPECT_FALSE(files_->Read("relative").ok());
  EXPECT_FALSE(files_->ExtractTar("/home/agent", MakeTar({{"../x"}})).ok());
  EXPECT_FALSE(files_->TarDirectory("/proc").ok());
  EXPECT_EQ(ThreadCredentials(), before);
  // The thread has root's file capabilities back: root inside's 0700 /root opens.
  EXPECT_TRUE(UniqueFd(open(HostPath("/root").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)).valid());
}

// ---- Escapes ----

TEST_F(SandboxFilesTest, DotDotAndSymlinksResolveInsideTheRoot) {
  auto host_passwd = ReadFileToString("/etc/passwd");
  auto inside_passwd = ReadFileToString(HostPath("/etc/passwd"));
  ASSERT_TRUE(host_passwd.ok() && inside_passwd.ok());
  ASSERT_NE(*host_passwd, *inside_passwd);  // the sandbox's is generated
  for (const char* path : {"/etc/passwd", "/../../etc/passwd", "/home/agent/../../../../../etc/passwd",
                           "/etc/../../etc/./passwd", "//etc//passwd"}) {
    auto data = files_->Read(path);
    ASSERT_TRUE(data.ok()) << path << ": " << data.status().ToString();
    EXPECT_EQ(*data, *inside_passwd) << path;
  }
  Sh("ln -s / up && ln -s ../../../../../../.. rel && ln -s /etc/hostname hn && ln -s /etc etc");
  const std::string hostname = std::string(kHostname) + "\n";
  for (const char* path : {"/home/agent/up/etc/hostname", "/home/agent/rel/etc/hostname",
                           "/home/agent/hn", "/home/agent/etc/hostname", "/home/agent/up/home/agent/up/etc/hostname"}) {
    auto data = files_->Read(path);
    ASSERT_TRUE(data.ok()) << path << ": " << data.status().ToString();
    EXPECT_EQ(*data, hostname) << path;
  }
  auto listed = files_->List("/home/agent/up/etc");
  ASSERT_TRUE(listed.ok());
  std::vector<std::string> names;
  for (const FileInfo& e : *listed) names.push_back(e.name);
  EXPECT_THAT(names, Contains("hostname"));
  // Writes do not follow a final symlink; through a symlinked parent they stay inside.
  ExpectErrno(files_->Write("/home/agent/hn", "evil").status(), EINVAL, "write through a final symlink");
  EXPECT_EQ(*files_->Read("/etc/hostname"), hostname);
  ASSERT_TRUE(files_->Write("/home/agent/up/tmp/through", "t").ok());
  EXPECT_EQ(Sh("cat /tmp/through"), "t");
}

TEST_F(SandboxFilesTest, MagicLinksAndKernelFileSystemsAreRefused) {
  Sh("ln -s /proc/1/root magic && ln -s /proc/self/cwd selfcwd");
  for (const char* path : {"/home/agent/magic/etc/hostname", "/proc/1/root/etc/hostname",
                           "/proc/1/cwd/etc/hostname", "/home/agent/selfcwd/etc/hostname",
                           "/proc/self/root/etc/hostname", "/dev/fd/3"}) {
    auto data = files_->Read(path);
    EXPECT_FALSE(data.ok()) << path << " gave " << (data.ok() ? *data : "");
  }
  ExpectErrno(files_->Read("/home/agent/magic/etc/hostname").status(), ELOOP, "magic link");
  // procfs, sysfs, devpts: refused even where the agent could read them itself.
  EXPECT_THAT(Sh("cat /proc/1/comm /sys/kernel/uevent_seqnum >/dev/null && echo readable"), HasSubstr("readable"));
  for (const char* path : {"/proc/1/environ", "/proc/1/comm", "/proc/cpuinfo", "/sys/kernel/uevent_seqnum"}) {
    Status status = files_->Read(path).status();
    ExpectErrno(status, EACCES, path);
    EXPECT_THAT(status.message(), HasSubstr(path));
  }
  EXPECT_FALSE(files_->Read("/proc/self/environ").ok());
  ExpectErrno(files_->List("/proc").status(), EACCES, "list /proc");
  ExpectErrno(files_->List("/sys").status(), EACCES, "list /sys");
  ExpectErrno(files_->Stat("/sys/kernel").status(), EACCES, "stat /sys/kernel");
  ExpectErrno(files_->List("/dev/pts").status(), EACCES, "list /dev/pts");
  ExpectErrno(files_->TarDirectory("/proc/1").status(), EACCES, "tar /proc/1");
  ExpectErrno(files_->Write("/proc/1/comm", "x").status(), EACCES, "write /proc/1/comm");
  ExpectErrno(files_->Mkdir("/proc/1/x"), EACCES, "mkdir in /proc");
  ExpectErrno(files_->Remove("/sys/kernel/uevent_seqnum"), EACCES, "remove in /sys");
  ExpectErrno(files_->Rename("/home/agent/magic", "/proc/1/x"), EACCES, "rename into /proc");
  // Devices: /dev lists, a device never opens (nor a masked /proc file: /dev/null bound on it).
  auto dev = files_->List("/dev");
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  std::map<std::string, std::string> types;
  for (const FileInfo& e : *dev) types[e.name] = e.type;
  EXPECT_EQ(types["zero"], "other");
  EXPECT_EQ(types["fd"], "symlink");
  for (const char* path : {"/dev/zero", "/dev/null", "/dev/urandom", "/dev/tty"}) {
    ExpectErrno(files_->Read(path).status(), EACCES, path);
  }
  if (Exists(HostPath("/proc/kcore"))) ExpectErrno(files_->Read("/proc/kcore").status(), EACCES, "/proc/kcore");
  ExpectErrno(files_->Write("/dev/null", "x").status(), EACCES, "write /dev/null");
  ExpectErrno(files_->Write("/dev/full", "x").status(), EACCES, "write /dev/full");
}

TEST_F(SandboxFilesTest, AHostCanaryIsNeverReachable) {
  const std::string dir = HostTempDir();
  const std::string canary = dir + "/canary";
  const std::string secret = "HOST-CANARY-" + std::to_string(getpid());
  ASSERT_TRUE(WriteNewFile(canary, secret).ok());
  // The same path inside, with other content: the paths below resolve, but inside.
  Sh("mkdir -p " + dir + " && echo inside > " + canary + " && ln -s " + canary + " hostlink && ln -s " + dir +
     " hostdir && ln -s /proc/" + std::to_string(running_->pid) + "/root initroot");
  const std::string pid = std::to_string(getpid());
  const std::string init = std::to_string(running_->pid);
  std::vector<std::string> paths = {
      canary, "/.." + canary, "/../../../.." + canary, "/home/agent/../../.." + canary,
      "/home/agent/hostlink", "/home/agent/hostdir/canary", "/home/agent/initroot" + canary,
      "/proc/" + pid + "/root" + canary, "/proc/" + init + "/root" + canary, "/proc/1/root" + canary,
      "/proc/self/root" + canary, "/proc/thread-self/root" + canary, "/proc/1/cwd/../../.." + canary,
      "/dev/fd/" + std::to_string(root_.get()) + canary, "/proc/" + pid + "/cwd/" + canary,
      "/proc/" + pid + "/fd/" + std::to_string(root_.get()) + canary,
  };
  int inside_reads = 0;
  for (const std::string& path : paths) {
    auto data = files_->Read(path);
    if (data.ok()) {
      EXPECT_EQ(*data, "inside\n") << path;
      ++inside_reads;
    }
    auto tar = files_->TarDirectory(path.substr(0, path.rfind('/')));
    if (tar.ok()) { EXPECT_THAT(*tar, Not(HasSubstr(secret))) << path; }
  }
  EXPECT_GE(inside_reads, 5);  // control: the plain, ".." and symlink paths did resolve (inside)
  auto host = ReadFileToString(canary);
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(*host, secret);  // the canary is intact
}

TEST_F(SandboxFilesTest, AFifoIsRefusedWithoutBlocking) {
  Sh("mkfifo fifo && mkfifo /tmp/fifo2");
  for (const char* path : {"/home/agent/fifo", "/tmp/fifo2"}) {
    auto start = std::chrono::steady_clock::now();
    ExpectErrno(files_->Read(path).status(), EINVAL, path);
    ExpectErrno(files_->Write(path, "x").status(), EINVAL, path);
    ExpectErrno(files_->Write(path, "x", 0644, true).status(), EINVAL, path);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  }
  auto info = files_->Stat("/home/agent/fifo");  // control: it is there
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->type, "other");
}

TEST_F(SandboxFilesTest, SizesAreCapped) {
  Sh("truncate -s 10G huge && head -c " + std::to_string(kMaxBytes) + " /dev/zero > max && head -c " +
     std::to_string(kMaxBytes + 1) + " /dev/zero > over && mkdir big && cp over big/");
  auto start = std::chrono::steady_clock::now();
  ExpectErrno(files_->Read("/home/agent/huge").status(), EFBIG, "10 GiB sparse");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  ExpectErrno(files_->Read("/home/agent/over").status(), EFBIG, "max + 1");
  auto max = files_->Read("/home/agent/max");
  ASSERT_TRUE(max.ok()) << max.status().ToString();
  EXPECT_EQ(max->size(), kMaxBytes);
  ExpectErrno(files_->Write("/home/agent/w", std::string(kMaxBytes + 1, 'x')).status(), EFBIG, "write max + 1");
  EXPECT_FALSE(Exists(HostPath("/home/agent/w")));
  EXPECT_TRUE(files_->Write("/home/agent/w", std::string(kMaxBytes, 'x')).ok());
  ExpectErrno(files_->TarDirectory("/home/agent/big").status(), EFBIG, "tar above the cap");
  ExpectErrno(files_->ExtractTar("/home/agent", MakeTar({{"big2", AE_IFREG, std::string(kMaxBytes + 1, 'y')}}))
                  .status(), EFBIG, "untar above the cap");
  EXPECT_FALSE(Exists(HostPath("/home/agent/big2")));
  // Listings are capped too.
  Sh("mkdir many && cd many && for i in $(seq 1 40); do : > file-$i; done");
  SandboxFiles small(root_.get(), agent_, agent_, 1000);
  ExpectErrno(small.List("/home/agent/many").status(), EFBIG, "list above the cap");
  EXPECT_TRUE(files_->List("/home/agent/many").ok());
}

TEST_F(SandboxFilesTest, BadPathsAreInvalid) {
  const std::string nul("/home/agent/a\0b", 15);
  const std::string long_path = "/home/agent/" + std::string(5000, 'a');
  for (const std::string& path : {std::string(), std::string("relative"), std::string("home/agent"), nul, long_path}) {
    ExpectErrno(files_->Read(path).status(), EINVAL, "read");
    ExpectErrno(files_->Write(path, "x").status(), EINVAL, "write");
    ExpectErrno(files_->Stat(path).status(), EINVAL, "stat");
    ExpectErrno(files_->List(path).status(), EINVAL, "list");
    ExpectErrno(files_->Mkdir(path), EINVAL, "mkdir");
    ExpectErrno(files_->Remove(path), EINVAL, "remove");
    ExpectErrno(files_->Rename(path, "/home/agent/x"), EINVAL, "rename from");
    ExpectErrno(files_->Rename("/home/agent/x", path), EINVAL, "rename to");
    ExpectErrno(files_->TarDirectory(path).status(), EINVAL, "tar");
    ExpectErrno(files_->ExtractTar(path, MakeTar({{"a", AE_IFREG, "a"}})).status(), EINVAL, "untar");
  }
  EXPECT_FALSE(Exists(HostPath("/home/agent/a")));
  ExpectErrno(files_->Write("/home/agent/s", "x", 04755).status(), EINVAL, "setuid mode");
  ExpectErrno(files_->Write("/home/agent/s", "x", 02755).status(), EINVAL, "setgid mode");
  ExpectErrno(files_->Write("/home/agent/s", "x", 0100644).status(), EINVAL, "file type bits");
  EXPECT_FALSE(Exists(HostPath("/home/agent/s")));
  EXPECT_TRUE(files_->Write("/home/agent/s", "x", 0755).ok());  // control
}

TEST_F(SandboxFilesTest, RenamesRacingInsideNeverLeadOutOfTheRoot) {
  const std::string dir = HostTempDir();
  const std::string canary = dir + "/canary";
  const std::string secret = "HOST-CANARY-" + std::to_string(getpid());
  ASSERT_TRUE(WriteNewFile(canary, secret).ok());
  auto host_passwd = ReadFileToString("/etc/passwd");
  ASSERT_TRUE(host_passwd.ok());
  // Through the symlink d -> "/" each path names a file in the sandbox's root; resolved against
  // the host's root it would name the host's /secret (absent), /etc/passwd or the canary.
  Sh("echo in-root > /secret && mkdir -p " + dir + " && echo canary-inside > " + canary, 0);
  Sh("mkdir -p d/etc d" + dir + " && echo in-d > d/secret && echo in-d-passwd > d/etc/passwd && "
     "echo in-d-canary > d" + canary);
  Started loop = Background(
      "while :; do mv /home/agent/d /home/agent/d2; ln -s / /home/agent/d; rm /home/agent/d; "
      "mv /home/agent/d2 /home/agent/d; done 2>/dev/null");
  const std::vector<std::string> paths = {"/home/agent/d/secret", "/home/agent/d/etc/passwd",
                                          "/home/agent/d" + canary, "/home/agent/d/etc/../secret"};
  std::map<std::string, int> seen;
  int reads = 0, errors = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (std::chrono::steady_clock::now() < end) {
    for (const std::string& path : paths) {
      auto data = files_->Read(path);
      ++reads;
      if (!data.ok()) {
        ++errors;
        ++seen[ErrnoName(data.status().error_number())];
        continue;
      }
      ASSERT_NE(*data, secret) << path;
      ASSERT_NE(*data, *host_passwd) << path;
      ++seen[data->size() > 40 ? "sandbox /etc/passwd" : *data];
    }
  }
  Finish(loop, SIGKILL);
  std::string summary;
  for (const auto& [content, count] : seen) summary += " [" + content + "]=" + std::to_string(count);
  RecordProperty("reads", summary);
  EXPECT_GT(reads, 1000) << summary;
  // Controls: reads succeeded, and some went through the symlink (to the sandbox's root).
  EXPECT_GT(reads - errors, 0) << summary;
  EXPECT_GT(seen["in-root\n"] + seen["canary-inside\n"] + seen["sandbox /etc/passwd"], 0) << summary;
  for (const auto& [content, count] : seen) {
    if (content.rfind('E', 0) == 0) continue;  // an errno name
    EXPECT_TRUE(content == "in-d\n" || content == "in-d-passwd\n" || content == "in-d-canary\n" ||
                content == "in-root\n" || content == "canary-inside\n" || content == "sandbox /etc/passwd")
        << content;
  }
  std::cout << "race: " << reads << " reads, " << errors << " errors;" << summary << "\n";
}

// ---- Tar ----

TEST_F(SandboxFilesTest, TarDownloadsADirectoryAndUploadsItBack) {
  Sh("mkdir -p t/sub/deeper && chmod 0755 t/sub t/sub/deeper && printf a > t/a.txt && chmod 0640 t/a.txt && printf b > t/sub/b.txt && "
     "ln -s ../a.txt t/sub/link && ln -s / t/root && mkfifo t/fifo && printf u > t/$(printf '\\303\\251')");
  auto tar = files_->TarDirectory("/home/agent/t");
  ASSERT_TRUE(tar.ok()) << tar.status().ToString();
  auto items = ParseTar(*tar);
  std::vector<std::string> names;
  for (const auto& [name, item] : items) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("a.txt", "root", "sub", "sub/b.txt", "sub/deeper", "sub/link", "\xc3\xa9"));
  EXPECT_EQ(items["a.txt"].type, static_cast<mode_t>(AE_IFREG));
  EXPECT_EQ(items["a.txt"].data, "a");
  EXPECT_EQ(items["a.txt"].perm, 0640u);
  EXPECT_EQ(items["sub"].type, static_cast<mode_t>(AE_IFDIR));
  EXPECT_EQ(items["sub/link"].type, static_cast<mode_t>(AE_IFLNK));
  EXPECT_EQ(items["sub/link"].data, "../a.txt");
  EXPECT_EQ(items["root"].data, "/");
  EXPECT_EQ(items["\xc3\xa9"].data, "u");

  ASSERT_TRUE(files_->Mkdir("/home/agent/t2").ok());
  auto written = files_->ExtractTar("/home/agent/t2", *tar);
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  EXPECT_EQ(*written, 7u);
  EXPECT_EQ(Sh("cd t2 && cat a.txt sub/b.txt sub/link $(printf '\\303\\251'); echo; readlink root; "
               "stat -c '%u %a %F' a.txt sub sub/deeper"),
            "abau\n/\n1000 640 regular file\n1000 755 directory\n1000 755 directory\n");
}

TEST_F(SandboxFilesTest, UploadedTarsStayInsideTheirDirectory) {
  ASSERT_TRUE(files_->Mkdir("/home/agent/dest").ok());
  const std::string dest = "/home/agent/dest";
  // Control: ordinary entries, implicit parents, a read-only directory filled before its chmod.
  auto good = files_->ExtractTar(dest, MakeTar({{"./", AE_IFDIR}, {"ro", AE_IFDIR, "", "", 0555}, {"ro/f", AE_IFREG, "in ro"},
                                                {"x/y/z", AE_IFREG, "deep", "", 0600}, {"lnk", AE_IFLNK, "x/y/z"}}));
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  EXPECT_EQ(*good, 4u);
  EXPECT_EQ(Sh("cd dest && cat ro/f lnk && stat -c %a ro x/y/z"), "in rodeep555\n600\n");

  // Refused before anything is written.
  struct Case {
    const char* what;
    std::vector<TarSpec> entries;
    int error;
  };
  const std::vector<Case> refused = {
      {"dot-dot", {{"first"}, {"../x", AE_IFREG, "evil"}}, EINVAL},
      {"deep dot-dot", {{"first"}, {"a/../../x", AE_IFREG, "evil"}}, EINVAL},
      {"absolute", {{"first"}, {"/abs-evil", AE_IFREG, "evil"}}, EINVAL},
      {"hard link", {{"first"}, {"hl", AE_IFREG, "", "/etc/passwd"}}, EINVAL},
      {"relative hard link", {{"first"}, {"hl", AE_IFREG, "", "first"}}, EINVAL},
      {"device", {{"first"}, {"dev", AE_IFCHR}}, EINVAL},
      {"fifo", {{"first"}, {"fifo", AE_IFIFO}}, EINVAL},
      {"not a tar", {}, EINVAL},
  };
  for (const Case& c : refused) {
    std::string tar = c.entries.empty() ? std::string(1024, 'j') : MakeTar(c.entries);
    ExpectErrno(files_->ExtractTar(dest, tar).status(), c.error, c.what);
    EXPECT_FALSE(Exists(HostPath(dest + "/first"))) << c.what;
  }
  EXPECT_FALSE(Exists(HostPath("/home/agent/x")));
  EXPECT_FALSE(Exists(HostPath("/abs-evil")));
  EXPECT_FALSE(Exists(HostPath(dest + "/hl")));
  EXPECT_FALSE(Exists(HostPath(dest + "/dev")));

  // A symlink to "/" from the archive, then an entry through it: lands inside dest.
  auto through = files_->ExtractTar(dest, MakeTar({{"l", AE_IFLNK, "/"}, {"l/etc/evil", AE_IFREG, "evil"},
                                                   {"up", AE_IFLNK, "../../../../.."}, {"up/evil2", AE_IFREG, "e2"}}));
  ASSERT_TRUE(through.ok()) << through.status().ToString();
  EXPECT_EQ(*files_->Read(dest + "/etc/evil"), "evil");
  EXPECT_EQ(*files_->Read(dest + "/evil2"), "e2");
  EXPECT_FALSE(Exists(HostPath("/etc/evil")));
  EXPECT_FALSE(Exists(HostPath("/evil2")));
  EXPECT_FALSE(Exists(HostPath("/home/evil2")));
  EXPECT_FALSE(Exists("/etc/evil"));
  EXPECT_FALSE(Exists("/evil2"));
  // A symlink planted by the sandbox to outside dest: refused or contained, never followed out.
  Sh("ln -s /home/agent dest/planted && ln -s /etc dest/etclink");
  auto planted = files_->ExtractTar(dest, MakeTar({{"planted/evil3", AE_IFREG, "e3"}}));
  EXPECT_FALSE(Exists(HostPath("/home/agent/evil3")));
  if (planted.ok()) { EXPECT_EQ(*files_->Read(dest + "/home/agent/evil3"), "e3"); }
  const std::string passwd_before = *ReadFileToString(HostPath("/etc/passwd"));
  auto replace = files_->ExtractTar(dest, MakeTar({{"etclink/passwd", AE_IFREG, "evil"}}));
  EXPECT_EQ(*ReadFileToString(HostPath("/etc/passwd")), passwd_before);
  if (replace.ok()) { EXPECT_EQ(*files_->Read(dest + "/etc/passwd"), "evil"); }
  // An entry replacing a planted symlink replaces the link, not its target.
  Sh("echo keep > keepme && ln -s /home/agent/keepme dest/swap");
  ASSERT_TRUE(files_->ExtractTar(dest, MakeTar({{"swap", AE_IFREG, "new"}})).ok());
  EXPECT_EQ(*files_->Read("/home/agent/keepme"), "keep\n");
  EXPECT_EQ(*files_->Read(dest + "/swap"), "new");
  // Into a kernel file system: refused.
  ExpectErrno(files_->ExtractTar("/proc/1", MakeTar({{"x", AE_IFREG, "x"}})).status(), EACCES, "untar into /proc");
  ExpectErrno(files_->ExtractTar("/", MakeTar({{"proc/1/x", AE_IFREG, "x"}})).status(), EACCES, "untar via /proc");
}

}  // namespace
}  // namespace corral::supervisor
