#include "tools/corral/run_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace corral::cli {
namespace {

StatusOr<RunOptions> Parse(std::vector<std::string> args) { return ParseRunOptions(args); }

TEST(RunOptionsTest, ParsesEveryOption) {
  auto options = Parse({"--memory", "64M", "--cpus=1.5", "--pids", "100", "--wall-time", "2.5",
                        "--cpu-time", "1", "--disk", "1G", "--nofile", "256", "--image", "host",
                        "--env", "A=1", "--env", "A=2", "--cwd", "/tmp", "--hostname", "box",
                        "--user", "root", "--outcome-json", "-", "--", "sh", "-c", "true"});
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  const auto& spec = options->spec;
  EXPECT_EQ(*spec.limits().memory_bytes, 64u << 20);
  EXPECT_EQ(*spec.limits().cpu_millicores, 1500u);
  EXPECT_EQ(*spec.limits().pids, 100u);
  EXPECT_EQ(*spec.limits().wall_time_us, 2500000u);
  EXPECT_EQ(*spec.limits().cpu_time_us, 1000000u);
  EXPECT_EQ(*spec.limits().disk_bytes, 1ull << 30);
  EXPECT_EQ(*spec.limits().nofile, 256u);
  EXPECT_EQ(spec.cwd(), "/tmp");
  EXPECT_EQ(spec.hostname(), "box");
  EXPECT_EQ(spec.uid(), 0u);
  EXPECT_EQ(options->outcome_json, "-");
  EXPECT_EQ(spec.command(), (std::vector<std::string>{"sh", "-c", "true"}));
  int a_count = 0;
  for (const auto& e : spec.env()) {
    if (e.rfind("A=", 0) == 0) {
      ++a_count;
      EXPECT_EQ(e, "A=2");
    }
  }
  EXPECT_EQ(a_count, 1);
}

TEST(RunOptionsTest, DefaultsAreTheAgentUser) {
  auto options = Parse({"--", "true"});
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->spec.uid(), 1000u);
  EXPECT_EQ(options->spec.cwd(), "/home/agent");
  EXPECT_TRUE(options->spec.host_image());
  EXPECT_FALSE(options->spec.limits().memory_bytes.has_value());
}

TEST(RunOptionsTest, CommandWithoutDoubleDash) {
  auto options = Parse({"--pids", "10", "echo", "--memory"});
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->spec.command(), (std::vector<std::string>{"echo", "--memory"}));
}

struct BadCase {
  std::vector<std::string> args;
  std::string expected_prefix;
};

class RunOptionsErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(RunOptionsErrorTest, OneLineErrorNamingTheOption) {
  auto options = Parse(GetParam().args);
  ASSERT_FALSE(options.ok());
  const std::string message = options.status().ToString();
  EXPECT_EQ(message.rfind(GetParam().expected_prefix, 0), 0u) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Errors, RunOptionsErrorTest,
    ::testing::Values(BadCase{{"--memory", "lots", "--", "true"}, "--memory:"},
                      BadCase{{"--memory", "10", "--", "true"}, "--memory:"},
                      BadCase{{"--memory"}, "--memory: missing value"},
                      BadCase{{"--cpus", "0", "--", "true"}, "--cpus:"},
                      BadCase{{"--cpus", "-1", "--", "true"}, "--cpus:"},
                      BadCase{{"--pids", "1", "--", "true"}, "--pids:"},
                      BadCase{{"--wall-time", "0", "--", "true"}, "--wall-time:"},
                      BadCase{{"--wall-time", "1m", "--", "true"}, "--wall-time:"},
                      BadCase{{"--cpu-time", "x", "--", "true"}, "--cpu-time:"},
                      BadCase{{"--disk", "1", "--", "true"}, "--disk:"},
                      BadCase{{"--nofile", "3", "--", "true"}, "--nofile:"},
                      BadCase{{"--image", "relative/dir", "--", "true"}, "--image:"},
                      BadCase{{"--image", "/nonexistent-corral-image", "--", "true"}, "--image:"},
                      BadCase{{"--bind", "/tmp", "--", "true"}, "--bind:"},
                      BadCase{{"--bind", "/proc:/x", "--", "true"}, "--bind:"},
                      BadCase{{"--bind", "/dev/null:/x", "--", "true"}, "--bind:"},
                      BadCase{{"--bind", "/tmp:/proc/x", "--", "true"}, "--bind:"},
                      BadCase{{"--bind", "/tmp:relative", "--", "true"}, "--bind:"},
                      BadCase{{"--bind", "/tmp:/a/../b", "--", "true"}, "--bind:"},
                      BadCase{{"--bind", "/tmp:/x:rx", "--", "true"}, "--bind:"},
                      BadCase{{"--bind", "/nonexistent-corral:/x", "--", "true"}, "--bind:"},
                      BadCase{{"--env", "NOEQUALS", "--", "true"}, "--env:"},
                      BadCase{{"--env", "1A=x", "--", "true"}, "--env:"},
                      BadCase{{"--cwd", "rel", "--", "true"}, "--cwd:"},
                      BadCase{{"--hostname", "bad name", "--", "true"}, "--hostname:"},
                      BadCase{{"--user", "nobody", "--", "true"}, "--user:"},
                      BadCase{{"--workspace", "/proc/x", "--", "true"}, "--workspace:"},
                      BadCase{{"--outcome-json=", "--", "true"}, "--outcome-json:"},
                      BadCase{{"--frobnicate", "--", "true"}, "unknown option '--frobnicate'"},
                      BadCase{{"--memory", "64M"}, "command:"},
                      BadCase{{"--"}, "command:"}),
    [](const ::testing::TestParamInfo<BadCase>& param) { return "Case" + std::to_string(param.index); });

TEST(RunOptionsTest, BindThroughSymlinkIsRefused) {
  // /var/run is a symlink to /run on Debian.
  auto options = Parse({"--bind", "/var/run:/x", "--", "true"});
  ASSERT_FALSE(options.ok());
  EXPECT_NE(options.status().message().find("symlink"), std::string::npos);
  // Positive control: the real path is accepted.
  EXPECT_TRUE(Parse({"--bind", "/run:/x:ro", "--", "true"}).ok());
}

}  // namespace
}  // namespace corral::cli
