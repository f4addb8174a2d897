#include "api/image_json.h"

#include <cerrno>

#include "api/protocol_json.h"

namespace corral::api {
namespace {

using json = nlohmann::json;

// A required, non-empty string field.
Status RequiredString(const json& body, const char* key, const char* expected, std::string& out) {
  auto it = body.find(key);
  if (it == body.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) {
    return Status::Error(std::string(key) + ": expected " + expected, EINVAL);
  }
  out = it->get<std::string>();
  return Status();
}

Status OptionalBool(const json& body, const char* key, bool& out) {
  auto it = body.find(key);
  if (it == body.end()) return Status();
  if (!it->is_boolean()) return Status::Error(std::string(key) + ": expected true or false", EINVAL);
  out = it->get<bool>();
  return Status();
}

}  // namespace

json ImageJson(const supervisor::ImageRecord& image) {
  json layers = json::array();
  for (size_t i = 0; i < image.layers.size(); ++i) {
    json layer = {{"diff_id", image.layers[i]}};
    if (i < image.layer_bytes.size()) layer["size"] = image.layer_bytes[i];
    layers.push_back(std::move(layer));
  }
  const rootfs::ImageConfig& config = image.config;
  return {{"digest", image.digest},
          {"names", image.names},
          {"layers", layers},
          {"size", image.bytes},
          {"created_at", image.created_at},
          {"source", image.source},
          {"config",
           {{"env", config.env},
            {"working_dir", config.working_dir},
            {"user", config.user},
            {"os", config.os},
            {"architecture", config.architecture}}}};
}

json PruneJson(const supervisor::PruneReport& report) {
  return {{"layers_removed", report.layers}, {"bytes_freed", report.bytes}};
}

StatusOr<supervisor::ImportRequest> ParseImport(const json& body) {
  RETURN_IF_ERROR(RefuseUnknownFields(body, {"path", "name", "select", "force"}));
  supervisor::ImportRequest request;
  RETURN_IF_ERROR(RequiredString(body, "path", "the absolute path of an OCI layout or an archive", request.path));
  if (request.path[0] != '/' || request.path.find('\0') != std::string::npos) {
    return Status::Error("path: expected an absolute path (the daemon does not know the client's directory): " +
                             request.path, EINVAL);
  }
  RETURN_IF_ERROR(OptionalString(body, "name", request.name));
  RETURN_IF_ERROR(OptionalString(body, "select", request.select));
  RETURN_IF_ERROR(OptionalBool(body, "force", request.force));
  return request;
}

StatusOr<supervisor::PullRequest> ParsePull(const json& body) {
  RETURN_IF_ERROR(RefuseUnknownFields(body, {"ref", "name", "force"}));
  supervisor::PullRequest request;
  RETURN_IF_ERROR(RequiredString(body, "ref", "a reference like \"127.0.0.1:5000/acme/agent:1\"", request.ref));
  RETURN_IF_ERROR(OptionalString(body, "name", request.name));
  RETURN_IF_ERROR(OptionalBool(body, "force", request.force));
  return request;
}

StatusOr<TagRequest> ParseTag(const json& body) {
  RETURN_IF_ERROR(RefuseUnknownFields(body, {"name", "force"}));
  TagRequest request;
  RETURN_IF_ERROR(RequiredString(body, "name", "a name like \"python:3.12\"", request.name));
  RETURN_IF_ERROR(OptionalBool(body, "force", request.force));
  return request;
}

}  // namespace corral::api
