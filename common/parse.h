// Parsers for the values operators type: sizes, durations, counts. Strict: the whole string must
// be consumed, no sign, no overflow, no empty input.
#pragma once

#include <cstdint>
#include <string_view>

#include "common/status.h"

namespace corral {

// "4096", "64K", "64M", "1G", "2T" (powers of 1024; a trailing "B"/"iB" is accepted: "64MiB").
StatusOr<uint64_t> ParseSize(std::string_view text);

// A non-negative decimal number of seconds ("2", "0.25"), returned in microseconds.
StatusOr<uint64_t> ParseSecondsToMicros(std::string_view text);

// A non-negative decimal integer.
StatusOr<uint64_t> ParseUint(std::string_view text);

// A non-negative decimal fraction ("1.5", "0.25"), scaled by `scale` and rounded down.
// ParseFixedPoint("1.5", 1000) == 1500.
StatusOr<uint64_t> ParseFixedPoint(std::string_view text, uint64_t scale);

}  // namespace corral
