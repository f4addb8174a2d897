// [images] keys of corrald.toml that need more than a size or a count (supervisor/config.cc):
// `skopeo` and the [[images.registry]] tables. Each returns "" or what was expected, which the
// caller prefixes with the file, the line and the key.
#pragma once

#include <string>
#include <vector>

#include <toml++/toml.h>

#include "supervisor/images/images_config.h"

namespace corral::supervisor {

// images.skopeo: an absolute path, or a program name looked up in PATH ("skopeo").
std::string ParseSkopeoPath(const toml::node& node, std::string& out);

// [[images.registry]]: tables of host (required, unique), insecure, username and password_file
// (an absolute path, read at each pull; username and password_file go together). An error inside
// a table names its place and line: "[2].password_file (line 14): expected an absolute path".
std::string ParseRegistries(const toml::node& node, std::vector<RegistryConfig>& out);

// Whether two [images] are the same (a reload that changes them needs a restart).
bool SameImagesConfig(const ImagesConfig& a, const ImagesConfig& b);

}  // namespace corral::supervisor
