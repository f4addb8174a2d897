// The fixture of the file API's root tests (sandbox_files_test.cc, sandbox_files_tar_test.cc):
// a real persistent sandbox with a SandboxFiles acting as its agent, commands run inside as
// the agent or as root inside, and tar archives built and read in the test.
#pragma once

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <linux/openat2.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cgroups/cgroup_backend.h"
#include "common/file_util.h"
#include "supervisor/commands/init_client.h"
#include "supervisor/ids.h"
#include "supervisor/sandboxes/sandbox_files.h"
#include "supervisor/sandboxes/sandbox_host.h"
#include "tests/root/host_sandbox_shape.h"
#include "tests/root/init_test_util.h"
#include "tests/root/root_test_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {

inline constexpr uint64_t kMaxBytes = 1 << 20;
inline constexpr const char* kHostname = "sbfiles";

// ---- Tar archives built and read in the test ----

struct TarSpec {
  std::string name;
  mode_t type = AE_IFREG;
  std::string content;   // a file's bytes or a symlink's target
  std::string hardlink;  // non-empty: a hard link to this name
  mode_t perm = 0644;
};

inline la_ssize_t AppendToString(archive*, void* data, const void* buffer, size_t length) {
  static_cast<std::string*>(data)->append(static_cast<const char*>(buffer), length);
  return static_cast<la_ssize_t>(length);
}

inline std::string MakeTar(const std::vector<TarSpec>& specs) {
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

inline std::map<std::string, TarItemSeen> ParseTar(const std::string& tar) {
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

inline bool Exists(const std::string& host_path) {
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
    // A uid range of our own, apart from sandbox_host_test's.
    ASSERT_NO_FATAL_FAILURE(MakeTestHost(config_, backend_, host_, shape_, 15000));
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
    auto join = host_->CreateCommandCgroup(shape_.id, request.seq);
    EXPECT_TRUE(join.ok()) << join.status().ToString();
    if (!join.ok()) return started;
    for (const UniqueFd& fd : *join) request.cgroup_join_fds.push_back(fd.get());
    auto fds = SendExec(running_->control.get(), request);
    EXPECT_TRUE(fds.ok()) << fds.status().ToString();
    if (!fds.ok()) return started;
    started.fds = std::move(*fds);
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
    auto exited = Expect(control, initproto::MsgType::kExited);
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

inline void ExpectErrno(const Status& status, int error_number, const std::string& what) {
  EXPECT_FALSE(status.ok()) << what;
  EXPECT_EQ(status.error_number(), error_number) << what << ": " << status.ToString();
}

}  // namespace corral::supervisor
