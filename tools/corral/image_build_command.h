// corral image build -f RECIPE -t NAME:TAG [--build-arg K=V]... [--no-cache] [--force] [DIR]:
// an image from a recipe (supervisor/images/recipe.h), built by corrald (admin socket). The CLI
// reads the recipe (default DIR/Recipe, else DIR/Dockerfile) and sends its text with DIR made
// absolute (corrald reads the context from its own file system: same host), then follows the
// build's log (GET /v1/images/builds/{id}?after=N) until it ends. Exit 0 with the image's digest
// on the last line, 1 when the build failed (its error on stderr), 2 for bad options.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "tools/corral/remote_options.h"

namespace corral::cli {

struct ImageBuildOptions {
  bool help = false;
  AdminConfig admin;
  std::string recipe_path;  // absolute
  std::string context;      // absolute
  std::string name;         // -t
  std::map<std::string, std::string> build_args;
  bool no_cache = false;
  bool force = false;
  bool json = false;        // the final build record as JSON on stdout (the log goes to stderr)
};

const char* ImageBuildUsage();
// `args` start with "build".
StatusOr<ImageBuildOptions> ParseImageBuildOptions(const std::vector<std::string>& args, const EnvLookup& env);
// The POST /v1/images/build body for the options and the recipe's text.
nlohmann::json ImageBuildBody(const ImageBuildOptions& options, const std::string& recipe);
int RunImageBuildCommand(const ImageBuildOptions& options);

}  // namespace corral::cli
