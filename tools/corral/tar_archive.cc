#include "tools/corral/tar_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <unistd.h>

#include <memory>

#include "common/unique_fd.h"

namespace corral::cli {
namespace {

struct ReadDeleter {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
struct WriteDeleter {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct EntryDeleter {
  void operator()(struct archive_entry* e) const { archive_entry_free(e); }
};
using ArchiveReader = std::unique_ptr<struct archive, ReadDeleter>;
using ArchiveWriter = std::unique_ptr<struct archive, WriteDeleter>;
using ArchiveEntry = std::unique_ptr<struct archive_entry, EntryDeleter>;

Status ArchiveError(struct archive* a, const std::string& what) {
  const char* message = archive_error_string(a);
  return Status::Error(what + ": " + (message != nullptr ? message : "libarchive error"),
                       archive_errno(a) > 0 ? archive_errno(a) : 0);
}

la_ssize_t AppendToString(struct archive*, void* client, const void* buffer, size_t length) {
  static_cast<std::string*>(client)->append(static_cast<const char*>(buffer), length);
  return static_cast<la_ssize_t>(length);
}

// The entry's name, in whichever form libarchive can give it.
std::string EntryName(struct archive_entry* entry) {
  if (const char* name = archive_entry_pathname(entry)) return name;
  if (const char* name = archive_entry_pathname_utf8(entry)) return name;
  return "(unnamed entry)";
}

// Checked here as well as by libarchive's flags, so that the error names the rule.
Status CheckEntryName(const std::string& name) {
  if (name.empty()) return Status::Error("an entry without a name");
  if (name[0] == '/') return Status::Error(name + ": absolute path refused");
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    if (name.compare(start, end - start, "..") == 0) return Status::Error(name + ": '..' refused");
    start = end + 1;
  }
  return Status();
}

// Makes `dir` the working directory for the scope: archive_write_disk resolves entries against
// it, and its SECURE_* checks are relative to it.
class ScopedWorkingDirectory {
 public:
  Status Enter(const std::string& dir) {
    saved_.reset(open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!saved_) return ErrnoError("open the working directory");
    if (chdir(dir.c_str()) != 0) return ErrnoError("chdir " + dir);
    return Status();
  }
  ~ScopedWorkingDirectory() {
    if (saved_) (void)fchdir(saved_.get());
  }

 private:
  UniqueFd saved_;
};

}  // namespace

StatusOr<std::string> TarDirectory(const std::string& dir, std::vector<std::string>* skipped) {
  std::string root = dir;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  std::string out;
  ArchiveWriter writer(archive_write_new());
  ArchiveReader disk(archive_read_disk_new());
  ArchiveEntry entry(archive_entry_new());
  if (!writer || !disk || !entry) return Status::Error("libarchive: out of memory", ENOMEM);
  if (archive_write_set_format_pax_restricted(writer.get()) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(writer.get(), 1) != ARCHIVE_OK ||
      archive_write_open(writer.get(), &out, nullptr, AppendToString, nullptr) != ARCHIVE_OK) {
    return ArchiveError(writer.get(), "tar");
  }
  archive_read_disk_set_symlink_physical(disk.get());
  archive_read_disk_set_behavior(disk.get(), ARCHIVE_READDISK_NO_XATTR | ARCHIVE_READDISK_NO_ACL |
                                                 ARCHIVE_READDISK_NO_FFLAGS | ARCHIVE_READDISK_NO_SPARSE);
  if (archive_read_disk_open(disk.get(), root.c_str()) != ARCHIVE_OK) return ArchiveError(disk.get(), root);

  std::vector<char> buffer(64 * 1024);
  for (;;) {
    int r = archive_read_next_header2(disk.get(), entry.get());
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) return ArchiveError(disk.get(), root);
    archive_read_disk_descend(disk.get());
    std::string path = EntryName(entry.get());
    std::string relative = path.size() > root.size() ? path.substr(root.size()) : "";
    while (!relative.empty() && relative[0] == '/') relative.erase(0, 1);
    if (relative.empty()) continue;  // `dir` itself
    const mode_t type = archive_entry_filetype(entry.get());
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      if (skipped != nullptr) skipped->push_back(path);
      continue;
    }
    archive_entry_set_pathname(entry.get(), relative.c_str());
    r = archive_write_header(writer.get(), entry.get());
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) return ArchiveError(writer.get(), path);
    if (type != AE_IFREG) continue;
    la_ssize_t n;
    while ((n = archive_read_data(disk.get(), buffer.data(), buffer.size())) > 0) {
      if (archive_write_data(writer.get(), buffer.data(), static_cast<size_t>(n)) < 0) {
        return ArchiveError(writer.get(), path);
      }
    }
    if (n < 0) return ArchiveError(disk.get(), path);
  }
  if (archive_write_close(writer.get()) != ARCHIVE_OK) return ArchiveError(writer.get(), "tar");
  return out;
}

StatusOr<size_t> ExtractTar(std::string_view tar, const std::string& dir) {
  // Declared first, so that it is left last: closing `disk` (also when freed on an error path)
  // still sets directory times by relative names.
  ScopedWorkingDirectory cwd;
  RETURN_IF_ERROR(cwd.Enter(dir));
  ArchiveReader reader(archive_read_new());
  ArchiveWriter disk(archive_write_disk_new());
  if (!reader || !disk) return Status::Error("libarchive: out of memory", ENOMEM);
  archive_read_support_format_tar(reader.get());
  if (archive_read_open_memory(reader.get(), tar.data(), tar.size()) != ARCHIVE_OK) {
    return ArchiveError(reader.get(), "read the tar archive");
  }
  // No ARCHIVE_EXTRACT_OWNER or _PERM: the caller owns what is written, the umask applies, and
  // set-id and sticky bits are dropped.
  archive_write_disk_set_options(disk.get(), ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                                 ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS | ARCHIVE_EXTRACT_TIME);
  size_t entries = 0;
  for (;;) {
    struct archive_entry* entry = nullptr;
    int r = archive_read_next_header(reader.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) return ArchiveError(reader.get(), "read the tar archive");
    const std::string name = EntryName(entry);
    RETURN_IF_ERROR(CheckEntryName(name));
    if (archive_entry_hardlink(entry) != nullptr) return Status::Error(name + ": hard link refused");
    const mode_t type = archive_entry_filetype(entry);
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      return Status::Error(name + ": not a file, directory or symlink");
    }
    r = archive_write_header(disk.get(), entry);
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) return ArchiveError(disk.get(), name);
    if (type == AE_IFREG && archive_entry_size(entry) > 0) {
      const void* block;
      size_t size;
      la_int64_t offset;
      while ((r = archive_read_data_block(reader.get(), &block, &size, &offset)) == ARCHIVE_OK) {
        if (archive_write_data_block(disk.get(), block, size, offset) < ARCHIVE_OK) {
          return ArchiveError(disk.get(), name);
        }
      }
      if (r != ARCHIVE_EOF) return ArchiveError(reader.get(), name);
    }
    r = archive_write_finish_entry(disk.get());
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) return ArchiveError(disk.get(), name);
    ++entries;
  }
  // Directories' times and modes are set last, when nothing more will be written into them.
  if (archive_write_close(disk.get()) != ARCHIVE_OK) return ArchiveError(disk.get(), "finish extracting");
  return entries;
}

}  // namespace corral::cli
