#include "isolation/sandbox_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

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

// The daemon's persistent sandboxes: init serves its control socket as root inside, with only
// PATH of its own; a command's identity comes with each request, so the spec has none.
TEST(SandboxSpecBuilderTest, ControlModeIsInitAsRootWithOnlyItsPath) {
  auto spec = SandboxSpecBuilder().SetInitMode(InitMode::kControl).SetLoopbackPorts({7880, 7881}).Build();
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->init_mode(), InitMode::kControl);
  EXPECT_EQ(spec->uid(), 0u);
  EXPECT_EQ(spec->cwd(), "/");
  ASSERT_EQ(spec->env().size(), 1u);
  EXPECT_EQ(spec->env()[0].rfind("PATH=", 0), 0u);
  EXPECT_EQ(spec->loopback_ports(), (std::vector<uint16_t>{7880, 7881}));
  // What a command brings is refused here; in command mode the same is fine (control).
  auto with_command = SandboxSpecBuilder().SetInitMode(InitMode::kControl).SetCommand({"true"}).Build();
  ASSERT_FALSE(with_command.ok());
  EXPECT_THAT(with_command.status().message(), HasSubstr("command:"));
  auto with_user = SandboxSpecBuilder().SetInitMode(InitMode::kControl).SetUser("agent").Build();
  ASSERT_FALSE(with_user.ok());
  EXPECT_THAT(with_user.status().message(), HasSubstr("user:"));
  EXPECT_TRUE(SandboxSpecBuilder().SetUser("agent").SetCommand({"true"}).Build().ok());
  // Loopback ports are handed over the control socket: command mode has none.
  auto run_ports = SandboxSpecBuilder().SetLoopbackPorts({7880}).SetCommand({"true"}).Build();
  ASSERT_FALSE(run_ports.ok());
  EXPECT_THAT(run_ports.status().message(), HasSubstr("loopback ports:"));
}

TEST(SandboxSpecBuilderTest, LoopbackPortsAreDistinctNonZeroAndFew) {
  auto control = [] { return SandboxSpecBuilder().SetInitMode(InitMode::kControl); };
  EXPECT_FALSE(control().SetLoopbackPorts({7880, 7880}).Build().ok());
  EXPECT_FALSE(control().SetLoopbackPorts({0}).Build().ok());
  EXPECT_FALSE(control().SetLoopbackPorts({1, 2, 3, 4, 5, 6, 7, 8, 9}).Build().ok());
  EXPECT_TRUE(control().SetLoopbackPorts({1, 2, 3, 4, 5, 6, 7, 8}).Build().ok());
}

TEST(SandboxSpecBuilderTest, HostUidBaseIsAWholeRangeAwayFromTheHostsAndFromUidMinusOne) {
  auto with_base = [](uid_t base) { return SandboxSpecBuilder().SetHostUidBase(base).SetCommand({"true"}).Build(); };
  for (uid_t bad : {0u, 65536u + 1, 0xFFFF0000u}) {
    auto spec = with_base(bad);
    ASSERT_FALSE(spec.ok()) << bad;
    EXPECT_THAT(spec.status().message(), HasSubstr("host uid base:"));
  }
  for (uid_t good : {65536u, 0xC0000000u, 0xFFFE0000u}) {
    auto spec = with_base(good);
    ASSERT_TRUE(spec.ok()) << good << ": " << spec.status().ToString();
    EXPECT_EQ(spec->host_uid_base(), std::optional<uid_t>(good));
  }
  EXPECT_FALSE(SandboxSpecBuilder().SetCommand({"true"}).Build()->host_uid_base().has_value());
}

TEST(SandboxSpecBuilderTest, FullNetworkIsOnlyWhereItsTokenIsAndNameserversAreAddresses) {
  auto plain = SandboxSpecBuilder().SetCommand({"true"}).Build();
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->full_network());
  EXPECT_TRUE(plain->nameservers().empty());
  auto full = SandboxSpecBuilder()
                  .AllowFullNetwork(UnsafeFullNetwork{}, {"192.0.2.53", "2001:db8::53"})
                  .SetCommand({"true"})
                  .Build();
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  EXPECT_TRUE(full->full_network());
  EXPECT_EQ(full->nameservers(), (std::vector<std::string>{"192.0.2.53", "2001:db8::53"}));
  auto bad = SandboxSpecBuilder().AllowFullNetwork(UnsafeFullNetwork{}, {"dns.example"}).SetCommand({"true"}).Build();
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("nameserver:"));
}

// `corral run` completes its spec once the host has a uid range (and a layer image) for it.
TEST(SandboxSpecBuilderTest, FromCompletesABuiltSpecAndKeepsIt) {
  auto first = SandboxSpecBuilder().SetMemoryLimit(64 << 20).AddEnv("A=1").SetCommand({"true"}).Build();
  ASSERT_TRUE(first.ok());
  auto complete = SandboxSpecBuilder::From(*first).SetHostUidBase(0x40000000).SetLayerImage("/srv/ws//disk.img").Build();
  ASSERT_TRUE(complete.ok()) << complete.status().ToString();
  EXPECT_EQ(complete->env(), first->env());  // the defaults are not added twice
  EXPECT_EQ(complete->command(), first->command());
  EXPECT_EQ(complete->limits(), first->limits());
  EXPECT_EQ(complete->host_uid_base(), std::optional<uid_t>(0x40000000));
  EXPECT_EQ(complete->layer_image(), std::optional<std::string>("/srv/ws/disk.img"));
  EXPECT_FALSE(SandboxSpecBuilder::From(*first).SetLayerImage("/proc/x").Build().ok());
}

TEST(SandboxSpecBuilderTest, ScratchIsItsOwnLimitElseTheDiskElseOneGiB) {
  auto sized = [](SandboxSpecBuilder builder) { return builder.SetCommand({"true"}).Build()->scratch_bytes(); };
  EXPECT_EQ(sized(SandboxSpecBuilder()), 1ull << 30);
  EXPECT_EQ(sized(SandboxSpecBuilder().SetDiskLimit(4ull << 30)), 4ull << 30);
  EXPECT_EQ(sized(SandboxSpecBuilder().SetDiskLimit(4ull << 30).SetScratchLimit(1ull << 30)), 1ull << 30);
  EXPECT_FALSE(SandboxSpecBuilder().SetScratchLimit(10).SetCommand({"true"}).Build().ok());
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
