// The build cache of `corral image build`: which layer a step made, by the step's key.
//
// A key is sha256 of the parent's key and the step (RecipeStep::CanonicalText, and for COPY and
// ADD the content hash of the sources): key(FROM) = sha256("FROM " + base image digest), so a
// step is a hit only when every step before it was the same on the same base. Metadata steps
// (ENV, WORKDIR, USER) move the key but make no layer.
//
// Kept in one JSON file, <images_dir>/build-cache.json ({"<key>": {"diff_id", "bytes"}}),
// rewritten whole (a temporary file renamed over it) under a process-wide lock. An entry whose
// layer is gone (pruned) is a miss, and `corral image prune` drops such entries (Retain), so the
// file holds no more entries than the store has layers. A corrupt file is an empty cache
// (logged), not an error.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "common/status.h"

namespace corral::supervisor {

struct CachedLayer {
  std::string diff_id;
  uint64_t bytes = 0;
};

class BuildCache {
 public:
  explicit BuildCache(std::string path) : path_(std::move(path)) {}

  std::optional<CachedLayer> Lookup(const std::string& key) const;
  Status Put(const std::string& key, const CachedLayer& layer);
  // Drops the entries whose layer `keep` says no to; how many it dropped.
  StatusOr<uint64_t> Retain(const std::function<bool(const std::string& diff_id)>& keep);

  // The key of a step: sha256 hex of parent, the step's text and the sources' content hash.
  static std::string StepKey(const std::string& parent, const std::string& step_text, const std::string& content);

 private:
  std::string path_;
};

}  // namespace corral::supervisor
