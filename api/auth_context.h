// Who is calling: what the server hands every handler once a request has authenticated.
#pragma once

#include <string>

#include "api/jwt.h"

namespace corral::api {

struct AuthContext {
  // The user is the pair (iss, sub); never sub alone.
  std::string iss;
  std::string sub;
  Claims claims;
  // A connection on the admin unix socket (peer uid 0): no token, may do everything, including
  // the /v1/admin routes. Never true for TCP connections.
  bool admin = false;
  // The last second (unix) in which the token verifies: its `exp` plus the allowed clock skew.
  // Connections bound to the token end after it. 0 on the admin socket.
  int64_t expires_at = 0;

  // A key that identifies the user: iss and sub joined by a NUL byte (neither may contain one).
  std::string UserKey() const { return iss + std::string(1, '\0') + sub; }
};

}  // namespace corral::api
