// The --help texts of the commands that talk to corrald (see remote_options.h).
#pragma once

namespace corral::cli {

const char* SandboxUsage();
const char* ExecUsage();
const char* PromptUsage();
const char* ShellUsage();
const char* CpUsage();
const char* AdminUsage();  // also for `corral token`
const char* ExecuteUsage();
const char* GitUsage();
const char* UsageUsage();        // corral usage
const char* LedgerExportUsage(); // corral admin usage

}  // namespace corral::cli
