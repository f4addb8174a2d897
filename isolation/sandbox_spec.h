// SandboxSpec: the immutable description of one sandbox, made only by SandboxSpecBuilder. It is
// the only input of the engine: `corral run` and the daemon's persistent sandboxes both build one
// and hand it to PrepareLaunch (sandbox_launch.h), which turns it into a launch.
//
// The builder validates every field as it is set, records the first error, and rejects
// conflicting fields in Build(), so a spec that exists is one the launcher can run: nothing is
// discovered to be wrong after clone. Error messages start with the field's name ("memory: ...")
// so a front end can point at the option that caused them.
//
// Dangerous options are asked for with a typed token that has to be named where it is used
// (AllowFullNetwork(UnsafeFullNetwork{})); the daemon reaches them only for a request whose
// token has the scope (admission checks it).
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

// How corral-init runs in the sandbox.
enum class InitMode {
  // `corral run`: init runs the spec's command as the spec's user and writes its wait status to
  // fd 3 (a pipe); the sandbox dies with its launcher.
  kCommand,
  // A daemon's persistent sandbox: init runs as root inside, keeps CAP_SETUID, CAP_SETGID and
  // CAP_KILL in the sandbox's own user namespace, serves the control socket at fd 3 and starts
  // each command as its request says; the sandbox outlives its launcher. The spec has no
  // command, user, cwd or environment (init's own environment is only PATH).
  kControl,
};

// The token that asks for the full network: the sandbox gets an interface on the host's
// network (attached by the daemon after start) and /etc/resolv.conf names the nameservers.
// Unsafe: written out where it is asked for; the API reaches it only with the scope.
struct UnsafeFullNetwork {
  explicit UnsafeFullNetwork() = default;
};

struct BindMount {
  std::string source;  // absolute host path, no symlink components
  std::string target;  // absolute path inside the sandbox, normalized
  bool read_only = false;
  bool if_exists = false;  // only over a target the root has (never made); skipped otherwise
};

class SandboxSpec {
 public:
  // The image's layer directories, top first; none: the host image.
  const std::vector<std::string>& image_layers() const { return image_layers_; }
  bool host_image() const { return image_layers_.empty(); }
  const std::optional<std::string>& workspace() const { return workspace_; }
  const std::vector<BindMount>& binds() const { return binds_; }
  const std::vector<std::string>& env() const { return env_; }  // "KEY=VALUE", no duplicates
  const std::string& cwd() const { return cwd_; }
  const std::string& hostname() const { return hostname_; }
  uid_t uid() const { return uid_; }  // inside the sandbox
  gid_t gid() const { return gid_; }
  const std::vector<std::string>& command() const { return command_; }
  const ResourceLimits& limits() const { return limits_; }
  InitMode init_mode() const { return init_mode_; }
  // The host uid (and gid) of root inside: the first of the sandbox's 65536 host ids. Unset
  // until the host has allocated the range (PrepareLaunch needs it).
  const std::optional<uid_t>& host_uid_base() const { return host_uid_base_; }
  // An ext4 image file holding the persistent writable layer (instead of the workspace's
  // directories or the scratch tmpfs): mounted from a loop device.
  const std::optional<std::string>& layer_image() const { return layer_image_; }
  // TCP ports where the sandbox's 127.0.0.1 listens for the daemon's services (kControl only).
  const std::vector<uint16_t>& loopback_ports() const { return loopback_ports_; }
  bool full_network() const { return full_network_; }
  // /etc/resolv.conf's nameservers (full network only); empty: names from /etc/hosts only.
  const std::vector<std::string>& nameservers() const { return nameservers_; }

  // Size of the tmpfs holding the writable layer when there is no workspace, and of /tmp: the
  // scratch limit when set, else the disk limit, else 1 GiB.
  uint64_t scratch_bytes() const;

 private:
  friend class SandboxSpecBuilder;
  SandboxSpec() = default;

  std::vector<std::string> image_layers_;
  std::optional<std::string> workspace_;
  std::vector<BindMount> binds_;
  std::vector<std::string> env_;
  std::string cwd_;
  std::string hostname_ = "corral";
  uid_t uid_ = kAgentUid;
  gid_t gid_ = kAgentGid;
  std::vector<std::string> command_;
  ResourceLimits limits_;
  InitMode init_mode_ = InitMode::kCommand;
  std::optional<uid_t> host_uid_base_;
  std::optional<std::string> layer_image_;
  std::vector<uint16_t> loopback_ports_;
  bool full_network_ = false;
  std::vector<std::string> nameservers_;
  std::optional<uint64_t> scratch_bytes_;
};

class SandboxSpecBuilder {
 public:
  SandboxSpecBuilder() = default;
  // A builder that starts from a built spec: to complete it with what the host allocated for
  // it (its uid range, its layer image) once that is known.
  static SandboxSpecBuilder From(const SandboxSpec& spec);

  // "host" or an existing directory: an image of that one layer (`corral run --image DIR`).
  SandboxSpecBuilder& SetImage(const std::string& image);
  // An image's layer directories, top first (at most rootfs::kMaxImageLayers), each absolute,
  // existing and its own real path. The files' ids on disk are the image's: they are shown
  // shifted into the sandbox's range (rootfs/mount_plan.h, isolation/idmap_userns.h).
  SandboxSpecBuilder& SetImageLayers(std::vector<std::string> layers);
  // One more layer below those set so far.
  SandboxSpecBuilder& AddImageLayer(const std::string& layer);
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
  // The scratch tmpfs (and /tmp) when it should be smaller than the disk limit; at least 1M.
  SandboxSpecBuilder& SetScratchLimit(uint64_t bytes);

  SandboxSpecBuilder& SetInitMode(InitMode mode);
  // A multiple of 65536, neither the host's own first range nor one that reaches uid -1.
  SandboxSpecBuilder& SetHostUidBase(uid_t base);
  // An absolute path (the file need not exist yet: the host makes it).
  SandboxSpecBuilder& SetLayerImage(const std::string& path);
  // At most kMaxLoopbackListeners distinct ports, none 0; kControl only.
  SandboxSpecBuilder& SetLoopbackPorts(std::vector<uint16_t> ports);
  // Each nameserver an IPv4 or IPv6 address.
  SandboxSpecBuilder& AllowFullNetwork(UnsafeFullNetwork, std::vector<std::string> nameservers = {});

  // The spec, or the first error recorded.
  StatusOr<SandboxSpec> Build();

 private:
  // A limit's accepted range and what the builder says outside it.
  struct LimitBounds {
    uint64_t min;
    const char* below;
    uint64_t max = UINT64_MAX;
    const char* above = "";
  };
  SandboxSpecBuilder& SetLimit(std::optional<uint64_t> ResourceLimits::*field, uint64_t value,
                               const LimitBounds& bounds);
  Status BuildControl(SandboxSpec& spec) const;
  void Fail(std::string message);
  bool failed() const { return !first_error_.ok(); }

  SandboxSpec spec_;
  Status first_error_;
  // What kControl's spec may not have (its commands bring their own): set explicitly here.
  bool user_set_ = false;
  bool cwd_set_ = false;
  bool env_set_ = false;
};

// Lexically normalizes an absolute path ("/a//b/./c" -> "/a/b/c"); error on "..", relative
// paths, NUL bytes or a result longer than PATH_MAX.
StatusOr<std::string> NormalizeAbsolutePath(const std::string& path);

}  // namespace corral::isolation
