// What the SandboxHost tests vary about a persistent sandbox, and the daemon's spec of it: a
// kControl spec with the fields SandboxManager::SpecOf sets from a stored row.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "isolation/sandbox_spec.h"
#include "supervisor/sandboxes/sandbox_host.h"

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
    spec.SetInitMode(isolation::InitMode::kControl)
        .SetHostUidBase(static_cast<uid_t>(uid_base))
        .SetLayerImage(host.LayerPath(id))
        .SetNofileLimit(SandboxOpenFiles())
        .SetHostname(hostname)
        .SetLoopbackPorts(loopback_ports);
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

}  // namespace corral::supervisor
