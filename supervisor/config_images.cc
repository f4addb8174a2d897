#include "supervisor/config_images.h"

#include <set>
#include <string_view>

namespace corral::supervisor {
namespace {

// A registry host as references name it: "registry.example.com", "127.0.0.1:5000", "[::1]:5000";
// no scheme, no path.
bool IsRegistryHost(std::string_view host) {
  if (host.empty() || host.size() > 255) return false;
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '-' || c == ':' || c == '[' || c == ']';
    if (!ok) return false;
  }
  return host.front() != '.' && host.front() != '-' && host.front() != ':';
}

// A user name skopeo's --creds USER:PASSWORD can carry: no ':', no control characters.
bool IsUsername(std::string_view name) {
  if (name.empty() || name.size() > 255) return false;
  for (char c : name) {
    if (c == ':' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

bool IsAbsolutePath(std::string_view path) {
  return !path.empty() && path[0] == '/' && path.find('\0') == std::string_view::npos;
}

// One key of a registry table into `registry`; "" or what was expected.
std::string ApplyRegistryKey(std::string_view key, const toml::node& value, RegistryConfig& registry) {
  if (key == "insecure") {
    const auto* b = value.as_boolean();
    if (b == nullptr) return "expected true or false";
    registry.insecure = b->get();
    return "";
  }
  const auto* s = value.as_string();
  if (key == "host") {
    if (s == nullptr || !IsRegistryHost(s->get())) {
      return "expected a registry as references name it, like \"registry.example.com\" or \"127.0.0.1:5000\"";
    }
    registry.host = s->get();
  } else if (key == "username") {
    if (s == nullptr || !IsUsername(s->get())) return "expected a user name (no ':')";
    registry.username = s->get();
  } else if (key == "password_file") {
    if (s == nullptr || !IsAbsolutePath(s->get())) return "expected an absolute path";
    registry.password_file = s->get();
  } else {
    return "unknown key (host, insecure, username, password_file)";
  }
  return "";
}

std::string Place(size_t index, std::string_view key, const toml::source_region& where) {
  return "[" + std::to_string(index) + "]" + (key.empty() ? "" : "." + std::string(key)) + " (line " +
         std::to_string(where.begin.line) + "): ";
}

}  // namespace

std::string ParseSkopeoPath(const toml::node& node, std::string& out) {
  const std::string expected = "expected an absolute path or a program name like \"skopeo\"";
  const auto* s = node.as_string();
  if (s == nullptr || s->get().empty() || s->get().find('\0') != std::string::npos) return expected;
  const std::string& path = s->get();
  if (path[0] != '/' && path.find('/') != std::string::npos) return expected;  // relative: whose cwd?
  out = path;
  return "";
}

std::string ParseRegistries(const toml::node& node, std::vector<RegistryConfig>& out) {
  const auto* array = node.as_array();
  if (array == nullptr || !array->is_array_of_tables()) {
    return "expected tables like [[images.registry]] host = \"127.0.0.1:5000\"";
  }
  std::vector<RegistryConfig> registries;
  std::set<std::string> hosts;
  size_t index = 0;
  for (const toml::node& element : *array) {
    ++index;
    const toml::table& table = *element.as_table();
    RegistryConfig registry;
    for (const auto& [key, value] : table) {
      std::string error = ApplyRegistryKey(key.str(), value, registry);
      if (!error.empty()) return Place(index, key.str(), key.source()) + error;
    }
    if (registry.host.empty()) return Place(index, "", element.source()) + "host is missing";
    if (registry.username.empty() != registry.password_file.empty()) {
      return Place(index, "", element.source()) + "username and password_file go together";
    }
    if (!hosts.insert(registry.host).second) {
      return Place(index, "host", element.source()) + "\"" + registry.host + "\" is named twice";
    }
    registries.push_back(std::move(registry));
  }
  out = std::move(registries);
  return "";
}

bool SameImagesConfig(const ImagesConfig& a, const ImagesConfig& b) {
  auto same = [](const RegistryConfig& x, const RegistryConfig& y) {
    return x.host == y.host && x.insecure == y.insecure && x.username == y.username &&
           x.password_file == y.password_file;
  };
  if (a.max_size != b.max_size || a.max_layers != b.max_layers || a.skopeo != b.skopeo ||
      a.registries.size() != b.registries.size()) {
    return false;
  }
  for (size_t i = 0; i < a.registries.size(); ++i) {
    if (!same(a.registries[i], b.registries[i])) return false;
  }
  return true;
}

}  // namespace corral::supervisor
