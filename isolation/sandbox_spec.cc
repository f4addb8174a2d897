#include "isolation/sandbox_spec.h"

#include <limits.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

namespace corral::isolation {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kDefaultScratchBytes = 1ull << 30;
constexpr char kDefaultPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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
  return limits_.disk_bytes.value_or(kDefaultScratchBytes);
}

void SandboxSpecBuilder::Fail(std::string message) {
  if (!failed()) first_error_ = Status::Error(std::move(message));
}

SandboxSpecBuilder& SandboxSpecBuilder::SetImage(const std::string& image) {
  if (image == kHostImage) {
    spec_.image_ = kHostImage;
    return *this;
  }
  struct stat st;
  if (image.empty() || image[0] != '/') {
    Fail("image: must be 'host' or an absolute directory path, got '" + image + "'");
  } else if (image.find_first_of(",:\\") != std::string::npos) {
    Fail("image: '" + image + "' contains ',', ':' or '\\' (overlayfs cannot use it)");
  } else if (lstat(image.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    Fail("image: '" + image + "' is not a directory");
  } else {
    auto real = RealPath("image", image);
    if (!real.ok()) {
      Fail(real.status().ToString());
    } else if (*real != image) {
      Fail("image: '" + image + "' goes through a symlink (real path " + *real + ")");
    } else if (*real == "/") {
      Fail("image: the host root cannot be an image");
    } else {
      spec_.image_ = *real;
    }
  }
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetWorkspace(const std::string& dir) {
  auto normalized = NormalizeAbsolutePath(dir);
  if (!normalized.ok()) {
    Fail("workspace: " + normalized.status().message());
  } else if (UnderKernelTree(*normalized) || *normalized == "/") {
    Fail("workspace: '" + dir + "' is not allowed");
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
    spec_.binds_.push_back({*real, *target, bind.read_only});
  }
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::AddEnv(const std::string& assignment) {
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

SandboxSpecBuilder& SandboxSpecBuilder::SetMemoryLimit(uint64_t bytes) {
  if (bytes < kMiB) Fail("memory: must be at least 1M");
  else spec_.limits_.memory_bytes = bytes;
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetCpuLimit(uint64_t millicores) {
  // cpu.max needs a quota of at least 1 ms per 100 ms period.
  if (millicores < 10) Fail("cpus: must be at least 0.01");
  else if (millicores > 1024 * 1000) Fail("cpus: must be at most 1024");
  else spec_.limits_.cpu_millicores = millicores;
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetPidsLimit(uint64_t pids) {
  // corral-init and the command itself are two processes.
  if (pids < 2) Fail("pids: must be at least 2 (corral-init and the command)");
  else if (pids > 4194304) Fail("pids: must be at most 4194304");
  else spec_.limits_.pids = pids;
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetWallTimeLimit(uint64_t micros) {
  if (micros == 0) Fail("wall-time: must be greater than 0");
  else spec_.limits_.wall_time_us = micros;
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetCpuTimeLimit(uint64_t micros) {
  if (micros == 0) Fail("cpu-time: must be greater than 0");
  else spec_.limits_.cpu_time_us = micros;
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetDiskLimit(uint64_t bytes) {
  if (bytes < kMiB) Fail("disk: must be at least 1M");
  else spec_.limits_.disk_bytes = bytes;
  return *this;
}

SandboxSpecBuilder& SandboxSpecBuilder::SetNofileLimit(uint64_t files) {
  if (files < 8) Fail("nofile: must be at least 8");
  else if (files > 1048576) Fail("nofile: must be at most 1048576 (fs.nr_open)");
  else spec_.limits_.nofile = files;
  return *this;
}

StatusOr<SandboxSpec> SandboxSpecBuilder::Build() {
  if (spec_.command_.empty()) Fail("command: missing (put it after --)");
  if (failed()) return first_error_;
  SandboxSpec spec = spec_;
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
