// `corral cp [-r] SRC DST`: files between the host and a running sandbox through the files API
// (docs/PROTOCOL.md, "Files"): fs/write and fs/read for a file, fs/tar both ways for a directory.
//
// As cp(1): a DST that is an existing directory receives SRC under SRC's own name; otherwise DST
// is the copy's name (a directory's parent must exist). Modes travel (without set-id bits),
// owners do not: the sandbox's files belong to its agent user, the host's to the caller.
#pragma once

#include "tools/corral/remote_options.h"

namespace corral::cli {

// Returns the exit code: 0, or 1 with "corral: ..." on stderr.
int RunCpCommand(const CpOptions& options);

}  // namespace corral::cli
