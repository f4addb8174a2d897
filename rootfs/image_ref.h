// Image references as operators type them: `python:3.12`, `acme/agent:2026-11`,
// `localhost:5000/acme/agent@sha256:<hex>`. Parsed and validated by the grammar of
// docker/distribution's `reference` package, which registries, skopeo and docker all share:
//
//   reference  := name [ ":" tag ] [ "@" digest ]
//   name       := [ registry "/" ] path-component ( "/" path-component )*
//   registry   := host-component ( "." host-component )* [ ":" port ]
//   host-component := [A-Za-z0-9] | [A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9]
//   path-component := [a-z0-9]+ ( separator [a-z0-9]+ )*     separator := "." | "_" | "__" | "-"+
//   tag        := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
//   digest     := "sha256:" 64 lowercase hex digits (the only algorithm corral stores)
//
// The first component is a registry when it contains "." or ":" or is "localhost" (as docker
// decides; there is no default registry: `python` stays `python`). The whole name (registry and
// path) is at most 255 characters. Names are never used as paths: the store keys layers and
// images by digest. Still, anything that could be mistaken for one is refused with its cause:
// ".." and "." components, empty components, a leading or trailing "/", uppercase in the path,
// spaces, NUL and other control characters. IPv6 literal registries ("[::1]:5000") are not
// accepted.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace corral::rootfs {

inline constexpr size_t kMaxImageNameLength = 255;
inline constexpr size_t kMaxImageTagLength = 128;
inline constexpr std::string_view kDefaultImageTag = "latest";

struct ImageRef {
  std::string registry;  // "localhost:5000", "registry.example.com"; empty: none given
  std::string name;      // the path: "python", "acme/agent"
  std::string tag;       // "3.12"; kDefaultImageTag when neither a tag nor a digest was given
  std::string digest;    // "sha256:<hex>" or empty

  // The repository: "registry/name", or "name" without a registry.
  std::string Repository() const;
  // "repository:tag" (the key a tag is stored under); "repository@digest" when there is no tag.
  std::string Name() const;
  // The canonical text: "repository[:tag][@digest]". ParseImageRef(r.ToString()) == r.
  std::string ToString() const;

  bool operator==(const ImageRef&) const = default;
};

// Parses and validates `text`. The error names the cause ("image reference \"a/../b\": path
// component \"..\" is not allowed").
StatusOr<ImageRef> ParseImageRef(std::string_view text);

// Whether `text` is "sha256:" followed by exactly 64 lowercase hex digits.
bool IsDigest(std::string_view text);

// Whether `text` is a valid tag (the grammar above).
bool IsValidTag(std::string_view text);

}  // namespace corral::rootfs
