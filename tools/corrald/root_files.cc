#include "tools/corrald/root_files.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "common/file_util.h"
#include "common/unique_fd.h"

namespace corral {

StatusOr<std::string> ReadRootSecretFile(const std::string& key, const std::string& path) {
  UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (!fd) return ErrnoError(key + ": open " + path);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoError(key + ": stat " + path);
  if (!S_ISREG(st.st_mode)) return Status::Error(key + ": " + path + " is not a regular file");
  if ((st.st_mode & 077) != 0 || st.st_uid != 0) {
    return Status::Error(key + ": " + path + " must belong to root and be readable by it alone "
                         "(chown root " + path + "; chmod 600 " + path + ")");
  }
  auto text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  std::string secret = *text;
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r' || secret.back() == ' ')) secret.pop_back();
  return secret;
}

StatusOr<supervisor::RelayConfig> RelayConfigOf(const supervisor::DaemonConfig& config) {
  supervisor::RelayConfig relay = config.relay;
  if (relay.api_key_file.empty()) return relay;
  const std::string& path = relay.api_key_file;
  ASSIGN_OR_RETURN(std::string key, ReadRootSecretFile("relay.api_key_file", path));
  if (key.empty() || key.find_first_of(" \t\r\n") != std::string::npos) {
    return Status::Error("relay.api_key_file: " + path + " must hold the key alone, on one line");
  }
  relay.api_key = std::move(key);
  return relay;
}

}  // namespace corral
