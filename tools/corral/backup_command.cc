#include "tools/corral/backup_command.h"

#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "supervisor/store/store_backup.h"
#include "tools/corral/client.h"
#include "tools/corral/doctor_command.h"
#include "tools/corral/remote_options.h"

namespace corral::cli {

const char* BackupUsage() {
  return "usage: corral admin backup FILE [--admin-socket PATH] [--json]\n"
         "       corral admin restore FILE [--config FILE | --state-dir DIR] [--json]\n"
         "\n"
         "backup: a consistent copy of corrald's store (SQLite's online backup), made by the running\n"
         "  daemon while it serves; FILE (mode 0600: it holds the issuers' secrets) must not exist.\n"
         "restore: puts such a copy back, with corrald stopped (refused while one runs on the state\n"
         "  directory). The store it replaces is kept beside it as corrald.db.before-restore-<time>.\n"
         "  Start corrald afterwards: it migrates an older store forward and reconciles its sandboxes.\n";
}

int RunBackupCommand(const BackupCommandOptions& options) {
  if (options.restore) {
    auto restored = supervisor::RestoreStore(options.file, options.state_dir);
    if (!restored.ok()) {
      fprintf(stderr, "corral admin restore: %s\n", restored.status().ToString().c_str());
      return 1;
    }
    if (options.json) {
      printf("%s\n", nlohmann::json{{"db", restored->db_path}, {"set_aside", restored->set_aside},
                                     {"schema_version", restored->schema_version}}.dump().c_str());
    } else {
      printf("restored %s from %s (schema version %lld)%s\nstart corrald to use it\n", restored->db_path.c_str(),
             options.file.c_str(), static_cast<long long>(restored->schema_version),
             restored->set_aside.empty() ? "" : ("; the store it replaced is " + restored->set_aside).c_str());
    }
    return 0;
  }
  auto made = CallJson(Endpoint::Admin(AdminConfig{options.admin_socket}), "POST", "/v1/admin/backup",
                       nlohmann::json{{"path", options.file}});
  if (!made.ok()) {
    fprintf(stderr, "corral admin backup: %s\n", made.status().message().c_str());
    return 1;
  }
  if (options.json) {
    printf("%s\n", made->dump().c_str());
  } else {
    printf("backed up the store to %s (%lld bytes, schema version %lld, %.3f s)\n", options.file.c_str(),
           static_cast<long long>(made->value("bytes", 0)), static_cast<long long>(made->value("schema_version", 0)),
           made->value("seconds", 0.0));
  }
  return 0;
}

}  // namespace corral::cli
