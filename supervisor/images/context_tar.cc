#include "supervisor/images/context_tar.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <fts.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/sha256.h"
#include "common/unique_fd.h"
#include "supervisor/images/archive_handles.h"

namespace corral::supervisor {
namespace {


StatusOr<std::string> RealPath(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) == nullptr) return ErrnoError("realpath " + path);
  return std::string(buf);
}

int ByName(const FTSENT** a, const FTSENT** b) { return strcmp((*a)->fts_name, (*b)->fts_name); }

class CopyWriter {
 public:
  CopyWriter(struct archive* archive, uint32_t uid, uint32_t gid) : archive_(archive), uid_(uid), gid_(gid) {}

  // One file system object at `path` (lstat'ed as `st`) as the tar entry `name` (no leading /).
  Status Add(const char* path, const struct stat& st, const std::string& name);
  ContextTar Finish() {
    result_.content_hash = "sha256:" + hash_.HexDigest();
    return result_;
  }

 private:
  Status Fail(const std::string& what) { return Status::Error("COPY: " + what, EIO); }

  struct archive* archive_;
  uint32_t uid_, gid_;
  Sha256 hash_;
  ContextTar result_;
};

Status CopyWriter::Add(const char* path, const struct stat& st, const std::string& name) {
  if (S_ISSOCK(st.st_mode)) return Status();
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode) && !S_ISFIFO(st.st_mode)) {
    return Status::Error(std::string("COPY: ") + path + ": a device node", EINVAL);
  }
  ArchiveEntryPtr entry(archive_entry_new());
  archive_entry_set_pathname(entry.get(), name.c_str());
  archive_entry_set_uid(entry.get(), uid_);
  archive_entry_set_gid(entry.get(), gid_);
  archive_entry_set_perm(entry.get(), st.st_mode & 07777);
  archive_entry_set_mtime(entry.get(), st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  archive_entry_set_filetype(entry.get(), st.st_mode & S_IFMT);
  std::string link;
  if (S_ISLNK(st.st_mode)) {
    link.resize(PATH_MAX);
    const ssize_t n = readlink(path, link.data(), link.size());
    if (n < 0) return ErrnoError(std::string("COPY: readlink ") + path);
    link.resize(n);
    archive_entry_set_symlink(entry.get(), link.c_str());
  }
  if (S_ISREG(st.st_mode)) archive_entry_set_size(entry.get(), st.st_size);
  hash_.Update(name + '\0' + std::to_string(st.st_mode & (S_IFMT | 07777)) + '\0' + std::to_string(uid_) + ':' +
               std::to_string(gid_) + '\0' + link + '\0' + std::to_string(S_ISREG(st.st_mode) ? st.st_size : 0) + '\0');
  if (archive_write_header(archive_, entry.get()) != ARCHIVE_OK) return Fail(archive_error_string(archive_));
  ++result_.entries;
  if (!S_ISREG(st.st_mode)) return Status();
  UniqueFd fd(open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return ErrnoError(std::string("COPY: open ") + path);
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError(std::string("COPY: read ") + path);
    if (n == 0) return Status();
    hash_.Update(std::string_view(buf, static_cast<size_t>(n)));
    if (archive_write_data(archive_, buf, n) != n) return Fail(archive_error_string(archive_));
    result_.bytes += static_cast<uint64_t>(n);
  }
}

std::string Join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir + "/" + name;
}

// A directory source: its entry at `target`, then its content under it, in name order.
Status AddTree(CopyWriter& writer, const std::string& root, const std::string& target) {
  char* roots[] = {const_cast<char*>(root.c_str()), nullptr};
  FtsWalk fts(fts_open(roots, FTS_PHYSICAL | FTS_NOCHDIR, ByName));
  if (!fts) return ErrnoError("COPY: walk " + root);
  errno = 0;
  while (FTSENT* node = fts_read(fts.get())) {
    if (node->fts_info == FTS_DP) continue;
    if (node->fts_info == FTS_ERR || node->fts_info == FTS_DNR || node->fts_info == FTS_NS) {
      return Status::Error("COPY: " + std::string(node->fts_path) + ": " + strerror(node->fts_errno), EIO);
    }
    const std::string rel = node->fts_level == 0 ? "" : std::string(node->fts_path).substr(root.size() + 1);
    if (node->fts_level == 0) {
      if (target.empty()) continue;  // the image's root: its entry stays the lower layers'
      struct stat st = *node->fts_statp;
      st.st_mode = S_IFDIR | 0755;
      RETURN_IF_ERROR(writer.Add(node->fts_path, st, target));
      continue;
    }
    RETURN_IF_ERROR(writer.Add(node->fts_path, *node->fts_statp, Join(target, rel)));
  }
  if (errno != 0) return ErrnoError("COPY: walk " + root);
  return Status();
}

}  // namespace

