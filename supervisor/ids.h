// Public identifiers: a short type prefix and 20 random base32 characters ("sb_3kq...").
//
// The random part comes from getrandom(2) (100 bits), so ids cannot be guessed from each other
// and never repeat in practice; the prefix tells a reader (and a log line) what the id names.
#pragma once

#include <string>
#include <string_view>

namespace corral::supervisor {

// A new id: prefix + "_" + 20 characters of [a-z2-7].
std::string NewId(std::string_view prefix);

// True when `id` has the shape NewId(prefix) produces; cheap input validation for the API.
bool IsWellFormedId(std::string_view id, std::string_view prefix);

}  // namespace corral::supervisor
