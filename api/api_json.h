// The JSON edge of the API's route files: replies, the error reply of a supervisor Status, and
// the checks every JSON body goes through (an object; no field the route does not take).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "api/server.h"
#include "common/status.h"

namespace corral::api {

HttpResponse JsonResponse(int status, const nlohmann::json& body);
// The stable code for the Status's errno (ErrorCodeFor); an internal error's details go to the
// log, never to the client.
HttpResponse ErrorResponse(const Status& status);
// "" is {}; anything but a JSON object is EINVAL.
StatusOr<nlohmann::json> ParseBody(const std::string& body);
// A field the daemon does not know is an error, not something silently left at its default (a
// misplaced {"cpus": 2} used to give a sandbox one CPU without a word).
Status RefuseUnknownFields(const nlohmann::json& body, std::initializer_list<std::string_view> known,
                           const char* where = nullptr);
// An optional unsigned integer field; a wrong type is an error naming the field.
Status OptionalUint(const nlohmann::json& body, const char* key, std::optional<uint64_t>& out);
// An optional string field ("" when absent); a wrong type is an error naming the field.
Status OptionalString(const nlohmann::json& body, const char* key, std::string& out);

}  // namespace corral::api
