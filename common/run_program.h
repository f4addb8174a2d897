// Running one of the host's programs (mkfs.ext4, cp) to its end, from a daemon thread.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace corral {

// Runs argv[0] (an absolute path; no PATH search) with argv, stdin and stdout on /dev/null and a
// minimal environment, and waits for it. Its stderr goes into the error (the first 2 KiB, on
// one line), never onto the caller's stderr (corrald's log). EIO when it exits non-zero or dies.
Status RunProgram(const std::vector<std::string>& argv);

}  // namespace corral
