// The wall clock as the store and the API keep it: whole seconds since the Unix epoch.
#pragma once

#include <time.h>

#include <cstdint>

namespace corral {

// Now, in seconds since the epoch (time(2)).
inline int64_t UnixNow() { return static_cast<int64_t>(time(nullptr)); }
// Milliseconds since the epoch.
inline int64_t UnixNowMs() {
  struct timespec now {};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}

}  // namespace corral
