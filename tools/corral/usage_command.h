// corral usage (a user's spending) and corral admin usage (the ledger, exported).
#pragma once

#include "tools/corral/remote_options.h"

namespace corral::cli {

int RunUsageCommand(const UsageOptions& options);
int RunLedgerExportCommand(const LedgerExportOptions& options);

}  // namespace corral::cli
