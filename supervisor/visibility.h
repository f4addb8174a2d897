// Who may see what: a user sees what they own, the admin socket sees everything. Anything not
// visible to a caller is answered as if it did not exist.
#pragma once

#include <string>

#include "supervisor/sandboxes/sandbox_types.h"

namespace corral::supervisor {

// True when `caller` may see what the user (`iss`, `sub`) owns.
inline bool MaySee(const Caller& caller, const std::string& iss, const std::string& sub) {
  return caller.admin || (iss == caller.iss && sub == caller.sub);
}

// The live object `id` (a command, a session) from `live`, else from `recent` (ended, kept a
// while for late readers), when `caller` may see it (by its row()'s owner); else null.
template <typename Map>
typename Map::mapped_type FindVisible(const Map& live, const Map& recent, const std::string& id,
                                      const Caller& caller) {
  typename Map::mapped_type found;
  if (auto it = live.find(id); it != live.end()) found = it->second;
  if (!found) {
    if (auto it = recent.find(id); it != recent.end()) found = it->second;
  }
  if (!found || !MaySee(caller, found->row().iss, found->row().sub)) return nullptr;
  return found;
}

}  // namespace corral::supervisor
