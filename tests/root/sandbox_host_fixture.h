// A persistent sandbox driven by hand through corral-init's control protocol, as corrald drives
// it: SandboxHost, a uid range and cgroup of the test's own, and Run() for one command to its end.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "cgroups/cgroup_backend.h"
#include "supervisor/commands/init_client.h"
#include "supervisor/sandboxes/sandbox_host.h"
#include "tests/root/host_sandbox_shape.h"
#include "tests/root/init_test_util.h"
#include "tests/root/root_test_util.h"

namespace corral::supervisor {

using initproto::MsgType;

struct Finished {
  int wait_status = -1;
  std::string out, err;
  int failed_step = 0;
  int failed_errno = 0;
  cgroups::CgroupStats stats;
};

class SandboxHostFixture : public test::SandboxTest {
 protected:
  void SetUp() override {
    SandboxTest::SetUp();
    if (IsSkipped()) return;
    // A uid range of our own, far from what other tests on this host use.
    ASSERT_NO_FATAL_FAILURE(MakeTestHost(config_, backend_, host_, shape_, 16000));
  }
  void TearDown() override {
    if (host_) {
      EXPECT_TRUE(host_->Stop(shape_.id, running_ ? &*running_ : nullptr).ok());
      EXPECT_TRUE(host_->Destroy(shape_.id).ok());
    }
    SandboxTest::TearDown();
  }

  void StartSandbox() {
    auto started = host_->Start(shape_.id, shape_.Spec(*host_));
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    running_ = std::move(*started);
  }

  // Runs one command to its end the way the daemon does.
  Finished Run(ExecRequest request) {
    Finished result;
    request.seq = ++seq_;
    const int control = running_->control.get();
    // As the daemon does with an init of this release: the child joins its cgroup itself.
    auto join = host_->CreateCommandCgroup(shape_.id, request.seq);
    EXPECT_TRUE(join.ok()) << join.status().ToString();
    if (!join.ok()) return result;
    if (request.cgroup_join_fds.empty()) {
      for (const UniqueFd& fd : *join) request.cgroup_join_fds.push_back(fd.get());
    }
    auto fds = SendExec(control, request);
    EXPECT_TRUE(fds.ok()) << fds.status().ToString();
    if (!fds.ok()) return result;
    UniqueFd master;
    for (;;) {
      if (!WaitReadable(fds->sync.get())) break;
      auto message = ReceiveMessage(fds->sync.get(), true);
      if (!message.ok() || !message->has_value()) break;  // EOF: exec'd (or died)
      if ((*message)->type == MsgType::kChildPty && !(*message)->fds.empty()) {
        master = std::move((*message)->fds[0]);
      } else if ((*message)->type == MsgType::kChildFailed) {
        initproto::ChildFailedBody body;
        (*message)->BodyAs(body);
        result.failed_step = body.step;
        result.failed_errno = body.error;
      }
    }
    if (fds->stdin_w) {
      fds->stdin_w.reset();
      EXPECT_TRUE(SendCloseStdin(control, request.seq).ok());
    }
    if (master) {
      result.out = Drain(master.get());
    } else {
      result.out = Drain(fds->stdout_r.get());
      result.err = Drain(fds->stderr_r.get());
    }
    auto exited = Expect(control, MsgType::kExited);
    EXPECT_TRUE(exited.has_value());
    if (exited) {
      initproto::ExitedBody body;
      exited->BodyAs(body);
      EXPECT_EQ(body.seq, request.seq);
      result.wait_status = body.wait_status;
    }
    auto stats = host_->FinishCommandCgroup(shape_.id, request.seq);
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    if (stats.ok()) result.stats = *stats;
    EXPECT_TRUE(SendAck(control, request.seq).ok());
    return result;
  }

  static ExecRequest Sh(const std::string& script, uid_t uid = 1000) {
    ExecRequest request;
    request.argv = {"sh", "-c", script};
    request.uid = uid;
    request.gid = uid;
    request.env = {"PATH=/usr/bin:/bin", "HOME=/home/agent"};
    request.cwd = "/home/agent";
    return request;
  }

  DaemonConfig config_;
  std::unique_ptr<cgroups::CgroupBackend> backend_;
  std::unique_ptr<SandboxHost> host_;
  HostSandboxShape shape_;
  std::optional<SandboxProcess> running_;
  uint64_t seq_ = 0;
};

}  // namespace corral::supervisor
