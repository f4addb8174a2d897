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
  auto json = nlohmann::json::parse(*text, nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    LogWarn("images", "the build cache is not JSON; starting it anew", {{"path", path}});
    return nlohmann::json::object();
  }
  return json;
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
  const std::string tmp = path_ + ".tmp";
  (void)unlink(tmp.c_str());
  RETURN_IF_ERROR(WriteNewFile(tmp, json.dump(), 0600));
  if (rename(tmp.c_str(), path_.c_str()) != 0) return ErrnoError("rename " + tmp);
  return Status();
}

}  // namespace corral::supervisor
