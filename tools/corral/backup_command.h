// corral admin backup FILE (online, through corrald's admin socket) and corral admin restore
// FILE (offline, with corrald stopped): supervisor/store/store_backup.h.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "tools/corral/remote_options.h"

namespace corral::cli {

struct BackupCommandOptions {
  bool help = false;
  bool restore = false;
  bool json = false;
  std::string file;          // absolute (made so from the working directory)
  std::string admin_socket;  // backup
  std::string state_dir;     // restore: from --state-dir, else corrald's config, else /var/lib/corral
};

const char* BackupUsage();
// args: "backup FILE ..." or "restore FILE ..." (in remote_options.cc, with the CLI's other parsers)
StatusOr<BackupCommandOptions> ParseBackupOptions(const std::vector<std::string>& args, const EnvLookup& env);
int RunBackupCommand(const BackupCommandOptions& options);

}  // namespace corral::cli
