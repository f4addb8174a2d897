// `corral doctor`'s images check: what sandboxes of images need from the kernel, tried on the
// state dir's own file system, where the layers live.
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/file_util.h"
#include "common/unique_fd.h"
#include "isolation/idmap_userns.h"
#include "supervisor/doctor.h"

namespace corral::supervisor {
namespace {

constexpr uid_t kProbeBase = 1u << 30;

// In a child with a mount namespace of its own: `base`/lower (on the state dir's file system,
// holding a file of uid 0) bound idmapped into a range starting at kProbeBase, as an overlay's
// lower layer, and the file read back through the overlay. 0 or the errno of the step that
// failed (`step` says which, through the pipe).
int Probe(const std::string& base, int step_fd) {
  auto fail = [step_fd](const char* step) {
    const int error = errno != 0 ? errno : EIO;
    (void)!write(step_fd, step, strlen(step));
    return error;
  };
  if (unshare(CLONE_NEWNS) != 0) return fail("unshare(CLONE_NEWNS)");
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return fail("make mounts private");
  const std::string scratch = base + "/t";
  if (mount("tmpfs", scratch.c_str(), "tmpfs", 0, "size=1m") != 0) return fail("mount tmpfs");
  for (const char* sub : {"/l", "/upper", "/work", "/merged"}) {
    if (mkdir((scratch + sub).c_str(), 0755) != 0) return fail("mkdir");
  }
  auto userns = isolation::MakeIdmapUserns(kProbeBase, kProbeBase, 65536);
  if (!userns.ok()) {
    errno = userns.status().error_number();
    return fail("a user namespace for the id mapping");
  }
  UniqueFd tree(static_cast<int>(syscall(SYS_open_tree, AT_FDCWD, (base + "/lower").c_str(),
                                         OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)));
  if (!tree) return fail("open_tree");
  struct mount_attr attr = {};
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY;
  attr.userns_fd = static_cast<uint64_t>(userns->get());
  if (syscall(SYS_mount_setattr, tree.get(), "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0) {
    return fail("an idmapped mount of the state dir's file system (mount_setattr MOUNT_ATTR_IDMAP)");
  }
  if (syscall(SYS_move_mount, tree.get(), "", AT_FDCWD, (scratch + "/l").c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    return fail("move_mount");
  }
  const std::string options = "lowerdir=" + scratch + "/l,upperdir=" + scratch + "/upper,workdir=" + scratch + "/work";
  if (mount("overlay", (scratch + "/merged").c_str(), "overlay", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    return fail("an overlay over an idmapped lower layer (Linux 5.19)");
  }
  struct stat st;
  if (stat((scratch + "/merged/file").c_str(), &st) != 0) return fail("stat through the overlay");
  if (st.st_uid != kProbeBase) {
    errno = EPERM;
    return fail("the id mapping (a file of uid 0 did not show as the mapped uid)");
  }
  return 0;
}

}  // namespace

CheckResult CheckImages(const DoctorOptions& options) {
  const bool skopeo = !FindExecutable(options.skopeo).empty();
  const std::string pulls = skopeo ? "; pulls run " + options.skopeo
                                   : "; " + options.skopeo + " is not installed: `corral image pull` is unavailable "
                                                             "(apt-get install skopeo), imports work";
  if (!options.probe_namespaces) return {"images", CheckLevel::kOk, "not probed" + pulls};
  std::string base = NearestExistingDir(options.state_dir) + "/.corral-doctor-XXXXXX";
  if (mkdtemp(base.data()) == nullptr) {
    return {"images", CheckLevel::kWarn, "cannot make a directory in " + NearestExistingDir(options.state_dir) + ": " +
                                             std::string(strerror(errno)) + ": images were not probed" + pulls};
  }
  int error = mkdir((base + "/t").c_str(), 0755) == 0 && mkdir((base + "/lower").c_str(), 0755) == 0 &&
                      WriteNewFile(base + "/lower/file", "probe", 0644).ok()
                  ? 0
                  : errno;
  int pipe_fds[2] = {-1, -1};
  std::string step = "preparing the probe";
  if (error == 0 && pipe2(pipe_fds, O_CLOEXEC) != 0) error = errno;
  if (error == 0) {
    const pid_t pid = fork();
    if (pid == 0) _exit(Probe(base, pipe_fds[1]) & 0xff);
    close(pipe_fds[1]);
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    error = pid < 0 ? errno : (WIFEXITED(status) ? WEXITSTATUS(status) : EIO);
    char text[256] = {};
    const ssize_t n = read(pipe_fds[0], text, sizeof(text) - 1);
    if (n > 0) step = std::string(text, static_cast<size_t>(n));
    close(pipe_fds[0]);
  }
  (void)RemoveTree(base);
  if (error != 0) {
    return {"images", CheckLevel::kWarn,
            step + ": " + std::string(strerror(error)) + ": sandboxes of images other than host cannot start (they " +
                "need idmapped mounts on the state dir's file system and overlayfs over them: Linux 5.19 with ext4, "
                "xfs, btrfs or tmpfs)" + pulls};
  }
  return {"images", skopeo ? CheckLevel::kOk : CheckLevel::kWarn,
          "idmapped layers under an overlay work on " + NearestExistingDir(options.state_dir) + "'s file system" + pulls};
}

}  // namespace corral::supervisor