StatusOr<std::string> ContextSource(const std::string& context, const std::string& source) {
  ASSIGN_OR_RETURN(std::string real_context, RealPath(context));
  const std::string path = source == "." ? real_context : real_context + "/" + source;
  const size_t slash = path.rfind('/');
  const std::string parent = source == "." ? real_context : path.substr(0, slash);
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    return Status::Error("source " + source + ": no such file in the build context", ENOENT);
  }
  ASSIGN_OR_RETURN(std::string real_parent, RealPath(parent));
  if (real_parent != real_context && real_parent.rfind(real_context + "/", 0) != 0) {
    return Status::Error("source " + source + " leads out of the build context (through a symlink)", EINVAL);
  }
  return path;
}

Status WriteDirTar(const std::string& path, const std::string& tar_path) {
  UniqueFd out(open(tar_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!out) return ErrnoError("create " + tar_path);
  ArchiveWriter archive(archive_write_new());
  ArchiveEntryPtr entry(archive_entry_new());
  archive_entry_set_pathname(entry.get(), path.substr(1).c_str());
  archive_entry_set_filetype(entry.get(), AE_IFDIR);
  archive_entry_set_perm(entry.get(), 0755);
  if (archive_write_set_format_pax_restricted(archive.get()) != ARCHIVE_OK ||
      archive_write_open_fd(archive.get(), out.get()) != ARCHIVE_OK ||
      archive_write_header(archive.get(), entry.get()) != ARCHIVE_OK || archive_write_close(archive.get()) != ARCHIVE_OK) {
    unlink(tar_path.c_str());
    return Status::Error("WORKDIR: " + std::string(archive_error_string(archive.get())), EIO);
  }
  return Status();
}

StatusOr<ContextTar> WriteCopyTar(const std::string& context, const RecipeStep& step, const std::string& tar_path) {
  UniqueFd out(open(tar_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!out) return ErrnoError("create " + tar_path);
  ArchiveWriter archive(archive_write_new());
  if (archive_write_set_format_pax_restricted(archive.get()) != ARCHIVE_OK ||
      archive_write_open_fd(archive.get(), out.get()) != ARCHIVE_OK) {
    return Status::Error("COPY: " + std::string(archive_error_string(archive.get())), EIO);
  }
  CopyWriter writer(archive.get(), step.uid, step.gid);
  const bool into_dir = step.dest.back() == '/';
  std::string dest = step.dest.substr(1);  // no leading "/"
  if (into_dir && !dest.empty()) dest.pop_back();
  Status status;
  for (const std::string& source : step.sources) {
    auto path = ContextSource(context, source);
    if (!path.ok()) {
      status = Status::Error("COPY: " + path.status().message(), path.status().error_number());
      break;
    }
    struct stat st;
    if (lstat(path->c_str(), &st) != 0) {
      status = ErrnoError("COPY: " + source);
      break;
    }
    if (S_ISDIR(st.st_mode)) {
      status = AddTree(writer, *path, dest);
    } else {
      const std::string name = path->substr(path->rfind('/') + 1);
      status = writer.Add(path->c_str(), st, into_dir ? Join(dest, name) : dest);
    }
    if (!status.ok()) break;
  }
  if (status.ok() && archive_write_close(archive.get()) != ARCHIVE_OK) status = Status::Error("COPY: finish the tar", EIO);
  if (!status.ok()) {
    unlink(tar_path.c_str());
    return status;
  }
  return writer.Finish();
}

}  // namespace corral::supervisor
