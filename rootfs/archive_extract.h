// Extracting an image archive (an OCI layout or `docker save` tar) into a work directory, so that
// it can be read as a directory: regular files and directories only (a symlink, hard link,
// device or anything else is refused), each path normalized (archive_paths.h) and written under
// the work directory's fd with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS. Owners are not applied
// (everything belongs to the caller), files are 0644 and directories 0755. The tar may be plain,
// gzip or zstd (tar_stream.h). This is not a layer: layers inside the archive are blobs, unpacked
// later by UnpackLayer.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace corral::rootfs {

// Extracts the tar at `tar_path` into the existing directory `dest_dir`. The uncompressed stream
// is capped at `max_bytes`, the entries at `max_entries`. On error, what was extracted stays:
// the caller removes `dest_dir`'s content (OpenImageArchive does). Errors name the entry.
Status ExtractArchiveTree(const std::string& tar_path, const std::string& dest_dir, uint64_t max_bytes,
                          uint64_t max_entries);

}  // namespace corral::rootfs
