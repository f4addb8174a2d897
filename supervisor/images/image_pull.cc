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
#include "supervisor/images/image_service.h"

namespace corral::supervisor {
namespace {

constexpr auto kPullTimeout = std::chrono::minutes(30);
constexpr size_t kMaxErrorBytes = 4096;

// In the child, between fork and exec: only async-signal-safe calls on prepared arrays.
[[noreturn]] void ExecSkopeo(const std::vector<char*>& argv, const std::vector<char*>& envp, int err) {
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(err, 2) < 0) _exit(126);
  if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0) {
    for (int fd = 3; fd < 65536; ++fd) (void)close(fd);
  }
  sigset_t all;
  sigemptyset(&all);
  sigprocmask(SIG_SETMASK, &all, nullptr);
  execve(argv[0], argv.data(), envp.data());
  if (argv[0][0] != '/') {
    for (const char* dir : {"/usr/bin/", "/usr/local/bin/", "/bin/"}) {
      char path[4096];
      size_t n = 0;
      for (const char* p = dir; *p != '\0' && n + 1 < sizeof(path); ++p) path[n++] = *p;
      for (const char* p = argv[0]; *p != '\0' && n + 1 < sizeof(path); ++p) path[n++] = *p;
      path[n] = '\0';
      execve(path, argv.data(), envp.data());
    }
  }
  _exit(127);
}

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

// Runs skopeo with `args`; its stderr (the first kMaxErrorBytes) in the error.
Status RunSkopeo(const std::string& skopeo, const std::vector<std::string>& args, const std::string& home) {
  std::vector<std::string> words = {skopeo};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "HOME=" + home, "LC_ALL=C", "TMPDIR=" + home};
  std::vector<char*> envp;
  for (std::string& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return ErrnoError("pipe");
  UniqueFd err_read(pipe_fds[0]), err_write(pipe_fds[1]);
  const pid_t pid = fork();
  if (pid < 0) return ErrnoError("fork for skopeo");
  if (pid == 0) ExecSkopeo(argv, envp, err_write.get());
  err_write.reset();
  std::string err;
  const auto deadline = std::chrono::steady_clock::now() + kPullTimeout;
  bool timed_out = false;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    struct pollfd fd = {err_read.get(), POLLIN, 0};
    int ready = poll(&fd, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    char buffer[4096];
    ssize_t n = read(err_read.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (err.size() < kMaxErrorBytes) err.append(buffer, std::min<size_t>(static_cast<size_t>(n), kMaxErrorBytes - err.size()));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) return Status::Error("skopeo took longer than 30 minutes", ETIMEDOUT);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    return Status::Error("cannot run " + skopeo + " (install skopeo, or set images.skopeo)", ENOENT);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
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
