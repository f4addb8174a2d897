#include "isolation/sandbox_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

namespace corral::isolation {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

TEST(SandboxSpecBuilderTest, DefaultsForTheAgent) {
  auto spec = SandboxSpecBuilder().SetCommand({"true"}).Build();
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->host_image());
  EXPECT_EQ(spec->uid(), kAgentUid);
  EXPECT_EQ(spec->gid(), kAgentGid);
  EXPECT_EQ(spec->cwd(), "/home/agent");
  EXPECT_EQ(spec->hostname(), "corral");
  EXPECT_THAT(spec->env(), Contains("HOME=/home/agent"));
  EXPECT_THAT(spec->env(), Contains("USER=agent"));
  EXPECT_EQ(spec->scratch_bytes(), 1ull << 30);
  EXPECT_FALSE(spec->workspace().has_value());
}

TEST(SandboxSpecBuilderTest, RootGetsRootsHomeAndUserSetEnvWins) {
  auto spec = SandboxSpecBuilder()
                  .SetUser("root")
                  .AddEnv("HOME=/srv")
                  .AddEnv("PATH=/opt/bin")
                  .SetCommand({"true"})
                  .Build();
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->uid(), 0u);
  EXPECT_EQ(spec->cwd(), "/root");
  EXPECT_THAT(spec->env(), Contains("HOME=/srv"));
  EXPECT_THAT(spec->env(), Contains("PATH=/opt/bin"));
  EXPECT_EQ(std::count_if(spec->env().begin(), spec->env().end(),
                          [](const std::string& e) { return e.rfind("PATH=", 0) == 0; }),
            1);
}

TEST(SandboxSpecBuilderTest, RecordsTheFirstErrorOnly) {
  auto spec = SandboxSpecBuilder()
                  .SetMemoryLimit(10)       // first error
                  .SetHostname("bad name")  // second error, not reported
                  .SetCommand({"true"})
                  .Build();
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("memory:"));
  EXPECT_THAT(spec.status().message(), ::testing::Not(HasSubstr("hostname")));
}

TEST(SandboxSpecBuilderTest, NoCommandIsAnError) {
  auto spec = SandboxSpecBuilder().SetMemoryLimit(64 << 20).Build();
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("command"));
}

TEST(SandboxSpecBuilderTest, LimitsAreKept) {
  auto spec = SandboxSpecBuilder()
                  .SetMemoryLimit(64 << 20)
                  .SetCpuLimit(1500)
                  .SetPidsLimit(100)
                  .SetWallTimeLimit(2000000)
                  .SetCpuTimeLimit(1000000)
                  .SetDiskLimit(16 << 20)
                  .SetNofileLimit(256)
                  .SetCommand({"true"})
                  .Build();
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(*spec->limits().memory_bytes, 64u << 20);
  EXPECT_EQ(*spec->limits().cpu_millicores, 1500u);
  EXPECT_EQ(*spec->limits().pids, 100u);
  EXPECT_EQ(*spec->limits().wall_time_us, 2000000u);
  EXPECT_EQ(*spec->limits().cpu_time_us, 1000000u);
  EXPECT_EQ(*spec->limits().nofile, 256u);
  EXPECT_EQ(spec->scratch_bytes(), 16u << 20);
}

TEST(SandboxSpecBuilderTest, BindsAreNormalizedAndChecked) {
  auto spec = SandboxSpecBuilder().AddBind("/usr/share:/data//x/./y:ro").SetCommand({"true"}).Build();
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->binds().size(), 1u);
  EXPECT_EQ(spec->binds()[0].source, "/usr/share");
  EXPECT_EQ(spec->binds()[0].target, "/data/x/y");
  EXPECT_TRUE(spec->binds()[0].read_only);
  for (const char* bad : {"/:/host", "/sys/kernel:/k", "/usr/share:/", "/usr/share:/dev/x",
                          "/usr/share:/sys", "/bin:/b" /* a symlink on merged-usr hosts */}) {
    EXPECT_FALSE(SandboxSpecBuilder().AddBind(bad).SetCommand({"true"}).Build().ok()) << bad;
  }
}

TEST(SandboxSpecBuilderTest, OverlayUnsafePathsAreRefused) {
  EXPECT_FALSE(SandboxSpecBuilder().SetWorkspace("/srv/a,b").SetCommand({"true"}).Build().ok());
  EXPECT_FALSE(SandboxSpecBuilder().SetWorkspace("/srv/a:b").SetCommand({"true"}).Build().ok());
  EXPECT_TRUE(SandboxSpecBuilder().SetWorkspace("/srv/ab").SetCommand({"true"}).Build().ok());
}

TEST(NormalizeAbsolutePathTest, Cases) {
  EXPECT_EQ(*NormalizeAbsolutePath("/a//b/./c/"), "/a/b/c");
  EXPECT_EQ(*NormalizeAbsolutePath("/"), "/");
  EXPECT_FALSE(NormalizeAbsolutePath("a/b").ok());
  EXPECT_FALSE(NormalizeAbsolutePath("/a/../b").ok());
  EXPECT_FALSE(NormalizeAbsolutePath(std::string("/a\0b", 4)).ok());
  EXPECT_FALSE(NormalizeAbsolutePath("/" + std::string(5000, 'x')).ok());
}

}  // namespace
}  // namespace corral::isolation
