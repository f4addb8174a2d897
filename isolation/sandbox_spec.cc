#include "isolation/sandbox_spec.h"

#include <arpa/inet.h>
#include <limits.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <set>

#include "isolation/launcher.h"

namespace corral::isolation {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kDefaultScratchBytes = 1ull << 30;
constexpr char kDefaultPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
// corral-init's own environment in kControl (each command brings its own).
constexpr char kControlInitPath[] = "PATH=/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

// Host trees a bind may never expose: the sandbox gets its own /proc, /dev and (read-only) /sys.
bool UnderKernelTree(const std::string& path) {
  for (const char* tree : {"/proc", "/sys", "/dev"}) {
    std::string t(tree);
    if (path == t || path.rfind(t + "/", 0) == 0) return true;
  }
  return false;
}

bool ValidEnvKey(const std::string& key) {
  if (key.empty()) return false;
  for (char c : key) {
    if (!(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))) {
      return false;
    }
  }
  return !(key[0] >= '0' && key[0] <= '9');
}

// A host path the sandbox's own files live at (its workspace, its layer image): normalized,
// neither / nor under the host's /proc, /sys or /dev. The error names `field`.
StatusOr<std::string> HostPath(const std::string& field, const std::string& path) {
  auto normalized = NormalizeAbsolutePath(path);
  if (!normalized.ok()) return Status::Error(field + ": " + normalized.status().message());
  if (UnderKernelTree(*normalized) || *normalized == "/") {
    return Status::Error(field + ": '" + path + "' is not allowed");
  }
  return normalized;
}

// Real path of an existing host path, or an error naming `field`.
StatusOr<std::string> RealPath(const std::string& field, const std::string& path) {
  std::unique_ptr<char, decltype(&free)> real(realpath(path.c_str(), nullptr), &free);
  if (!real) return ErrnoError(field + ": " + path);
  return std::string(real.get());
}

}  // namespace

StatusOr<std::string> NormalizeAbsolutePath(const std::string& path) {
  if (path.empty() || path[0] != '/') return Status::Error("'" + path + "' is not an absolute path");
  if (path.find('\0') != std::string::npos) return Status::Error("path contains a NUL byte");
  std::string out;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;
    size_t end = path.find('/', i);
    if (end == std::string::npos) end = path.size();
    std::string part = path.substr(i, end - i);
    i = end;
    if (part.empty() || part == ".") continue;
    if (part == "..") return Status::Error("'" + path + "' contains '..'");
    out += "/" + part;
  }
  if (out.empty()) out = "/";
  if (out.size() >= PATH_MAX) return Status::Error("path is longer than PATH_MAX");
  return out;
}

uint64_t SandboxSpec::scratch_bytes() const {
  if (scratch_bytes_) return *scratch_bytes_;
  return limits_.disk_bytes.value_or(kDefaultScratchBytes);
}

SandboxSpecBuilder SandboxSpecBuilder::From(const SandboxSpec& spec) {
  SandboxSpecBuilder builder;
  builder.spec_ = spec;
  return builder;
}

void SandboxSpecBuilder::Fail(std::string message) {
  if (!failed()) first_error_ = Status::Error(std::move(message));
}

SandboxSpecBuilder& SandboxSpecBuilder::SetImage(const std::string& image) {
  if (image == kHostImage) {
    spec_.image_layers_.clear();
    return *this;
  }
  spec_.image_layers_.clear();
  return AddImageLayer(image);
}

