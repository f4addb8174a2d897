#include "supervisor/images/build_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>

#include <nlohmann/json.hpp>

#include "common/file_util.h"
#include "common/log.h"
#include "common/sha256.h"

namespace corral::supervisor {
namespace {

std::mutex& CacheMutex() {
  static std::mutex mu;
  return mu;
}

nlohmann::json Load(const std::string& path) {
  auto text = ReadFileToString(path);
  if (!text.ok()) return nlohmann::json::object();
  auto cache = nlohmann::json::parse(*text, nullptr, false);
  if (cache.is_discarded() || !cache.is_object()) {
    LogWarn("images", "the build cache is not JSON; starting it anew", {{"path", path}});
    return nlohmann::json::object();
  }
  return cache;
}

Status Save(const std::string& path, const nlohmann::json& cache) {
  const std::string tmp = path + ".tmp";
  (void)unlink(tmp.c_str());
  RETURN_IF_ERROR(WriteNewFile(tmp, cache.dump(), 0600));
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("rename " + tmp);
  return Status();
}

}  // namespace

std::string BuildCache::StepKey(const std::string& parent, const std::string& step_text, const std::string& content) {
  return Sha256Hex(parent + "\n" + step_text + "\n" + content);
}

std::optional<CachedLayer> BuildCache::Lookup(const std::string& key) const {
  std::lock_guard lock(CacheMutex());
  const nlohmann::json json = Load(path_);
  auto it = json.find(key);
  if (it == json.end() || !it->is_object() || !it->contains("diff_id")) return std::nullopt;
  return CachedLayer{it->value("diff_id", ""), it->value("bytes", uint64_t{0})};
}

Status BuildCache::Put(const std::string& key, const CachedLayer& layer) {
  std::lock_guard lock(CacheMutex());
  nlohmann::json json = Load(path_);
  json[key] = {{"diff_id", layer.diff_id}, {"bytes", layer.bytes}};
  return Save(path_, json);
}

StatusOr<uint64_t> BuildCache::Retain(const std::function<bool(const std::string& diff_id)>& keep) {
  std::lock_guard lock(CacheMutex());
  if (access(path_.c_str(), F_OK) != 0) return uint64_t{0};
  nlohmann::json json = Load(path_);
  uint64_t dropped = 0;
  for (auto it = json.begin(); it != json.end();) {
    const bool live = it->is_object() && it->contains("diff_id") && (*it)["diff_id"].is_string() &&
                      keep((*it)["diff_id"].get<std::string>());
    if (live) {
      ++it;
    } else {
      it = json.erase(it);
      ++dropped;
    }
  }
  if (dropped == 0) return dropped;
  RETURN_IF_ERROR(Save(path_, json));
  return dropped;
}

}  // namespace corral::supervisor
