// The stable, machine-readable error codes of the API (docs/PROTOCOL.md, "Errors").
//
// A code never changes meaning once published; the human message beside it may. Each code has
// one HTTP status, used both for plain HTTP replies and in WebSocket error replies.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace corral::api {

enum class ErrorCode {
  kBadRequest,        // malformed JSON, a missing or mistyped field
  kUnauthorized,      // no token, or a token that did not verify (always the same reply)
  kForbidden,         // the token lacks the scope for this operation
  kNotFound,          // no such sandbox/command/file for this user (also: another user's)
  kConflict,          // the object is in the wrong state (e.g. exec in a stopped sandbox)
  kLimitExceeded,     // a request beyond the token's or the daemon's limits
  kRateLimited,       // too many requests from this user in the last minute; retry later
  kBudgetExhausted,   // the user's AI or compute budget for the current window is spent
  kPayloadTooLarge,   // a body or file above the configured cap
  kUnsupported,       // a valid request for something this daemon does not do
  kStreamGap,         // resume asked for events the replay buffer no longer holds
  kUnavailable,       // the daemon is shutting down or a resource is exhausted; retry later
  kInternal,          // a bug or an unexpected kernel error; the log has the details
};

std::string_view ErrorCodeName(ErrorCode code);  // "not_found"
int HttpStatusFor(ErrorCode code);               // 404

// The code of a supervisor Status, by its errno (see sandbox_manager.h): ENOENT not_found,
// EINVAL bad_request, EBUSY/EEXIST conflict, EPERM/EACCES forbidden, ...; an errno without a
// meaning here is internal.
ErrorCode ErrorCodeFor(const Status& status);

// {"error":{"code":"not_found","message":"..."}}; the body of every error reply.
std::string ErrorBody(std::string_view code, std::string_view message);

}  // namespace corral::api