SandboxSpecBuilder& SandboxSpecBuilder::SetImageLayers(std::vector<std::string> layers) {
  spec_.image_layers_.clear();
  if (layers.empty()) Fail("image: an image needs at least one layer");
  for (const std::string& layer : layers) AddImageLayer(layer);
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::AddImageLayer(const std::string& layer) {
  struct stat st;
  if (spec_.image_layers_.size() >= rootfs::kMaxImageLayers) {
    Fail("image: more than " + std::to_string(rootfs::kMaxImageLayers) + " layers");
  } else if (layer.empty() || layer[0] != '/') {
    Fail("image: must be 'host' or an absolute directory path, got '" + layer + "'");
  } else if (lstat(layer.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    Fail("image: '" + layer + "' is not a directory");
  } else {
    auto real = RealPath("image", layer);
    if (!real.ok()) {
      Fail(real.status().ToString());
    } else if (*real != layer) {
      Fail("image: '" + layer + "' goes through a symlink (real path " + *real + ")");
    } else if (*real == "/") {
      Fail("image: the host root cannot be an image");
    } else {
      spec_.image_layers_.push_back(layer);
    }
  }
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetWorkspace(const std::string& dir) {
  auto normalized = HostPath("workspace", dir);
  if (!normalized.ok()) {
    Fail(normalized.status().message());
  } else if (normalized->find_first_of(",:\\") != std::string::npos) {
    Fail("workspace: '" + dir + "' contains ',', ':' or '\\' (overlayfs cannot use it)");
  } else {
    spec_.workspace_ = *normalized;
  }
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::AddBind(const std::string& text) {
  BindMount bind;
  size_t first = text.find(':');
  if (first == std::string::npos) {
    Fail("bind: expected SRC:DST[:ro], got '" + text + "'");
    return *this;
  }
  bind.source = text.substr(0, first);
  std::string rest = text.substr(first + 1);
  size_t second = rest.find(':');
  if (second != std::string::npos) {
    std::string mode = rest.substr(second + 1);
    rest = rest.substr(0, second);
    if (mode == "ro") {
      bind.read_only = true;
    } else if (mode != "rw") {
      Fail("bind: unknown mode '" + mode + "' in '" + text + "' (expected ro or rw)");
      return *this;
    }
  }
  bind.target = rest;
  return AddBind(std::move(bind));
}

SandboxSpecBuilder& SandboxSpecBuilder::AddBind(BindMount bind) {
  auto source = NormalizeAbsolutePath(bind.source);
  auto target = NormalizeAbsolutePath(bind.target);
  if (!source.ok()) {
    Fail("bind: source " + source.status().message());
    return *this;
  }
  if (!target.ok()) {
    Fail("bind: target " + target.status().message());
    return *this;
  }
  struct stat st;
  if (lstat(source->c_str(), &st) != 0) {
    Fail("bind: source '" + *source + "' does not exist");
    return *this;
  }
  auto real = RealPath("bind", *source);
  if (!real.ok()) {
    Fail(real.status().ToString());
    return *this;
  }
  if (*real != *source) {
    Fail("bind: source '" + *source + "' goes through a symlink (real path " + *real + ")");
  } else if (UnderKernelTree(*real) || *real == "/") {
    Fail("bind: source '" + *source + "' is not allowed (host /, /proc, /sys and /dev are never bound)");
  } else if (UnderKernelTree(*target) || *target == "/") {
    Fail("bind: target '" + *target + "' is not allowed (/, /proc, /sys, /dev belong to the sandbox)");
  } else if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
    Fail("bind: source '" + *source + "' must be a directory or a regular file");
  } else {
    spec_.binds_.push_back({*real, *target, bind.read_only, bind.if_exists});
  }
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::AddEnv(const std::string& assignment) {
  env_set_ = true;
  size_t eq = assignment.find('=');
  std::string key = assignment.substr(0, eq);
  if (eq == std::string::npos || !ValidEnvKey(key)) {
    Fail("env: expected KEY=VALUE with KEY made of letters, digits and '_', got '" + assignment + "'");
    return *this;
  }
  auto& env = spec_.env_;
  env.erase(std::remove_if(env.begin(), env.end(),
                           [&](const std::string& e) { return e.compare(0, eq + 1, key + "=") == 0; }),
            env.end());
  env.push_back(assignment);
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetCwd(const std::string& dir) {
  cwd_set_ = true;
  auto normalized = NormalizeAbsolutePath(dir);
  if (!normalized.ok()) {
    Fail("cwd: " + normalized.status().message());
  } else {
    spec_.cwd_ = *normalized;
  }
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetHostname(const std::string& name) {
  bool valid = !name.empty() && name.size() <= 63 && name.front() != '-' && name.back() != '-';
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '.')) {
      valid = false;
    }
  }
  if (!valid) {
    Fail("hostname: '" + name + "' is not a valid host name (letters, digits, '-', '.'; 1-63)");
  } else {
    spec_.hostname_ = name;
  }
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetUser(const std::string& user) {
  user_set_ = true;
  if (user == "agent") {
    spec_.uid_ = kAgentUid;
    spec_.gid_ = kAgentGid;
  } else if (user == "root") {
    spec_.uid_ = 0;
    spec_.gid_ = 0;
  } else {
    Fail("user: expected 'root' or 'agent', got '" + user + "'");
  }
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetCommand(std::vector<std::string> argv) {
  if (argv.empty() || argv[0].empty()) {
    Fail("command: missing (put it after --)");
  } else {
    for (const auto& arg : argv) {
      if (arg.find('\0') != std::string::npos) Fail("command: an argument contains a NUL byte");
    }
    spec_.command_ = std::move(argv);
  }
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetLimit(std::optional<uint64_t> ResourceLimits::*field, uint64_t value,
                                                 const LimitBounds& bounds) {
  if (value < bounds.min) Fail(bounds.below);
  else if (value > bounds.max) Fail(bounds.above);
  else spec_.limits_.*field = value;
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetMemoryLimit(uint64_t bytes) {
  return SetLimit(&ResourceLimits::memory_bytes, bytes, {kMiB, "memory: must be at least 1M"});
}

SandboxSpecBuilder& SandboxSpecBuilder::SetCpuLimit(uint64_t millicores) {
  // cpu.max needs a quota of at least 1 ms per 100 ms period.
  return SetLimit(&ResourceLimits::cpu_millicores, millicores,
                  {10, "cpus: must be at least 0.01", 1024 * 1000, "cpus: must be at most 1024"});
}

SandboxSpecBuilder& SandboxSpecBuilder::SetPidsLimit(uint64_t pids) {
  // corral-init and the command itself are two processes.
  return SetLimit(&ResourceLimits::pids, pids,
                  {2, "pids: must be at least 2 (corral-init and the command)", 4194304,
                   "pids: must be at most 4194304"});
}

SandboxSpecBuilder& SandboxSpecBuilder::SetWallTimeLimit(uint64_t micros) {
  return SetLimit(&ResourceLimits::wall_time_us, micros, {1, "wall-time: must be greater than 0"});
}

SandboxSpecBuilder& SandboxSpecBuilder::SetCpuTimeLimit(uint64_t micros) {
  return SetLimit(&ResourceLimits::cpu_time_us, micros, {1, "cpu-time: must be greater than 0"});
}

SandboxSpecBuilder& SandboxSpecBuilder::SetDiskLimit(uint64_t bytes) {
  return SetLimit(&ResourceLimits::disk_bytes, bytes, {kMiB, "disk: must be at least 1M"});
}

SandboxSpecBuilder& SandboxSpecBuilder::SetNofileLimit(uint64_t files) {
  return SetLimit(&ResourceLimits::nofile, files,
                  {8, "nofile: must be at least 8", 1048576, "nofile: must be at most 1048576 (fs.nr_open)"});
}

SandboxSpecBuilder& SandboxSpecBuilder::SetScratchLimit(uint64_t bytes) {
  if (bytes < kMiB) Fail("scratch: must be at least 1M");
  else spec_.scratch_bytes_ = bytes;
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetInitMode(InitMode mode) {
  spec_.init_mode_ = mode;
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetHostUidBase(uid_t base) {
  // The last range would reach uid -1 ((uid_t)-1 means "no change" to chown and setresuid).
  constexpr uint64_t kLastBase = 0xFFFFFFFFull - 2 * static_cast<uint64_t>(kIdRangeSize) + 1;
  if (base % kIdRangeSize != 0) Fail("host uid base: " + std::to_string(base) + " is not a multiple of 65536");
  else if (base < kIdRangeSize) Fail("host uid base: the host's own first range (0-65535) is not a sandbox's");
  else if (base > kLastBase) Fail("host uid base: " + std::to_string(base) + " is too high (its range reaches uid -1)");
  else spec_.host_uid_base_ = base;
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetLayerImage(const std::string& path) {
  auto normalized = HostPath("layer image", path);
  if (!normalized.ok()) Fail(normalized.status().message());
  else spec_.layer_image_ = *normalized;
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetLoopbackPorts(std::vector<uint16_t> ports) {
  const std::set<uint16_t> distinct(ports.begin(), ports.end());
  if (ports.size() > kMaxLoopbackListeners) {
    Fail("loopback ports: at most " + std::to_string(kMaxLoopbackListeners));
  } else if (distinct.size() != ports.size() || distinct.count(0) != 0) {
    Fail("loopback ports: each must be a distinct port other than 0");
  } else {
    spec_.loopback_ports_ = std::move(ports);
  }
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::AllowFullNetwork(UnsafeFullNetwork, std::vector<std::string> nameservers) {
  for (const std::string& server : nameservers) {
    unsigned char address[16];
    if (inet_pton(AF_INET, server.c_str(), address) != 1 && inet_pton(AF_INET6, server.c_str(), address) != 1) {
      Fail("nameserver: '" + server + "' is not an IPv4 or IPv6 address");
      return *this;
    }
  }
  spec_.full_network_ = true;
  spec_.nameservers_ = std::move(nameservers);
  return *this;
}

// kControl: init's own identity and environment; what a command would set comes with each request.
Status SandboxSpecBuilder::BuildControl(SandboxSpec& spec) const {
  if (!spec.command_.empty()) return Status::Error("command: a control-mode sandbox's commands come with their requests");
  if (user_set_ || cwd_set_ || env_set_) {
    return Status::Error(std::string(user_set_ ? "user" : cwd_set_ ? "cwd" : "env") +
                         ": a control-mode sandbox's commands bring their own");
  }
  spec.uid_ = 0;
  spec.gid_ = 0;
  spec.cwd_ = "/";
  spec.env_ = {kControlInitPath};
  return Status();
}

StatusOr<SandboxSpec> SandboxSpecBuilder::Build() {
  const bool control = spec_.init_mode_ == InitMode::kControl;
  if (!control && spec_.command_.empty()) Fail("command: missing (put it after --)");
  if (!control && !spec_.loopback_ports_.empty()) Fail("loopback ports: only a control-mode sandbox hands them over");
  if (failed()) return first_error_;
  SandboxSpec spec = spec_;
  if (control) {
    RETURN_IF_ERROR(BuildControl(spec));
    return spec;
  }
  const bool root = spec.uid_ == 0;
  const std::string home = root ? "/root" : "/home/agent";
  auto has_key = [&](const std::string& key) {
    return std::any_of(spec.env_.begin(), spec.env_.end(),
                       [&](const std::string& e) { return e.rfind(key + "=", 0) == 0; });
  };
  for (auto [key, value] : {std::pair<std::string, std::string>{"PATH", kDefaultPath},
                            {"HOME", home},
                            {"USER", root ? "root" : "agent"},
                            {"LOGNAME", root ? "root" : "agent"},
                            {"HOSTNAME", spec.hostname_}}) {
    if (!has_key(key)) spec.env_.push_back(key + "=" + value);
  }
  if (spec.cwd_.empty()) spec.cwd_ = home;
  return spec;
}

}  // namespace corral::isolation
