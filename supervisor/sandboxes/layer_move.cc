#include "supervisor/sandboxes/layer_move.h"

#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/file_util.h"
#include "common/run_program.h"
#include "common/sha256.h"
#include "common/unique_fd.h"
#include "rootfs/tar_stream.h"

namespace corral::supervisor {
namespace {

constexpr char kTar[] = "/bin/tar";
constexpr char kUpperMember[] = "upper";

// Where the layer's one member lives, and its name there.
struct Member {
  std::string dir;
  std::string name;
};

Member MemberOf(const WritableLayer& layer) {
  if (layer.kind == LayerKind::kQuotaDir) return {layer.path, kUpperMember};
  const size_t slash = layer.path.rfind('/');
  if (slash == std::string::npos) return {".", layer.path};
  return {layer.path.substr(0, slash), layer.path.substr(slash + 1)};
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

Status SyncFile(const std::string& path, int flags) {
  UniqueFd fd(open(path.c_str(), flags | O_CLOEXEC));
  if (!fd) return ErrnoError("open " + path);
  if (fsync(fd.get()) != 0) return ErrnoError("fsync " + path);
  return Status();
}

// How many members the tar holds, each of which must be `name` or lie under it (a directory).
StatusOr<uint64_t> CountMembers(const std::string& tar_path, const std::string& name, bool directory) {
  ASSIGN_OR_RETURN(std::unique_ptr<rootfs::TarStream> tar,
                   rootfs::TarStream::Open(tar_path, std::numeric_limits<uint64_t>::max()));
  uint64_t count = 0;
  while (true) {
    ASSIGN_OR_RETURN(archive_entry * entry, tar->Next());
    if (entry == nullptr) break;
    const char* raw = archive_entry_pathname(entry);
    std::string path = raw == nullptr ? "" : raw;
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    const bool ours = path == name || (directory && path.rfind(name + "/", 0) == 0);
    if (!ours || path.find("/../") != std::string::npos || path.ends_with("/..")) {
      return Status::Error("a moved layer's tar holds " + path + ", not " + name, EINVAL);
    }
    ++count;
  }
  return count;
}

}  // namespace

StatusOr<PackedLayer> PackLayer(const WritableLayer& layer, const std::string& tar_path) {
  const Member member = MemberOf(layer);
  const size_t slash = tar_path.rfind('/');
  if (slash != std::string::npos) RETURN_IF_ERROR(MakeDirs(tar_path.substr(0, slash), 0700));
  (void)unlink(tar_path.c_str());
  std::vector<std::string> argv = {kTar, "--create", "--file=" + tar_path, "--sparse", "--xattrs",
                                   "--xattrs-include=*", "--acls", "--numeric-owner", "--one-file-system"};
  if (Exists(member.dir + "/" + member.name)) {
    argv.insert(argv.end(), {"--directory=" + member.dir, "--", member.name});
  } else {
    argv.push_back("--files-from=/dev/null");  // a layer never made: nothing to move
  }
  Status packed = RunProgram(argv);
  if (packed.ok()) packed = SyncFile(tar_path, O_RDONLY);
  if (!packed.ok()) {
    (void)unlink(tar_path.c_str());
    return Status::Error("packing the layer " + layer.path + ": " + packed.message(), packed.error_number());
  }
  struct stat st;
  if (stat(tar_path.c_str(), &st) != 0) return ErrnoError("stat " + tar_path);
  ASSIGN_OR_RETURN(std::string sha256, Sha256File(tar_path));
  return PackedLayer{static_cast<uint64_t>(st.st_size), std::move(sha256)};
}

Status UnpackLayer(const std::string& tar_path, const WritableLayer& layer) {
  const Member member = MemberOf(layer);
  ASSIGN_OR_RETURN(uint64_t members, CountMembers(tar_path, member.name, layer.kind == LayerKind::kQuotaDir));
  if (members == 0) return Status();  // a layer never made
  if (layer.kind == LayerKind::kQuotaDir) {
    if (!Exists(layer.path)) return Status::Error("no layer directory " + layer.path + " to unpack into", ENOENT);
    const std::string work = layer.path + "/work";
    if (mkdir(work.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoError("mkdir " + work);
  } else {
    RETURN_IF_ERROR(MakeDirs(member.dir, 0700));
    if (unlink(layer.path.c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink " + layer.path);
  }
  // As root, tar keeps the owners and modes as stored; --delay-directory-restore sets a
  // directory's mode after its entries are in (a read-only directory still gets them).
  Status unpacked = RunProgram({kTar, "--extract", "--file=" + tar_path, "--xattrs", "--xattrs-include=*", "--acls",
                                "--numeric-owner", "--same-owner", "--same-permissions",
                                "--delay-directory-restore", "--directory=" + member.dir, "--", member.name});
  if (unpacked.ok()) {
    UniqueFd fd(open(member.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd || syncfs(fd.get()) != 0) unpacked = ErrnoError("sync " + member.dir);
  }
  if (!unpacked.ok()) {
    return Status::Error("unpacking a moved layer into " + layer.path + ": " + unpacked.message(),
                         unpacked.error_number());
  }
  return Status();
}

}  // namespace corral::supervisor
