// COPY and ADD sources from a build's context directory (image_build.h): the layer tar of a COPY,
// and a content hash of the sources for the build cache.
//
// Sources are paths the recipe parser normalized (no "..", not absolute). Each is also checked on
// disk: the real path of its parent directory must lie inside the context's real path, so a
// symlinked directory in the context does not lead out of it (`link -> /etc`, `COPY link/shadow`).
// Inside a copied directory nothing is followed: symlinks are copied as symlinks.
//
// The tar (pax, plain) puts a file source at dest (or dest/NAME when dest ends in "/"), and a
// directory source's content under dest (which gets an entry of its own, 0755), owned by the
// step's uid:gid, with the files' modes (& 07777) and modification times. Directories are walked
// in name order. Sockets are skipped; device nodes are refused.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "supervisor/images/recipe.h"

namespace corral::supervisor {

struct ContextTar {
  // "sha256:<hex>" over the entries' paths, types, modes, owners and contents (no times): what
  // the build cache keys a COPY by, so touching a file does not miss the cache.
  std::string content_hash;
  uint64_t bytes = 0;    // regular files' content
  uint64_t entries = 0;
};

// Writes the COPY step's tar at `tar_path` (created 0600; must not exist). ENOENT names a source
// missing from the context; EINVAL one that leads out of it.
StatusOr<ContextTar> WriteCopyTar(const std::string& context, const RecipeStep& step, const std::string& tar_path);

// A layer tar of one directory at `path` (absolute), root's, 0755, time 0 (the same tar every
// time): what WORKDIR adds when the image lacks its directory.
Status WriteDirTar(const std::string& path, const std::string& tar_path);

// The path on disk of the context source `source` (checked as above), for ADD.
StatusOr<std::string> ContextSource(const std::string& context, const std::string& source);

}  // namespace corral::supervisor
