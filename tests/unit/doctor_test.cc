// corral doctor's checks that need no privileges (supervisor/doctor.h): the kernel's version,
// the state directory's free space, Claude Code's presence and version, the sysctl that switches
// user namespaces off, the output formats, and the CLI's options. The probes that need root, and
// their FAIL paths forced with seccomp, are in tests/root/doctor_test.cc.
#include "supervisor/doctor.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "supervisor/config.h"
#include "tools/corral/doctor_command.h"
#include "tests/testing/temp_dir.h"

namespace corral::supervisor {
namespace {

class DoctorTest : public ::testing::Test {
 protected:
  std::string Script(const std::string& name, const std::string& body) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
    chmod(path.c_str(), 0755);
    return path;
  }

  test::TempDir tmp_{"doctor-unit"};
  const std::string dir_ = tmp_.path();
};

TEST(DoctorKernelTest, TooOldFailsOlderThanTestedWarnsTestedIsOk) {
  EXPECT_EQ(CheckKernel("4.19.0-25-amd64").level, CheckLevel::kFail);
  EXPECT_EQ(CheckKernel("5.6.19").level, CheckLevel::kFail);
  EXPECT_EQ(CheckKernel("5.10.0-28-amd64").level, CheckLevel::kWarn);
  EXPECT_EQ(CheckKernel("6.1.0-27-amd64").level, CheckLevel::kOk);
  EXPECT_EQ(CheckKernel("6.18.44").level, CheckLevel::kOk);
  EXPECT_EQ(CheckKernel("not-a-version").level, CheckLevel::kFail);
  EXPECT_NE(CheckKernel("5.4.0").detail.find("5.7 or later"), std::string::npos);
}

TEST_F(DoctorTest, StateDirFiguresAndTheNearestExistingParent) {
  CheckResult here = CheckStateDir(dir_);
  EXPECT_NE(here.level, CheckLevel::kFail) << here.detail;  // this machine's /tmp has room
  EXPECT_NE(here.detail.find("MiB free"), std::string::npos);
  // Not made yet (before corrald's first start): its parent's file system is what counts.
  CheckResult later = CheckStateDir(dir_ + "/not/yet/made");
  EXPECT_EQ(later.level, here.level);
  EXPECT_NE(later.detail.find("(on " + dir_ + ")"), std::string::npos) << later.detail;
}

TEST_F(DoctorTest, ClaudeCodeMissingOrOtherVersionWarnsTheTestedOneIsOk) {
  CheckResult missing = CheckClaudeCode(dir_ + "/claude", "2.1.330");
  EXPECT_EQ(missing.level, CheckLevel::kWarn);
  EXPECT_NE(missing.detail.find("agent sessions cannot start"), std::string::npos);
  EXPECT_NE(missing.detail.find("@anthropic-ai/claude-code@2.1.330"), std::string::npos);
  CheckResult other = CheckClaudeCode(Script("claude-old", "echo '1.0.0 (Claude Code)'"), "2.1.330");
  EXPECT_EQ(other.level, CheckLevel::kWarn);
  EXPECT_NE(other.detail.find("is 1.0.0; corral is tested with 2.1.330"), std::string::npos) << other.detail;
  CheckResult silent = CheckClaudeCode(Script("claude-silent", "exit 3"), "2.1.330");
  EXPECT_EQ(silent.level, CheckLevel::kWarn);
  CheckResult tested = CheckClaudeCode(Script("claude", "echo '2.1.330 (Claude Code)'"), "2.1.330");
  EXPECT_EQ(tested.level, CheckLevel::kOk) << tested.detail;
  EXPECT_NE(tested.detail.find("2.1.330"), std::string::npos);
  // Found by name in PATH, as corrald's sessions find it.
  const char* old_path = getenv("PATH");
  const std::string saved = old_path ? old_path : "";
  setenv("PATH", dir_.c_str(), 1);
  CheckResult by_name = CheckClaudeCode("claude", "2.1.330");
  setenv("PATH", saved.c_str(), 1);
  EXPECT_EQ(by_name.level, CheckLevel::kOk) << by_name.detail;
}

TEST_F(DoctorTest, UserNamespacesSwitchedOffBySysctlFail) {
  ASSERT_EQ(mkdir((dir_ + "/sys").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((dir_ + "/sys/user").c_str(), 0755), 0);
  std::ofstream(dir_ + "/sys/user/max_user_namespaces") << "0\n";
  DoctorOptions options;
  options.proc_root = dir_;
  options.probe_namespaces = false;
  CheckResult off = CheckUserNamespaces(options);
  EXPECT_EQ(off.level, CheckLevel::kFail);
  EXPECT_NE(off.detail.find("sysctl -w user.max_user_namespaces"), std::string::npos);
  // Control: a positive value (and Ubuntu's switches, which concern unprivileged users only).
  std::ofstream(dir_ + "/sys/user/max_user_namespaces") << "15000\n";
  ASSERT_EQ(mkdir((dir_ + "/sys/kernel").c_str(), 0755), 0);
  std::ofstream(dir_ + "/sys/kernel/apparmor_restrict_unprivileged_userns") << "1\n";
  CheckResult on = CheckUserNamespaces(options);
  EXPECT_EQ(on.level, CheckLevel::kOk) << on.detail;
  EXPECT_NE(on.detail.find("AppArmor"), std::string::npos);
}

TEST(DoctorFormatTest, TextJsonAndTheVerdict) {
  std::vector<CheckResult> results = {{"kernel", CheckLevel::kOk, "Linux 6.1"},
                                      {"landlock", CheckLevel::kWarn, "unavailable"}};
  EXPECT_FALSE(AnyFailed(results));
  EXPECT_EQ(FormatDoctor(results), "OK    kernel              Linux 6.1\nWARN  landlock            unavailable\n");
  results.push_back({"openat2", CheckLevel::kFail, "ENOSYS"});
  EXPECT_TRUE(AnyFailed(results));
  auto json = nlohmann::json::parse(DoctorJson(results));
  EXPECT_EQ(json["ok"], false);
  ASSERT_EQ(json["checks"].size(), 3u);
  EXPECT_EQ(json["checks"][2], (nlohmann::json{{"name", "openat2"}, {"level", "fail"}, {"detail", "ENOSYS"}}));
}

// The cgroup mount's line in mountinfo decides: v1, v2 with favordynmods, v2 without (the one
// whose detail says how to switch it on). Another cgroup2 mount elsewhere does not count.
TEST_F(DoctorTest, CgroupJoinReadsTheMountsOptions) {
  ASSERT_EQ(mkdir((dir_ + "/self").c_str(), 0755), 0);
  DoctorOptions options;
  options.proc_root = dir_;
  auto with = [&](const std::string& mountinfo) {
    std::ofstream(dir_ + "/self/mountinfo") << mountinfo;
    return CheckCgroupJoin(options);
  };
  const std::string unified =
      "30 24 0:26 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:6 - cgroup2 cgroup2 rw,favordynmods\n";
  CheckResult v1 = with("25 24 0:22 / /sys/fs/cgroup ro,nosuid shared:5 - tmpfs tmpfs ro,mode=755\n" + unified);
  EXPECT_EQ(v1.level, CheckLevel::kOk);
  EXPECT_NE(v1.detail.find("cgroup v1"), std::string::npos) << v1.detail;
  CheckResult slow = with("29 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
                          "rw,nsdelegate,memory_recursiveprot\n");
  EXPECT_EQ(slow.level, CheckLevel::kOk);
  EXPECT_NE(slow.detail.find("mount -o remount,favordynmods /sys/fs/cgroup"), std::string::npos) << slow.detail;
  CheckResult fast = with("29 24 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 "
                          "rw,nsdelegate,favordynmods,memory_recursiveprot\n");
  EXPECT_NE(fast.detail.find("with favordynmods"), std::string::npos) << fast.detail;
}

// The doctor looks where corrald will: its defaults are the daemon's.
TEST_F(DoctorTest, DensityLimitsBelowMaxSandboxesWarnAndSayWhich) {
  for (const char* dir : {"/sys", "/sys/user", "/sys/kernel", "/block", "/block/loop7", "/block/loop7/loop",
                          "/block/loop8", "/block/sda"}) {
    ASSERT_EQ(mkdir((dir_ + dir).c_str(), 0755), 0) << dir;
  }
  for (const char* name : {"user/max_user_namespaces", "user/max_mnt_namespaces", "user/max_net_namespaces",
                           "user/max_pid_namespaces", "user/max_ipc_namespaces", "user/max_uts_namespaces",
                           "user/max_cgroup_namespaces"}) {
    std::ofstream(dir_ + "/sys/" + name) << "94000\n";
  }
  std::ofstream(dir_ + "/sys/kernel/pid_max") << "4194304\n";
  std::ofstream(dir_ + "/block/loop7/loop/backing_file") << "/var/lib/corral/sandboxes/sb_x/layer.img\n";
  DoctorOptions options;
  options.proc_root = dir_;
  options.sys_root = dir_;
  options.max_sandboxes = 2000;
  CheckResult room = CheckNamespaceLimits(options);
  EXPECT_EQ(room.level, CheckLevel::kOk) << room.detail;
  EXPECT_NE(room.detail.find("room for 47000 sandboxes"), std::string::npos) << room.detail;  // 2 user ns each
  CheckResult layers = CheckLayers(options);
  EXPECT_EQ(layers.level, CheckLevel::kOk);
  EXPECT_NE(layers.detail.find("1 loop devices attached now"), std::string::npos) << layers.detail;  // loop8: no backing
  // A low sysctl: named, and only it.
  std::ofstream(dir_ + "/sys/user/max_net_namespaces") << "1500\n";
  CheckResult short_of = CheckNamespaceLimits(options);
  EXPECT_EQ(short_of.level, CheckLevel::kWarn);
  EXPECT_NE(short_of.detail.find("user.max_net_namespaces = 1500"), std::string::npos) << short_of.detail;
  EXPECT_EQ(short_of.detail.find("max_mnt"), std::string::npos) << short_of.detail;
  // Open files: what corrald can raise its limit to (fs.nr_open) against what max_sandboxes needs.
  ASSERT_EQ(mkdir((dir_ + "/sys/fs").c_str(), 0755), 0);
  std::ofstream(dir_ + "/sys/fs/nr_open") << "1048576\n";
  options.may_raise_limits = true;
  CheckResult files = CheckOpenFiles(options);
  EXPECT_EQ(files.level, CheckLevel::kOk) << files.detail;
  EXPECT_NE(files.detail.find("raises its limit to 1048576"), std::string::npos) << files.detail;
  std::ofstream(dir_ + "/sys/fs/nr_open") << "20000\n";
  files = CheckOpenFiles(options);
  EXPECT_EQ(files.level, CheckLevel::kWarn);
  EXPECT_NE(files.detail.find("room for about 1186 sandboxes"), std::string::npos) << files.detail;
  EXPECT_NE(files.detail.find("fs.nr_open"), std::string::npos) << files.detail;
  // Without CAP_SYS_RESOURCE corrald keeps the hard limit it is given: this process's.
  std::ofstream(dir_ + "/sys/fs/nr_open") << "1048576\n";
  options.may_raise_limits = false;
  struct rlimit own {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &own), 0);
  files = CheckOpenFiles(options);
  if (own.rlim_max < 1048576) {
    EXPECT_NE(files.detail.find("hard limit " + std::to_string(own.rlim_max)), std::string::npos) << files.detail;
  } else {
    EXPECT_NE(files.detail.find("raises its limit to 1048576"), std::string::npos) << files.detail;
  }
}

TEST(DoctorDefaultsTest, MatchTheDaemonsConfig) {
  DoctorOptions doctor;
  DaemonConfig daemon;
  EXPECT_EQ(doctor.state_dir, daemon.state_dir);
  EXPECT_EQ(doctor.max_sandboxes, daemon.max_sandboxes);
  EXPECT_EQ(doctor.cgroup_mount, daemon.cgroup_mount);
  EXPECT_EQ(doctor.cgroup_parent, daemon.cgroup_parent);
  EXPECT_STRNE(TestedClaudeCodeVersion(), "");
}

TEST_F(DoctorTest, CliReadsCorraldsConfigAndFlagsOverrideIt) {
  const std::string config = dir_ + "/corrald.toml";
  std::ofstream(config) << "[daemon]\nstate_dir = \"/srv/corral\"\ncgroup_parent = \"corral-prod\"\n[api]\nlisten = \"127.0.0.1:1\"\n";
  auto options = cli::ParseDoctorOptions({"--config", config, "--json", "--cgroup-parent", "other"}, cli::ProcessEnv());
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_TRUE(options->json);
  EXPECT_EQ(options->doctor.state_dir, "/srv/corral");
  EXPECT_EQ(options->doctor.cgroup_parent, "other");
  EXPECT_EQ(options->doctor.claude_version, TestedClaudeCodeVersion());
  std::ofstream(config) << "[daemon\n";
  EXPECT_FALSE(cli::ParseDoctorOptions({"--config", config}, cli::ProcessEnv()).ok());
  EXPECT_FALSE(cli::ParseDoctorOptions({"--state-dir"}, cli::ProcessEnv()).ok());
  EXPECT_FALSE(cli::ParseDoctorOptions({"--bogus"}, cli::ProcessEnv()).ok());
}

}  // namespace
}  // namespace corral::supervisor
