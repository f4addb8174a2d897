// corrald's files that hold secrets (the relay's key, the store's URL, the cluster secret, the
// secrets' key, the webhooks' secret): read only when root alone may read them.
#pragma once

#include <string>

#include "common/status.h"
#include "supervisor/config.h"
#include "supervisor/relay/relay_config.h"

namespace corral {

// The trimmed text of a file that holds a secret: a regular file that only root may read. `key`
// names the setting in errors.
StatusOr<std::string> ReadRootSecretFile(const std::string& key, const std::string& path);

// The relay's settings as configured, with the operator's key read from its file, which only root
// may read.
StatusOr<supervisor::RelayConfig> RelayConfigOf(const supervisor::DaemonConfig& config);

}  // namespace corral
