// The wall clock as the store and the API keep it: whole seconds since the Unix epoch.
#pragma once

#include <time.h>

#include <cstdint>

namespace corral {

// Now, in seconds since the epoch (time(2)).
inline int64_t UnixNow() { return static_cast<int64_t>(time(nullptr)); }

}  // namespace corral
