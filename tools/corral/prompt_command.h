// `corral prompt`: one turn of a Claude Code session in a sandbox, streamed to the terminal.
#pragma once

#include "tools/corral/remote_options.h"

namespace corral::cli {

// Starts a session (or resumes one) with the prompt, prints the agent's text, tool calls and
// results as they come, closes the session after the turn (unless --keep) and prints its cost.
// Exit: 0 the turn succeeded, 1 it did not, 2 corrald refused or could not be reached.
int RunPromptCommand(const PromptOptions& options);

}  // namespace corral::cli
