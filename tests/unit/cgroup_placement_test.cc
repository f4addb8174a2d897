// Where sandboxes' cgroups go: the pure parts of cgroup_placement.h, sandbox_scope.h and
// proc_cgroup.h, over /proc/PID/cgroup texts as the kernel writes them, unit names and the
// environment systemd gives a service.
#include "supervisor/sandboxes/cgroup_placement.h"

#include <gtest/gtest.h>

#include "cgroups/proc_cgroup.h"
#include "supervisor/sandboxes/sandbox_scope.h"
#include "supervisor/config.h"

namespace corral::supervisor {
namespace {

using cgroups::CgroupVersion;
using cgroups::ParseProcCgroup;

// /proc/self/cgroup of corrald.service on a cgroup v2 host (Debian 12, systemd 252).
constexpr char kV2Service[] = "0::/system.slice/corrald.service\n";
// The same on a hybrid host: v1 controller hierarchies plus systemd's controller-less cgroup2.
constexpr char kHybridService[] =
    "12:freezer:/\n"
    "11:cpuset:/\n"
    "10:pids:/system.slice/corrald.service\n"
    "9:memory:/system.slice/corrald.service\n"
    "8:cpu,cpuacct:/system.slice/corrald.service\n"
    "1:name=systemd:/system.slice/corrald.service\n"
    "0::/system.slice/corrald.service\n";

TEST(ParseProcCgroupTest, V2TakesTheUnifiedLine) {
  auto path = ParseProcCgroup(kV2Service, CgroupVersion::kV2);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  EXPECT_EQ(*path, "system.slice/corrald.service");
  // The root cgroup is the empty name (a process in a container's cgroup namespace sees "/").
  EXPECT_EQ(ParseProcCgroup("0::/\n", CgroupVersion::kV2).value(), "");
}

TEST(ParseProcCgroupTest, V1TakesTheMemoryHierarchyNotFreezerNorSystemd) {
  // The memory line, not the first line (freezer, at "/": systemd does not manage it) and not
  // name=systemd, which the v1 backend does not use.
  const char text[] =
      "7:freezer:/\n"
      "4:memory:/process_api/8ab1\n"
      "1:name=systemd:/user.slice/session-3.scope\n"
      "0::/user.slice/session-3.scope\n";
  EXPECT_EQ(ParseProcCgroup(text, CgroupVersion::kV1).value(), "process_api/8ab1");
  EXPECT_EQ(ParseProcCgroup(text, CgroupVersion::kV2).value(), "user.slice/session-3.scope");
  EXPECT_EQ(ParseProcCgroup(kHybridService, CgroupVersion::kV1).value(), "system.slice/corrald.service");
  // A co-mounted hierarchy ("memory" beside another controller) still counts.
  EXPECT_EQ(ParseProcCgroup("5:memory,hugetlb:/a/b\n", CgroupVersion::kV1).value(), "a/b");
  // "memory" must be a whole controller name.
  EXPECT_FALSE(ParseProcCgroup("5:memory_x:/a\n", CgroupVersion::kV1).ok());
}

TEST(ParseProcCgroupTest, PathsMayHoldColons) {
  EXPECT_EQ(ParseProcCgroup("0::/machine.slice/a:b/c\n", CgroupVersion::kV2).value(), "machine.slice/a:b/c");
}

TEST(ParseProcCgroupTest, RefusesWhatNoNameUnderTheMountReaches) {
  // A pure v1 host has no "0::" line; a pure v2 host no memory line.
  auto no_v2 = ParseProcCgroup("4:memory:/a\n", CgroupVersion::kV2);
  EXPECT_FALSE(no_v2.ok());
  EXPECT_EQ(no_v2.status().error_number(), ENOENT);
  EXPECT_FALSE(ParseProcCgroup(kV2Service, CgroupVersion::kV1).ok());
  // Outside the reader's cgroup namespace.
  auto outside = ParseProcCgroup("0::/../../system.slice/x.service\n", CgroupVersion::kV2);
  EXPECT_FALSE(outside.ok());
  EXPECT_EQ(outside.status().error_number(), EXDEV);
  // A cgroup removed under a process that was leaving it.
  EXPECT_FALSE(ParseProcCgroup("0::/corral/sb_x/init (deleted)\n", CgroupVersion::kV2).ok());
  EXPECT_FALSE(ParseProcCgroup("0::relative\n", CgroupVersion::kV2).ok());
  EXPECT_FALSE(ParseProcCgroup("", CgroupVersion::kV2).ok());
}

TEST(SandboxScopeNameTest, TheServicesNameWithASuffix) {
  EXPECT_EQ(SandboxScopeName("corrald.service").value(), "corrald-sandboxes.scope");
  // An instance keeps its instance: two corralds (two state directories) get two scopes.
  EXPECT_EQ(SandboxScopeName("corrald@prod.service").value(), "corrald@prod-sandboxes.scope");
  EXPECT_FALSE(SandboxScopeName("session-3.scope").ok());
  EXPECT_FALSE(SandboxScopeName(".service").ok());
  EXPECT_FALSE(SandboxScopeName("").ok());
  EXPECT_FALSE(SandboxScopeName("a/b.service").ok());
}

TEST(ScopeCgroupOfAnchorTest, TheParentOfTheAnchorsLeaf) {
  EXPECT_EQ(ScopeCgroupOfAnchor("system.slice/corrald-sandboxes.scope/anchor", "corrald-sandboxes.scope").value(),
            "system.slice/corrald-sandboxes.scope");
  EXPECT_EQ(ScopeCgroupOfAnchor("a.slice/a-b.slice/x-sandboxes.scope/anchor", "x-sandboxes.scope").value(),
            "a.slice/a-b.slice/x-sandboxes.scope");
  // Not (yet) in its leaf, in another scope, or a scope whose name only ends like ours.
  EXPECT_FALSE(ScopeCgroupOfAnchor("system.slice/corrald-sandboxes.scope", "corrald-sandboxes.scope").ok());
  EXPECT_FALSE(ScopeCgroupOfAnchor("system.slice/corrald.service/anchor", "corrald-sandboxes.scope").ok());
  EXPECT_FALSE(ScopeCgroupOfAnchor("system.slice/xcorrald-sandboxes.scope/anchor", "corrald-sandboxes.scope").ok());
}

TEST(StartedByServiceManagerTest, EitherVariable) {
  EXPECT_TRUE(StartedByServiceManager("8d2c1f", ""));
  EXPECT_TRUE(StartedByServiceManager("", "/run/systemd/notify"));
  // A login shell, a container's entry point: systemd is not asked.
  EXPECT_FALSE(StartedByServiceManager("", ""));
}

TEST(PlanCgroupPlacementTest, UnderSystemdTheScope) {
  CgroupPlacement placement = PlanCgroupPlacement("", std::string("system.slice/corrald-sandboxes.scope"));
  EXPECT_EQ(placement.sandboxes_parent, "system.slice/corrald-sandboxes.scope");
  // The old default, where an older corrald left running sandboxes.
  EXPECT_EQ(placement.legacy_parents, std::vector<std::string>{"corral"});
  EXPECT_FALSE(placement.parent_is_corralds);  // the scope's cgroup is systemd's
  EXPECT_NE(placement.reason, "");
}

TEST(PlanCgroupPlacementTest, AnExplicitParentWins) {
  for (const auto& scope : {std::optional<std::string>("system.slice/corrald-sandboxes.scope"), std::optional<std::string>()}) {
    CgroupPlacement placement = PlanCgroupPlacement("machine.slice/corral", scope);
    EXPECT_EQ(placement.sandboxes_parent, "machine.slice/corral");
    EXPECT_TRUE(placement.legacy_parents.empty());
    EXPECT_TRUE(placement.parent_is_corralds);
  }
  EXPECT_EQ(PlanCgroupPlacement("corral", std::nullopt).sandboxes_parent, "corral");
}

TEST(PlanCgroupPlacementTest, ElsewhereTheOldDefault) {
  CgroupPlacement placement = PlanCgroupPlacement("", std::nullopt);
  EXPECT_EQ(placement.sandboxes_parent, "corral");
  EXPECT_TRUE(placement.legacy_parents.empty());
  EXPECT_TRUE(placement.parent_is_corralds);
}

TEST(PlanCgroupPlacementTest, TheConfigDefaultIsUnset) {
  // dist/corrald.toml documents "" as the default: systemd's scope, else corral.
  EXPECT_EQ(DaemonConfig{}.cgroup_parent, "");
  EXPECT_EQ(PlanCgroupPlacement(DaemonConfig{}.cgroup_parent, std::nullopt).sandboxes_parent, kDefaultCgroupParent);
}

}  // namespace
}  // namespace corral::supervisor
