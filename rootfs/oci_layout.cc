#include "rootfs/oci_layout.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>


#include "common/sha256.h"
#include "rootfs/archive_paths.h"
#include "rootfs/image_ref.h"

namespace corral::rootfs::oci {

StatusOr<json> ParseJson(const std::string& text, const std::string& what, bool array) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return Status::Error(what + ": not JSON");
  if (array ? !doc.is_array() : !doc.is_object()) return Status::Error(what + ": not a JSON " + (array ? "array" : "object"));
  return doc;
}

StatusOr<std::string> StringField(const json& obj, const char* key, const std::string& what) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::string();
  if (!it->is_string()) return Status::Error(what + ": " + key + " is not a string");
  return it->get<std::string>();
}

StatusOr<std::vector<std::string>> StringList(const json& obj, const char* key, const std::string& what) {
  std::vector<std::string> out;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return out;
  if (!it->is_array()) return Status::Error(what + ": " + key + " is not an array");
  for (const json& v : *it) {
    if (!v.is_string()) return Status::Error(what + ": " + key + " holds a non-string");
    out.push_back(v.get<std::string>());
  }
  return out;
}

StatusOr<Descriptor> ParseDescriptor(const json& d, const std::string& what) {
  if (!d.is_object()) return Status::Error(what + ": descriptor is not an object");
  Descriptor out;
  ASSIGN_OR_RETURN(out.media_type, StringField(d, "mediaType", what));
  ASSIGN_OR_RETURN(out.digest, StringField(d, "digest", what));
  if (!IsDigest(out.digest)) return Status::Error(what + ": digest \"" + out.digest + "\" is not sha256:<64 hex>");
  auto size = d.find("size");
  if (size == d.end() || !size->is_number_integer() || size->get<int64_t>() < 0) {
    return Status::Error(what + " " + out.digest + ": no valid size");
  }
  out.size = size->get<int64_t>();
  if (auto a = d.find("annotations"); a != d.end() && a->is_object()) {
    for (const auto& [k, v] : a->items()) {
      if (v.is_string()) out.annotations[k] = v.get<std::string>();
    }
  }
  if (auto p = d.find("platform"); p != d.end() && p->is_object()) {
    ASSIGN_OR_RETURN(out.os, StringField(*p, "os", what));
    ASSIGN_OR_RETURN(out.architecture, StringField(*p, "architecture", what));
  }
  return out;
}

std::string BlobPath(const std::string& digest) { return "blobs/sha256/" + digest.substr(7); }

StatusOr<Layout> Layout::Open(const std::string& path) {
  Layout l;
  l.path_ = path;
  l.root_.reset(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!l.root_) return ErrnoError("open " + path);
  return l;
}

StatusOr<UniqueFd> Layout::OpenFile(const std::string& rel, uint64_t* size) const {
  ASSIGN_OR_RETURN(std::vector<std::string> parts, NormalizeArchivePath(rel));
  if (parts.empty()) return Status::Error(rel + ": not a file");
  StatusOr<UniqueFd> dir = OpenDirBeneath(root_.get(), parts, parts.size() - 1, false);
  if (!dir.ok()) return dir.status().WithContext(rel);
  UniqueFd fd = OpenBeneath(dir->get(), parts.back(), O_RDONLY | O_NOCTTY | O_NONBLOCK);
  if (!fd && errno == ENOENT) return Status::Error(rel + ": missing");
  if (!fd && errno == ELOOP) return Status::Error(rel + ": a symlink");
  if (!fd) return ErrnoError("open " + rel);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoError("stat " + rel);
  if (!S_ISREG(st.st_mode)) return Status::Error(rel + ": not a regular file");
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

bool Layout::Exists(const std::string& rel) const {
  uint64_t size = 0;
  return OpenFile(rel, &size).ok();
}

StatusOr<std::string> Layout::Read(const std::string& rel, uint64_t max) const {
  uint64_t size = 0;
  ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(rel, &size));
  if (size > max) return Status::Error(rel + ": " + std::to_string(size) + " bytes, more than " + std::to_string(max));
  std::string out(size, '\0');
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::read(fd.get(), out.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read " + rel);
    if (n == 0) return Status::Error(rel + ": shorter than its size");
    got += static_cast<size_t>(n);
  }
  return out;
}

StatusOr<std::string> Layout::Digest(const std::string& rel, uint64_t* size) const {
  ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(rel, size));
  ASSIGN_OR_RETURN(std::string hex, Sha256Fd(fd.get(), rel));
  return "sha256:" + hex;
}

StatusOr<std::string> Layout::ReadBlob(const Descriptor& d, uint64_t max, const std::string& what) const {
  StatusOr<std::string> text = Read(BlobPath(d.digest), max);
  if (!text.ok()) return text.status().WithContext(what + " " + d.digest);
  const std::string got = "sha256:" + Sha256Hex(*text);
  if (got != d.digest) return Status::Error(what + " blob " + d.digest + " has digest " + got);
  if (d.size >= 0 && static_cast<uint64_t>(d.size) != text->size()) {
    return Status::Error(what + " blob " + d.digest + ": " + std::to_string(text->size()) + " bytes, descriptor says " +
                         std::to_string(d.size));
  }
  return text;
}

}  // namespace corral::rootfs::oci
