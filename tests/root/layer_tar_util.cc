#include "layer_tar_util.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>

#include "common/file_util.h"
#include "common/sha256.h"

namespace corral::test {

TarEntry File(std::string path, std::string data, mode_t mode, int64_t uid, int64_t gid) {
  TarEntry e;
  e.path = std::move(path);
  e.data = std::move(data);
  e.mode = mode;
  e.uid = uid;
  e.gid = gid;
  return e;
}

TarEntry Dir(std::string path, mode_t mode, int64_t uid, int64_t gid) {
  TarEntry e = File(std::move(path), "", mode, uid, gid);
  e.type = S_IFDIR;
  return e;
}

TarEntry Symlink(std::string path, std::string target) {
  TarEntry e = File(std::move(path), "", 0777);
  e.type = S_IFLNK;
  e.link = std::move(target);
  return e;
}

TarEntry Hardlink(std::string path, std::string target) {
  TarEntry e = File(std::move(path), "");
  e.hardlink = std::move(target);
  return e;
}

TarEntry Fifo(std::string path) {
  TarEntry e = File(std::move(path), "", 0600);
  e.type = S_IFIFO;
  return e;
}

TarEntry Device(std::string path, bool block, unsigned major, unsigned minor) {
  TarEntry e = File(std::move(path), "", 0666);
  e.type = block ? S_IFBLK : S_IFCHR;
  e.rdev_major = major;
  e.rdev_minor = minor;
  return e;
}

namespace {

struct FreeWriter {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct FreeEntry {
  void operator()(struct archive_entry* e) const { archive_entry_free(e); }
};

bool WriteEntry(struct archive* a, const TarEntry& t) {
  std::unique_ptr<struct archive_entry, FreeEntry> e(archive_entry_new());
  archive_entry_set_pathname(e.get(), t.path.c_str());
  archive_entry_set_uid(e.get(), t.uid);
  archive_entry_set_gid(e.get(), t.gid);
  archive_entry_set_mtime(e.get(), t.mtime, 0);
  archive_entry_set_perm(e.get(), t.mode);
  const uint64_t size = t.zeros > 0 ? t.zeros : t.data.size();
  if (!t.hardlink.empty()) {
    archive_entry_set_filetype(e.get(), AE_IFREG);
    archive_entry_set_hardlink(e.get(), t.hardlink.c_str());
    archive_entry_set_size(e.get(), 0);
  } else {
    archive_entry_set_filetype(e.get(), t.type);
    archive_entry_set_size(e.get(), t.type == S_IFREG ? static_cast<int64_t>(size) : 0);
    if (t.type == S_IFLNK) archive_entry_set_symlink(e.get(), t.link.c_str());
    if (t.type == S_IFCHR || t.type == S_IFBLK) {
      archive_entry_set_rdevmajor(e.get(), t.rdev_major);
      archive_entry_set_rdevminor(e.get(), t.rdev_minor);
    }
  }
  if (archive_write_header(a, e.get()) < ARCHIVE_WARN) {
    ADD_FAILURE() << "tar header " << t.path << ": " << archive_error_string(a);
    return false;
  }
  if (t.type != S_IFREG || !t.hardlink.empty()) return true;
  if (t.zeros == 0) return archive_write_data(a, t.data.data(), t.data.size()) == static_cast<la_ssize_t>(t.data.size());
  const std::string chunk(1 << 20, '\0');
  for (uint64_t left = t.zeros; left > 0;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(left, chunk.size()));
    if (archive_write_data(a, chunk.data(), n) != static_cast<la_ssize_t>(n)) return false;
    left -= n;
  }
  return true;
}

}  // namespace

bool WriteTar(const std::string& path, const std::vector<TarEntry>& entries, Compression compression) {
  std::unique_ptr<struct archive, FreeWriter> a(archive_write_new());
  archive_write_set_format_pax_restricted(a.get());
  if (compression == Compression::kGzip) {
    archive_write_add_filter_gzip(a.get());
    archive_write_set_filter_option(a.get(), "gzip", "compression-level", "1");
    archive_write_set_filter_option(a.get(), "gzip", "timestamp", nullptr);
  } else if (compression == Compression::kZstd) {
    archive_write_add_filter_zstd(a.get());
  }
  if (archive_write_open_filename(a.get(), path.c_str()) != ARCHIVE_OK) {
    ADD_FAILURE() << "open " << path << ": " << archive_error_string(a.get());
    return false;
  }
  for (const TarEntry& t : entries) {
    if (!WriteEntry(a.get(), t)) {
      ADD_FAILURE() << "writing " << t.path << " into " << path << ": " << archive_error_string(a.get());
      return false;
    }
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) {
    ADD_FAILURE() << "close " << path << ": " << archive_error_string(a.get());
    return false;
  }
  return true;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "cannot read " << path;
    return "";
  }
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string FileDigest(const std::string& path) {
  StatusOr<std::string> hex = Sha256File(path);
  if (!hex.ok()) ADD_FAILURE() << hex.status().ToString();
  return hex.ok() ? "sha256:" + *hex : "";
}

std::string BytesDigest(const std::string& bytes) { return "sha256:" + Sha256Hex(bytes); }

void WriteBytes(const std::string& path, const std::string& bytes) {
  const std::string parent = path.substr(0, path.rfind('/'));
  Status made = MakeDirs(parent, 0755);
  if (!made.ok()) ADD_FAILURE() << made.ToString();
  Status written = WriteNewFile(path, bytes);
  if (!written.ok()) ADD_FAILURE() << written.ToString();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace corral::test
