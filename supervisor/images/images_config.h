// [images] of corrald.toml: limits on what an import or pull may bring, and the registries
// corrald pulls from (supervisor/images/image_service.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace corral::supervisor {

// A registry corrald pulls from with credentials or over plain HTTP ([[images.registry]]).
struct RegistryConfig {
  std::string host;            // "registry.example.com" or "127.0.0.1:5000", as in references
  bool insecure = false;       // plain HTTP (or TLS without verification): loopback registries
  std::string username;
  std::string password_file;   // read at each pull; the password never reaches a sandbox or a log
};

// [images]
struct ImagesConfig {
  uint64_t max_size = 16ull << 30;  // unpacked bytes of one image (all its layers)
  uint64_t max_layers = 128;        // at most rootfs::kMaxImageLayers
  std::string skopeo = "skopeo";    // the program pulls run
  std::vector<RegistryConfig> registries;
};

}  // namespace corral::supervisor
