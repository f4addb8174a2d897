#include "supervisor/sandboxes/trust_bundle.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/file_util.h"
#include "common/log.h"
#include "rootfs/scoped_path.h"

namespace corral::supervisor {
namespace {

constexpr size_t kMaxBundleBytes = 8u << 20;
constexpr char kBundleInLayer[] = "etc/ssl/certs/ca-certificates.crt";

// A regular file's whole text from an fd, at most kMaxBundleBytes.
StatusOr<std::string> ReadBounded(int fd, const std::string& what) {
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoError("stat " + what);
  if (!S_ISREG(st.st_mode)) return std::string();
  if (static_cast<uint64_t>(st.st_size) > kMaxBundleBytes) {
    return Status::Error(what + " is larger than " + std::to_string(kMaxBundleBytes >> 20) + " MiB", EFBIG);
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = pread(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("read " + what);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  return text;
}

}  // namespace

StatusOr<std::string> ImageTrustBundle(const std::vector<std::string>& layers) {
  for (const std::string& layer : layers) {
    UniqueFd root(open(layer.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root.valid()) return ErrnoError("open layer " + layer);
    // Links on the way resolve inside the layer (nothing in it leads out), and a final one is not
    // followed: a layer is the image's, and a link in it could name any file of the host.
    UniqueFd node = rootfs::OpenInRoot(root.get(), kBundleInLayer, O_PATH | O_NOFOLLOW);
    if (!node.valid()) {
      if (errno == ENOENT || errno == ENOTDIR) continue;
      return ErrnoError(std::string("open ") + kBundleInLayer + " in layer " + layer);
    }
    struct stat st;
    if (fstat(node.get(), &st) != 0) return ErrnoError("stat the bundle in layer " + layer);
    // A whiteout (a 0/0 character device) deletes the file of the layers below; a symlink or
    // anything else but a file: this image keeps its bundle in a way not read here.
    if (!S_ISREG(st.st_mode)) return std::string();
    UniqueFd fd = rootfs::ReopenNode(node.get(), O_RDONLY);
    if (!fd.valid()) return ErrnoError(std::string("open ") + kBundleInLayer + " in layer " + layer);
    return ReadBounded(fd.get(), std::string(kBundleInLayer) + " in layer " + layer);
  }
  return std::string();
}

std::string TrustBundles::Path(const std::string& id) const { return run_dir_ + "/trust/" + id + ".pem"; }

StatusOr<std::vector<isolation::BindMount>> TrustBundles::Prepare(const std::string& id,
                                                                  const std::vector<std::string>& image_layers) const {
  std::string bundle;
  if (image_layers.empty()) {
    UniqueFd fd(open(kSystemTrustBundle, O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (fd.valid()) {
      ASSIGN_OR_RETURN(bundle, ReadBounded(fd.get(), kSystemTrustBundle));
    }
  } else {
    ASSIGN_OR_RETURN(bundle, ImageTrustBundle(image_layers));
  }
  if (!bundle.empty() && bundle.back() != '\n') bundle += '\n';
  bundle += ca_pem_;
  // Readable by the sandboxes' uids (the bind is made in the sandbox's user namespace); what it
  // holds is public.
  RETURN_IF_ERROR(MakeDirs(run_dir_ + "/trust", 0711));
  if (chmod((run_dir_ + "/trust").c_str(), 0711) != 0) return ErrnoError("chmod " + run_dir_ + "/trust");
  RETURN_IF_ERROR(WriteNewFile(Path(id), bundle, 0644));
  return std::vector<isolation::BindMount>{
      isolation::BindMount{Path(id), kSystemTrustBundle, /*read_only=*/true, /*if_exists=*/true},
      isolation::BindMount{Path(id), kTrustBundleInSandbox, /*read_only=*/true}};
}

void TrustBundles::Remove(const std::string& id) const {
  if (unlink(Path(id).c_str()) != 0 && errno != ENOENT) {
    LogWarn("sandbox", "cannot remove a trust bundle", {{"sandbox", id}, {"error", strerror(errno)}});
  }
}

bool TrustBundles::Bound(const std::string& id) const {
  struct stat st;
  return stat(Path(id).c_str(), &st) == 0;
}

std::vector<std::string> TrustBundles::Environment() {
  const std::string path = kTrustBundleInSandbox;
  return {"SSL_CERT_FILE=" + path,  "NODE_EXTRA_CA_CERTS=" + path, "GIT_SSL_CAINFO=" + path,
          "CURL_CA_BUNDLE=" + path, "REQUESTS_CA_BUNDLE=" + path,  "PIP_CERT=" + path};
}

}  // namespace corral::supervisor
