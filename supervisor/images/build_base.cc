// ImageBuilder::From: the base image of a build, and debian:bookworm made by mmdebstrap when the
// host has no image of that name.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include "common/file_util.h"
#include "common/sha256.h"
#include "common/unique_fd.h"
#include "rootfs/image_ref.h"
#include "supervisor/images/host_program.h"
#include "supervisor/images/image_build.h"
#include "supervisor/images/layer_capture.h"

namespace corral::supervisor {
namespace {

constexpr char kBookworm[] = "debian:bookworm";

// mmdebstrap downloads and installs a Debian: minutes from a near mirror, never this long.
constexpr std::chrono::minutes kMmdebstrapTimeout{30};

// Runs `words` (argv[0] absolute) with its stdout and stderr going to `output`, killed (its whole
// process group) past `timeout` or once `stop` is true; the exit status.
StatusOr<int> RunProgram(std::vector<std::string> words, const std::function<void(std::string_view)>& output,
                         std::chrono::milliseconds timeout, const std::atomic<bool>* stop) {
  return RunHostProgram(
      {std::move(words), {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", "HOME=/root"}, timeout, stop}, output);
}

// The host's bookworm mirror, as apt knows it.
StatusOr<std::string> BookwormMirror() {
  std::string listing;
  ASSIGN_OR_RETURN(int code, RunProgram({"/usr/bin/apt-get", "indextargets", "--format", "$(REPO_URI) $(RELEASE)"},
                                        [&](std::string_view text) { listing += text; }, std::chrono::seconds(60),
                                        nullptr));
  std::istringstream lines(listing);
  std::string uri, release;
  while (code == 0 && lines >> uri >> release) {
    if (release == "bookworm") return uri;
  }
  return Status::Error("FROM debian:bookworm: no Debian bookworm mirror in the host's apt configuration", ENOENT);
}

}  // namespace

Status ImageBuilder::From(const std::string& from, State& state, const std::string& work, const BuildLog& log) {
  if (from == "scratch") {
    state.key = Sha256Hex("FROM scratch");
    return Status();
  }
  auto base = images_.Get(from);
  auto ref = rootfs::ParseImageRef(from);
  if (!base.ok() && base.status().error_number() == ENOENT && ref.ok() && ref->Name() == kBookworm) {
    base = Bookworm(work, log);
  }
  if (!base.ok()) return Status::Error("FROM " + from + ": " + base.status().message(), base.status().error_number());
  state.config = base->config;
  for (const std::string& diff_id : base->layers) state.layers.push_back({diff_id, 0});
  state.image = base->digest;
  state.key = Sha256Hex("FROM " + base->digest);
  return Status();
}

StatusOr<ImageRecord> ImageBuilder::Bookworm(const std::string& work, const BuildLog& log) {
  ASSIGN_OR_RETURN(std::string mirror, BookwormMirror());
  log("no image debian:bookworm: mmdebstrap --variant=minbase bookworm from " + mirror + "\n");
  const std::string root = work + "/bookworm";
  ASSIGN_OR_RETURN(int code, RunProgram({"/usr/bin/mmdebstrap", "--variant=minbase", "--mode=root", "bookworm", root,
                                         mirror},
                                        log, kMmdebstrapTimeout, &stopping_));
  if (code != 0) return Status::Error("mmdebstrap exited " + std::to_string(code) + " (its output is in the log)", EIO);
  // An image has an empty /dev (each sandbox mounts its own); layers refuse device nodes.
  RETURN_IF_ERROR(RemoveTree(root + "/dev"));
  RETURN_IF_ERROR(MakeDirs(root + "/dev", 0755));
  const std::string tar = work + "/bookworm.tar";
  ASSIGN_OR_RETURN(CaptureCounts counts, WriteLayerTar(root, tar, 0));
  ASSIGN_OR_RETURN(ImageService::AddedLayer layer, images_.AddLayerFromTar(tar));
  (void)unlink(tar.c_str());
  (void)RemoveTree(root);
  rootfs::ImageConfig config;
  config.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
  log("debian:bookworm: " + std::to_string(counts.entries) + " entries, " + std::to_string(counts.bytes) + " bytes\n");
  return images_.AddImage(config, {layer}, kBookworm, false, "build mmdebstrap");
}

}  // namespace corral::supervisor
