// The pieces OpenImageArchive (oci_archive.h) reads an image with: a directory read only beneath
// its fd and never through a symlink, OCI descriptors, and JSON fields read without exceptions
// (nlohmann/json's typed getters throw on a wrong type: every field's type is checked first).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"

namespace corral::rootfs::oci {

using json = nlohmann::json;

// An OCI content descriptor (image-spec descriptor.md), as far as corral reads one.
struct Descriptor {
  std::string media_type;
  std::string digest;  // checked: sha256:<64 hex>
  int64_t size = -1;
  std::map<std::string, std::string> annotations;
  std::string os, architecture;  // "platform", in an index
};

// The JSON document `text`, which must be an object (or an array when `array`).
StatusOr<json> ParseJson(const std::string& text, const std::string& what, bool array = false);
// obj[key] as a string: "" when absent or null, an error when of another type.
StatusOr<std::string> StringField(const json& obj, const char* key, const std::string& what);
// obj[key] as an array of strings: empty when absent or null.
StatusOr<std::vector<std::string>> StringList(const json& obj, const char* key, const std::string& what);
// A descriptor: digest and size required and valid.
StatusOr<Descriptor> ParseDescriptor(const json& d, const std::string& what);

// "blobs/sha256/<hex>" for a checked digest.
std::string BlobPath(const std::string& digest);

// The directory an image archive is read from. Paths are relative, normalized (archive_paths.h)
// and opened with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS.
class Layout {
 public:
  static StatusOr<Layout> Open(const std::string& path);
  const std::string& path() const { return path_; }

  // The regular file at `rel`, opened for reading; its size in `*size`.
  StatusOr<UniqueFd> OpenFile(const std::string& rel, uint64_t* size) const;
  bool Exists(const std::string& rel) const;
  // A small file's content: more than `max` bytes is an error.
  StatusOr<std::string> Read(const std::string& rel, uint64_t max) const;
  // "sha256:<hex>" of a file's content, and its size in `*size`.
  StatusOr<std::string> Digest(const std::string& rel, uint64_t* size) const;
  // A JSON blob named by `d` (at most `max` bytes), checked against its digest and size.
  StatusOr<std::string> ReadBlob(const Descriptor& d, uint64_t max, const std::string& what) const;

 private:
  std::string path_;
  UniqueFd root_;
};

}  // namespace corral::rootfs::oci
