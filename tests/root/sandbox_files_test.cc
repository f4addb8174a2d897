// The file API's kernel side against a real persistent sandbox: round trips as the agent, and
// every way out of the sandbox's root we could think of (THREATS.md rows 15-18). The tar
// routes are in sandbox_files_tar_test.cc; the fixture in sandbox_files_fixture.h.
#include "supervisor/sandboxes/sandbox_files.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/file_util.h"
#include "tests/root/sandbox_files_fixture.h"

namespace corral::supervisor {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;


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

}  // namespace
}  // namespace corral::supervisor
