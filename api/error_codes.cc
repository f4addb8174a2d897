#include "api/error_codes.h"

#include <cerrno>

#include "common/log.h"

namespace corral::api {

std::string_view ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kBadRequest: return "bad_request";
    case ErrorCode::kUnauthorized: return "unauthorized";
    case ErrorCode::kForbidden: return "forbidden";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kConflict: return "conflict";
    case ErrorCode::kLimitExceeded: return "limit_exceeded";
    case ErrorCode::kRateLimited: return "rate_limited";
    case ErrorCode::kBudgetExhausted: return "budget_exhausted";
    case ErrorCode::kPayloadTooLarge: return "payload_too_large";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kStreamGap: return "stream_gap";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kInternal: return "internal";
  }
  return "internal";
}

int HttpStatusFor(ErrorCode code) {
  switch (code) {
    case ErrorCode::kBadRequest: return 400;
    case ErrorCode::kUnauthorized: return 401;
    case ErrorCode::kForbidden: return 403;
    case ErrorCode::kNotFound: return 404;
    case ErrorCode::kConflict: return 409;
    case ErrorCode::kLimitExceeded: return 429;
    case ErrorCode::kRateLimited: return 429;
    case ErrorCode::kBudgetExhausted: return 402;
    case ErrorCode::kPayloadTooLarge: return 413;
    case ErrorCode::kUnsupported: return 501;
    case ErrorCode::kStreamGap: return 410;
    case ErrorCode::kUnavailable: return 503;
    case ErrorCode::kInternal: return 500;
  }
  return 500;
}

ErrorCode ErrorCodeFor(const Status& status) {
  switch (status.error_number()) {
    case ENOENT: return ErrorCode::kNotFound;
    case EINVAL: return ErrorCode::kBadRequest;
    case EBUSY:
    case EEXIST: return ErrorCode::kConflict;
    case EDQUOT: return ErrorCode::kLimitExceeded;
    case EKEYEXPIRED: return ErrorCode::kBudgetExhausted;
    case EKEYREJECTED: return ErrorCode::kUnauthorized;
    case EUSERS: return ErrorCode::kRateLimited;
    case ERANGE: return ErrorCode::kStreamGap;
    case EAGAIN:
    case ECONNREFUSED: return ErrorCode::kUnavailable;  // the store's database unreachable, for one
    case EPERM:
    case EACCES: return ErrorCode::kForbidden;
    case EFBIG:
    case E2BIG: return ErrorCode::kPayloadTooLarge;
    case ENOTSUP: return ErrorCode::kUnsupported;
    case EPIPE:
    case ESRCH:
    case ENOTTY: return ErrorCode::kConflict;
    case ENOTDIR:
    case EISDIR:
    case ELOOP:
    case ENAMETOOLONG: return ErrorCode::kBadRequest;
    default: return ErrorCode::kInternal;
  }
}

std::string ErrorBody(std::string_view code, std::string_view message) {
  return "{\"error\":{\"code\":\"" + JsonEscape(code) + "\",\"message\":\"" + JsonEscape(message) + "\"}}";
}

}  // namespace corral::api
