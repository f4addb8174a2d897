#include "api/api_json.h"

#include <algorithm>
#include <cerrno>

#include "api/daemon_api.h"
#include "common/log.h"

namespace corral::api {

using nlohmann::json;

HttpResponse JsonResponse(int status, const json& body) {
  HttpResponse response;
  response.status = status;
  response.body = body.dump();
  return response;
}

HttpResponse ErrorResponse(const Status& status) {
  ErrorCode code = ErrorCodeFor(status);
  HttpResponse response;
  response.status = HttpStatusFor(code);
  // Internal errors keep their details in the log; the client gets the request id to quote.
  response.body = ErrorBody(ErrorCodeName(code), code == ErrorCode::kInternal ? "internal error" : status.message());
  if (code == ErrorCode::kInternal) LogError("api", "internal error", {{"error", status.ToString()}});
  return response;
}

StatusOr<json> ParseBody(const std::string& body) {
  if (body.empty()) return json::object();
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::Error("the body must be a JSON object", EINVAL);
  return j;
}

Status RefuseUnknownFields(const json& body, std::initializer_list<std::string_view> known, const char* where) {
  for (const auto& [key, value] : body.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return Status::Error((where != nullptr ? std::string(where) + ": " : std::string()) + "unknown field \"" + key + "\"",
                           EINVAL);
    }
  }
  return Status();
}

Status OptionalUint(const json& body, const char* key, std::optional<uint64_t>& out) {
  if (!body.contains(key) || body[key].is_null()) return Status();
  if (!body[key].is_number_unsigned() && !(body[key].is_number_integer() && body[key].get<int64_t>() >= 0)) {
    return Status::Error(std::string(key) + ": expected a non-negative integer", EINVAL);
  }
  out = body[key].get<uint64_t>();
  return Status();
}

Status OptionalString(const json& body, const char* key, std::string& out) {
  if (!body.contains(key) || body[key].is_null()) return Status();
  if (!body[key].is_string()) return Status::Error(std::string(key) + ": expected a string", EINVAL);
  out = body[key].get<std::string>();
  return Status();
}

}  // namespace corral::api
