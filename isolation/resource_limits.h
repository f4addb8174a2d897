// ResourceLimits: what one sandbox may use, as one value for every layer that speaks of it (a
// token's caps, a create request, the sandbox's effective limits in the store and the API, the
// spec the launcher runs). Unset: no limit of that kind (or, in caps and requests, the daemon's).
#pragma once

#include <cstdint>
#include <optional>

namespace corral::isolation {

struct ResourceLimits {
  std::optional<uint64_t> memory_bytes;     // swap is off whenever set
  std::optional<uint64_t> cpu_millicores;   // 1500 = 1.5 cores
  std::optional<uint64_t> pids;
  std::optional<uint64_t> wall_time_us;
  std::optional<uint64_t> cpu_time_us;      // user+system of the whole cgroup tree
  std::optional<uint64_t> disk_bytes;       // cap on what the sandbox can write
  std::optional<uint64_t> nofile;           // RLIMIT_NOFILE, soft and hard

  bool operator==(const ResourceLimits&) const = default;
};

}  // namespace corral::isolation
