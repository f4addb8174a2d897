// corral image import|pull|ls|inspect|tag|rm|prune: corrald's images (docs/PROTOCOL.md "Images").
// Changes go to the admin socket (root); ls and inspect go there too, or to the API with any
// user's token when --url or --token is given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tools/corral/remote_options.h"

namespace corral::cli {

enum class ImageVerb { kImport, kPull, kList, kInspect, kTag, kRemove, kPrune };

struct ImageOptions {
  bool help = false;
  ImageVerb verb = ImageVerb::kList;
  AdminConfig admin;
  std::optional<ServerConfig> server;  // ls, inspect with --url or --token: the API instead
  std::string file;                    // import: absolute (made so from the working directory)
  std::string ref;                     // pull: a reference; inspect, tag, rm: a name or digest
  std::string name;                    // import, pull: --name; tag: NAME
  std::string select;                  // import: --select
  bool force = false;                  // import, pull, tag: move a name that points elsewhere
  bool json = false;
};

const char* ImageUsage();
// `args` follow "image": the verb, then its arguments and options.
StatusOr<ImageOptions> ParseImageOptions(const std::vector<std::string>& args, const EnvLookup& env);

// The request of a change: {method, target, body} (body null for none).
struct ImageRequest {
  std::string method;
  std::string target;
  nlohmann::json body;
};
ImageRequest BuildImageRequest(const ImageOptions& options);

// "NAME DIGEST SIZE CREATED SOURCE": one row per name (an image without one: "<none>"), DIGEST
// the first 12 hex digits, CREATED relative to `now` (unix s).
std::string FormatImageTable(const nlohmann::json& images, int64_t now);
// 1023 B, 1.0 KiB, 12.5 MiB, 3.2 GiB.
std::string FormatBytes(uint64_t bytes);

int RunImageCommand(const ImageOptions& options);

// A path on this host as corrald must get it: absolute (a relative one is the working
// directory's: corrald has its own).
StatusOr<std::string> AbsolutePath(const std::string& path);

}  // namespace corral::cli
