// The wall clock as the store and the API keep it: whole seconds since the Unix epoch.
#pragma once

#include <time.h>

#include <cstdint>
#include <string>

namespace corral {

// Now, in seconds since the epoch (time(2)).
inline int64_t UnixNow() { return static_cast<int64_t>(time(nullptr)); }
// Milliseconds since the epoch.
inline int64_t UnixNowMs() {
  struct timespec now {};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}

// "2026-11-27T10:00:00Z": unix seconds in UTC, as the API writes times in messages.
inline std::string IsoTime(int64_t seconds) {
  char text[32];
  struct tm tm = {};
  const time_t t = static_cast<time_t>(seconds);
  gmtime_r(&t, &tm);
  strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace corral
