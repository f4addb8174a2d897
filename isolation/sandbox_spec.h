// SandboxSpec: the immutable description of one sandbox, made only by SandboxSpecBuilder.
//
// The builder validates every field as it is set, records the first error, and rejects
// conflicting fields in Build(), so a spec that exists is one the launcher can run: nothing is
// discovered to be wrong after clone. Error messages start with the field's name ("memory: ...")
// so a front end can point at the option that caused them.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "isolation/resource_limits.h"

namespace corral::isolation {

// The built-in image: the host's /usr, /bin, /lib*, /sbin read-only and a generated /etc.
inline constexpr char kHostImage[] = "host";

inline constexpr uid_t kAgentUid = 1000;
inline constexpr gid_t kAgentGid = 1000;

struct BindMount {
  std::string source;  // absolute host path, no symlink components
  std::string target;  // absolute path inside the sandbox, normalized
  bool read_only = false;
};

class SandboxSpec {
 public:
  const std::string& image() const { return image_; }  // kHostImage or an absolute directory
  bool host_image() const { return image_ == kHostImage; }
  const std::optional<std::string>& workspace() const { return workspace_; }
  const std::vector<BindMount>& binds() const { return binds_; }
  const std::vector<std::string>& env() const { return env_; }  // "KEY=VALUE", no duplicates
  const std::string& cwd() const { return cwd_; }
  const std::string& hostname() const { return hostname_; }
  uid_t uid() const { return uid_; }  // inside the sandbox
  gid_t gid() const { return gid_; }
  const std::vector<std::string>& command() const { return command_; }
  const ResourceLimits& limits() const { return limits_; }

  // Size of the tmpfs holding the writable layer when there is no workspace, and of /tmp.
  uint64_t scratch_bytes() const;

 private:
  friend class SandboxSpecBuilder;
  SandboxSpec() = default;

  std::string image_ = kHostImage;
  std::optional<std::string> workspace_;
  std::vector<BindMount> binds_;
  std::vector<std::string> env_;
  std::string cwd_;
  std::string hostname_ = "corral";
  uid_t uid_ = kAgentUid;
  gid_t gid_ = kAgentGid;
  std::vector<std::string> command_;
  ResourceLimits limits_;
};

class SandboxSpecBuilder {
 public:
  SandboxSpecBuilder() = default;

  // "host" or an existing directory (resolved to its real path; a symlink is refused).
  SandboxSpecBuilder& SetImage(const std::string& image);
  // A directory that holds the persistent writable layer (created if missing).
  SandboxSpecBuilder& SetWorkspace(const std::string& dir);
  // SRC:DST[:ro]. SRC must exist and contain no symlink; neither side may be (under) the host's
  // /proc, /sys or /dev; DST must be absolute and normalized.
  SandboxSpecBuilder& AddBind(const std::string& text);
  SandboxSpecBuilder& AddBind(BindMount bind);
  // KEY=VALUE; a later value for the same key replaces the earlier one.
  SandboxSpecBuilder& AddEnv(const std::string& assignment);
  SandboxSpecBuilder& SetCwd(const std::string& dir);
  SandboxSpecBuilder& SetHostname(const std::string& name);
  // "agent" (uid 1000, the default) or "root" (uid 0 inside, still unprivileged on the host).
  SandboxSpecBuilder& SetUser(const std::string& user);
  SandboxSpecBuilder& SetCommand(std::vector<std::string> argv);

  SandboxSpecBuilder& SetMemoryLimit(uint64_t bytes);
  SandboxSpecBuilder& SetCpuLimit(uint64_t millicores);
  SandboxSpecBuilder& SetPidsLimit(uint64_t pids);
  SandboxSpecBuilder& SetWallTimeLimit(uint64_t micros);
  SandboxSpecBuilder& SetCpuTimeLimit(uint64_t micros);
  SandboxSpecBuilder& SetDiskLimit(uint64_t bytes);
  SandboxSpecBuilder& SetNofileLimit(uint64_t files);

  // The spec, or the first error recorded.
  StatusOr<SandboxSpec> Build();

 private:
  void Fail(std::string message);
  bool failed() const { return !first_error_.ok(); }

  SandboxSpec spec_;
  Status first_error_;
};

// Lexically normalizes an absolute path ("/a//b/./c" -> "/a/b/c"); error on "..", relative
// paths, NUL bytes or a result longer than PATH_MAX.
StatusOr<std::string> NormalizeAbsolutePath(const std::string& path);

}  // namespace corral::isolation
