// What the SandboxHost tests vary about a persistent sandbox, and the daemon's spec of it: a
// kControl spec with the fields SandboxManager::SpecOf sets from a stored row.
#pragma once

#include <sys/types.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cgroups/cgroup_backend.h"
#include "isolation/sandbox_spec.h"
#include "supervisor/config.h"
#include "supervisor/ids.h"
#include "supervisor/sandboxes/sandbox_host.h"
#include "tests/root/root_test_util.h"

namespace corral::supervisor {

struct HostSandboxShape {
  std::string id;
  int64_t uid_base = 0;
  uint64_t memory_bytes = 0;
  uint64_t cpu_millicores = 0;
  uint64_t pids = 0;
  uint64_t disk_bytes = 0;
  std::string hostname = "corral";
  std::vector<uint16_t> loopback_ports;

  isolation::SandboxSpec Spec(const SandboxHost& host) const {
    isolation::SandboxSpecBuilder spec;
    const WritableLayer layer = host.SandboxLayer(id);
    spec.SetInitMode(isolation::InitMode::kControl)
        .SetHostUidBase(static_cast<uid_t>(uid_base))
        .SetNofileLimit(SandboxOpenFiles())
        .SetHostname(hostname)
        .SetLoopbackPorts(loopback_ports);
    if (layer.kind == LayerKind::kImage) spec.SetLayerImage(layer.path);
    else spec.SetWorkspace(layer.path);
    if (memory_bytes > 0) spec.SetMemoryLimit(memory_bytes);
    if (cpu_millicores > 0) spec.SetCpuLimit(cpu_millicores);
    if (pids > 0) spec.SetPidsLimit(pids);
    if (disk_bytes > 0) spec.SetDiskLimit(disk_bytes).SetScratchLimit(std::min<uint64_t>(disk_bytes, 1ull << 30));
    if (auto mcp = host.McpBind()) spec.AddBind(*mcp);
    auto built = spec.Build();
    EXPECT_TRUE(built.ok()) << built.status().ToString();
    return *built;
  }
};

// A SandboxHost of the test process's own (its state and run dirs, its cgroup parent, the host's
// cgroup backend), and a shape with a fresh id and small limits in the uid range `slot`: a test
// binary picks a slot apart from the others' (ranges of 300 slots, by pid).
inline void MakeTestHost(DaemonConfig& config, std::unique_ptr<cgroups::CgroupBackend>& backend,
                         std::unique_ptr<SandboxHost>& host, HostSandboxShape& shape, int64_t slot) {
  config.state_dir = test::TestStateDir();
  config.run_dir = test::TestRunDir();
  config.cgroup_parent = test::TestCgroupParent();
  auto detected = cgroups::DetectBackend(config.cgroup_mount);
  ASSERT_TRUE(detected.ok()) << detected.status().ToString();
  backend = std::move(*detected);
  host = std::make_unique<SandboxHost>(config, *backend, std::string(CORRAL_BIN_DIR) + "/corral-init");
  shape.id = NewId("sb");
  shape.uid_base = kUidFirst + (slot + getpid() % 300) * kUidStep;
  shape.memory_bytes = 256 << 20;
  shape.pids = 64;
  shape.disk_bytes = 256 << 20;
}

}  // namespace corral::supervisor
