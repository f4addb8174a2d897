// The host's programs that images need (skopeo for pulls; apt-get and mmdebstrap for
// `FROM debian:bookworm`): run with the environment given and nothing else of the daemon's (its
// fds, signal mask), stdin from /dev/null, stdout and stderr together into `output`, in a
// process group of their own, which is killed whole when it is cut short (a timeout, `stop`).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace corral::supervisor {

struct HostProgram {
  // argv[0]: an absolute path, or a name looked for in /usr/bin, /usr/local/bin and /bin.
  std::vector<std::string> argv;
  std::vector<std::string> env;  // the whole environment
  std::chrono::milliseconds timeout{0};  // 0: none; past it the program is killed (ETIMEDOUT)
  // When set and true (looked at every second at most), the program is killed (ECANCELED).
  const std::atomic<bool>* stop = nullptr;
};

// Its exit status (128 + N when signal N ended it); ENOENT when it could not be run at all.
StatusOr<int> RunHostProgram(const HostProgram& program, const std::function<void(std::string_view)>& output);

}  // namespace corral::supervisor
