// The image routes' JSON (docs/PROTOCOL.md "Images"), at the API's edge like protocol_json.h:
// requests are checked here into the image service's values, replies made from its records.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "supervisor/images/image_service.h"

namespace corral::api {

// {"digest", "names", "layers": [{"diff_id"}], "size", "created_at", "source",
//  "config": {"env", "working_dir", "user", "os", "architecture"}}
nlohmann::json ImageJson(const supervisor::ImageRecord& image);
// {"layers_removed", "bytes_freed"}
nlohmann::json PruneJson(const supervisor::PruneReport& report);

// POST /v1/images/import: {"path" (absolute: the daemon's file system), "name"?, "select"?, "force"?}.
StatusOr<supervisor::ImportRequest> ParseImport(const nlohmann::json& body);
// POST /v1/images/pull: {"ref", "name"?, "force"?}.
StatusOr<supervisor::PullRequest> ParsePull(const nlohmann::json& body);

// POST /v1/images/{ref}/tag: {"name", "force"?}.
struct TagRequest {
  std::string name;
  bool force = false;
};
StatusOr<TagRequest> ParseTag(const nlohmann::json& body);

}  // namespace corral::api
