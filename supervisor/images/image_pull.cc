// ImageService::Pull: `skopeo copy docker://REF oci:DIR:TAG` into a work directory, then the
// import of that layout. Credentials of a configured registry go to skopeo in an auth file of
// the work directory (0600, under images/tmp which is 0700), never on its command line (which
// every host user can read in /proc) and never into a log.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <nlohmann/json.hpp>

#include "common/base64.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/unique_fd.h"
#include "rootfs/image_ref.h"
#include "supervisor/images/host_program.h"
#include "supervisor/images/image_service.h"

namespace corral::supervisor {
namespace {

constexpr auto kPullTimeout = std::chrono::minutes(30);
constexpr size_t kMaxErrorBytes = 4096;

// What skopeo's complaint means for the caller: the registry does not have it (ENOENT), will not
// give it to these credentials (EPERM), or could not be reached or answer (EAGAIN).
int ErrnoOfSkopeo(const std::string& err) {
  for (const char* missing : {"manifest unknown", "name unknown", "not found"}) {
    if (err.find(missing) != std::string::npos) return ENOENT;
  }
  for (const char* denied : {"unauthorized", "authentication required", "denied", "401"}) {
    if (err.find(denied) != std::string::npos) return EPERM;
  }
  return EAGAIN;
}

// Runs skopeo with `args`; its output (the first kMaxErrorBytes) in the error.
Status RunSkopeo(const std::string& skopeo, const std::vector<std::string>& args, const std::string& home) {
  std::vector<std::string> argv = {skopeo};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string err;
  auto status = RunHostProgram({argv, {"PATH=/usr/bin:/bin", "HOME=" + home, "LC_ALL=C", "TMPDIR=" + home}, kPullTimeout},
                               [&err](std::string_view text) {
                                 if (err.size() < kMaxErrorBytes) err.append(text.substr(0, kMaxErrorBytes - err.size()));
                               });
  if (!status.ok()) {
    if (status.status().error_number() == ENOENT) {
      return Status::Error("cannot run " + skopeo + " (install skopeo, or set images.skopeo)", ENOENT);
    }
    return status.status();
  }
  if (*status != 0) {
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    return Status::Error("skopeo: " + (err.empty() ? std::string("failed") : err), ErrnoOfSkopeo(err));
  }
  return Status();
}

}  // namespace

StatusOr<ImageRecord> ImageService::Pull(const PullRequest& request) {
  auto ref = rootfs::ParseImageRef(request.ref);
  if (!ref.ok()) return Status::Error("pull " + request.ref + ": " + ref.status().message(), EINVAL);
  if (ref->registry.empty()) {
    return Status::Error("pull " + request.ref + ": name the registry (\"registry.example.com/" + ref->name +
                             "\"); corrald has no default registry",
                         EINVAL);
  }
  std::string name = ref->digest.empty() ? ref->Name() : "";
  if (!request.name.empty()) {
    ASSIGN_OR_RETURN(name, CanonicalName(request.name));
  }
  BusyMark busy(*this);
  if (!name.empty()) {
    RETURN_IF_ERROR(CheckTagFree(name, request.force, ""));
    RETURN_IF_ERROR(busy.Add("name " + name, "image " + name));
  }
  const RegistryConfig* registry = nullptr;
  for (const RegistryConfig& candidate : config_.registries) {
    if (candidate.host == ref->registry) registry = &candidate;
  }
  const std::string work = images_dir_ + "/tmp/" + RandomWorkName();
  RETURN_IF_ERROR(MakeDirs(work, 0700));
  auto pulled = [&]() -> StatusOr<ImageRecord> {
    std::vector<std::string> args = {"--command-timeout", "25m", "copy", "--quiet", "--remove-signatures"};
    if (registry != nullptr && registry->insecure) args.push_back("--src-tls-verify=false");
    if (registry != nullptr && !registry->username.empty()) {
      auto password = ReadFileToString(registry->password_file);
      if (!password.ok()) {
        return Status::Error("registry " + registry->host + ": cannot read its password_file: " +
                                 password.status().message(),
                             EIO);
      }
      std::string secret = *password;
      while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
      nlohmann::json auth = {{"auths", {{registry->host, {{"auth", Base64Encode(registry->username + ":" + secret)}}}}}};
      RETURN_IF_ERROR(WriteNewFile(work + "/auth.json", auth.dump(), 0600));
      args.push_back("--src-authfile=" + work + "/auth.json");
    } else {
      args.push_back("--src-no-creds");
    }
    args.push_back("docker://" + ref->ToString());
    args.push_back("oci:" + work + "/layout:pulled");
    RETURN_IF_ERROR(RunSkopeo(config_.skopeo, args, work).WithContext("pull " + ref->ToString()));
    (void)unlink((work + "/auth.json").c_str());
    return ImportArchive(work + "/layout", work, "pulled", name, request.force, "pull " + ref->ToString(), busy);
  }();
  Status cleaned = RemoveTree(work);
  if (!cleaned.ok()) LogWarn("images", "cannot remove a pull's work directory", {{"error", cleaned.ToString()}});
  return pulled;
}

}  // namespace corral::supervisor
