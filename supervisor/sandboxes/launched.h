// What a sandbox's start made on the worker pool (SandboxManager::Launch): the process, what its
// init said, its full network. Shared by lifecycle.cc and pool.cc.
#pragma once

#include <optional>

#include "supervisor/sandboxes/full_network.h"
#include "supervisor/sandboxes/sandbox_manager.h"

namespace corral::supervisor {

struct SandboxManager::Launched {
  StatusOr<SandboxProcess> process = Status::Error("not started");
  StatusOr<InitHello> hello = Status::Error("not started");
  std::optional<NetworkAttachment> network;
};

}  // namespace corral::supervisor
