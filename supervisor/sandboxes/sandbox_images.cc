// Sandboxes of images: which image a new sandbox gets, its layers at each start, and what the
// image's config gives its commands.
#include <algorithm>
#include <cerrno>

#include "isolation/sandbox_spec.h"
#include "supervisor/images/image_service.h"
#include "supervisor/sandboxes/sandbox_manager.h"

namespace corral::supervisor {
namespace {

// Whether `name` is one of `allowed` ("python:3.12"), or starts with an entry's part before its
// trailing "*" ("python:*").
bool Allowed(const std::vector<std::string>& allowed, const std::string& name) {
  return std::any_of(allowed.begin(), allowed.end(), [&](const std::string& entry) {
    if (!entry.empty() && entry.back() == '*') return name.compare(0, entry.size() - 1, entry, 0, entry.size() - 1) == 0;
    return entry == name;
  });
}

std::string AllowedList(const std::vector<std::string>& allowed) {
  std::string list;
  for (const std::string& entry : allowed) list += (list.empty() ? "" : ", ") + entry;
  return list.empty() ? "none" : list;
}

}  // namespace

StatusOr<SandboxManager::ChosenImage> SandboxManager::ResolveImage(const UserCaps& caps,
                                                                   const std::string& image) const {
  const std::string asked = image.empty() ? isolation::kHostImage : image;
  if (asked == isolation::kHostImage) {
    if (caps.images && !Allowed(*caps.images, asked)) {
      return Status::Error("image host: this token's limits.images allow only " + AllowedList(*caps.images), EPERM);
    }
    return ChosenImage{isolation::kHostImage, ""};
  }
  if (images_ == nullptr) return Status::Error("image " + asked + ": images are not set up on this daemon", EAGAIN);
  ASSIGN_OR_RETURN(ResolvedImage resolved, images_->Resolve(asked));
  if (caps.images) {
    if (resolved.name.empty()) {
      return Status::Error("image " + asked + ": this token's limits.images allow images by name only (" +
                               AllowedList(*caps.images) + ")",
                           EPERM);
    }
    if (!Allowed(*caps.images, resolved.name)) {
      return Status::Error("image " + resolved.name + ": this token's limits.images allow only " +
                               AllowedList(*caps.images),
                           EPERM);
    }
  }
  return ChosenImage{resolved.digest, resolved.name};
}

StatusOr<std::vector<std::string>> SandboxManager::ImageLayersOf(const SandboxRow& row) const {
  if (row.image.empty() || row.image == isolation::kHostImage) return std::vector<std::string>();
  if (images_ == nullptr) return Status::Error("sandbox " + row.id + " has an image, but images are not set up", EIO);
  ASSIGN_OR_RETURN(ResolvedImage resolved, images_->Resolve(row.image));
  return resolved.layer_dirs;
}

std::string SandboxManager::DefaultUserOf(const SandboxRow& row) const {
  if (row.image.empty() || row.image == isolation::kHostImage || images_ == nullptr) return "agent";
  auto config = images_->ConfigOf(row.image);
  if (!config.ok()) return "agent";
  // USER is "user[:group]" by name or number; only root (0) differs from the daemon's default.
  const std::string user = config->user.substr(0, config->user.find(':'));
  return user == "root" || user == "0" ? "root" : "agent";
}

void SandboxManager::ApplyImageConfig(const SandboxRow& row, ExecRequest& request, bool cwd_given) const {
  if (row.image.empty() || row.image == isolation::kHostImage || images_ == nullptr) return;
  auto config = images_->ConfigOf(row.image);
  if (!config.ok()) return;
  // The image's variables replace the defaults of the same name (its PATH first of all).
  for (const std::string& var : config->env) {
    const size_t eq = var.find('=');
    if (eq == 0 || eq == std::string::npos) continue;
    const std::string key = var.substr(0, eq + 1);
    request.env.erase(std::remove_if(request.env.begin(), request.env.end(),
                                     [&](const std::string& e) { return e.compare(0, key.size(), key) == 0; }),
                      request.env.end());
    request.env.push_back(var);
  }
  if (!cwd_given && !config->working_dir.empty() && config->working_dir[0] == '/') request.cwd = config->working_dir;
}

}  // namespace corral::supervisor
