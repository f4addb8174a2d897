// Tar archives for `corral cp -r` (libarchive): what PUT/GET /v1/sandboxes/{id}/fs/tar carry.
//
// Only regular files, directories and symlinks travel (what the daemon accepts); symlinks are
// stored as symlinks, never followed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace corral::cli {

// A pax (ustar where it suffices) archive of `dir`'s contents, with names relative to `dir`
// ("a", "sub/", "sub/b"). Other file types (sockets, FIFOs, devices) are left out and their
// names added to `skipped`.
StatusOr<std::string> TarDirectory(const std::string& dir, std::vector<std::string>* skipped);

// Extracts `tar` into the existing directory `dir` and returns how many entries it wrote.
// Nothing can land outside `dir`: entries with absolute paths or ".." are refused, so is
// writing through a symlink already on disk (ARCHIVE_EXTRACT_SECURE_*); hard links and special
// files are refused. Owners are not restored and set-id bits are dropped (files belong to the
// caller, modes filtered by the umask). Stops at the first refused entry, with its name.
StatusOr<size_t> ExtractTar(std::string_view tar, const std::string& dir);

}  // namespace corral::cli
