// corral doctor's checks that need no privileges (supervisor/doctor.h): the kernel's version,
// the state directory's free space, Claude Code's presence and version, the sysctl that switches
// user namespaces off, the output formats, and the CLI's options. The probes that need root, and
// their FAIL paths forced with seccomp, are in tests/root/doctor_test.cc.
#include "supervisor/doctor.h"

#include <gtest/gtest.h>
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

// The doctor looks where corrald will: its defaults are the daemon's.
TEST(DoctorDefaultsTest, MatchTheDaemonsConfig) {
  DoctorOptions doctor;
  DaemonConfig daemon;
  EXPECT_EQ(doctor.state_dir, daemon.state_dir);
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
