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

}  // namespace corral::cli
