#include "supervisor/secrets/secret_binding.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <optional>

#include "common/base64.h"

namespace corral::supervisor {
namespace {

constexpr std::string_view kPlaceholder = "{secret}";

bool IsTokenChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool IsToken(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), IsTokenChar); }

bool HasControl(std::string_view s) {
  return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A DNS name of lower-case labels (letters, digits, '-', not at a label's ends).
bool IsDnsName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = name.find('.', start);
    const std::string_view label = name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-')) {
        return false;
      }
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool PrefixMatches(std::string_view prefix, std::string_view path) {
  if (path.substr(0, prefix.size()) != prefix) return false;
  return path.size() == prefix.size() || prefix.back() == '/' || path[prefix.size()] == '/';
}

Status Invalid(const std::string& what) { return Status::Error("secret binding: " + what, EINVAL); }

}  // namespace

Status ValidateBinding(const SecretBinding& binding) {
  if (binding.hosts.empty()) return Invalid("hosts: at least one");
  for (const std::string& host : binding.hosts) {
    const std::string_view name = host.rfind("*.", 0) == 0 ? std::string_view(host).substr(2) : std::string_view(host);
    if (!IsDnsName(name)) return Invalid("hosts: '" + host + "' is not a lower-case DNS name or *.name");
  }
  for (uint16_t port : binding.ports) {
    if (port == 0) return Invalid("ports: 1 to 65535");
  }
  for (const std::string& method : binding.methods) {
    if (!IsToken(method) || method != [&] {
          std::string up(method);
          for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
          return up;
        }()) {
      return Invalid("methods: '" + method + "' is not an upper-case method");
    }
  }
  for (const std::string& prefix : binding.path_prefixes) {
    if (prefix.empty() || prefix[0] != '/' || HasControl(prefix) || !NormalizedPath(prefix) ||
        *NormalizedPath(prefix) != prefix) {
      return Invalid("path_prefixes: '" + prefix + "' is not a normalized path starting with '/'");
    }
  }
  if (binding.how == SecretBinding::How::kBasic) {
    if (binding.user.find(':') != std::string::npos || HasControl(binding.user)) {
      return Invalid("user: no ':' and no control characters");
    }
    return Status();
  }
  const std::string header = Lower(binding.header);
  if (!IsToken(binding.header) || header == "host" || header == "content-length" || header == "transfer-encoding" ||
      header == "connection" || header == "te" || header == "upgrade" || header.rfind("proxy-", 0) == 0) {
    return Invalid("header: '" + binding.header + "' is not a header the secret may set");
  }
  const size_t at = binding.value_template.find(kPlaceholder);
  if (at == std::string::npos || binding.value_template.find(kPlaceholder, at + 1) != std::string::npos ||
      HasControl(binding.value_template)) {
    return Invalid("value: a template with {secret} once and no control characters");
  }
  return Status();
}

std::optional<std::string> NormalizedPath(std::string_view path) {
  if (path.find('\\') != std::string_view::npos) return std::nullopt;
  const std::string lower = Lower(path);
  for (std::string_view encoded : {"%2e", "%2f", "%5c"}) {
    if (lower.find(encoded) != std::string::npos) return std::nullopt;
  }
  std::vector<std::string_view> segments;
  size_t start = path.empty() || path[0] != '/' ? 0 : 1;
  bool trailing = false;
  while (start <= path.size()) {
    const size_t slash = path.find('/', start);
    const std::string_view segment = path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    trailing = slash == std::string_view::npos && (segment.empty() || segment == "." || segment == "..");
    if (segment == "..") {
      if (!segments.empty()) segments.pop_back();
    } else if (!segment.empty() && segment != ".") {
      segments.push_back(segment);
    }
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  std::string out;
  for (std::string_view segment : segments) out.append("/").append(segment);
  if (out.empty() || trailing) out += "/";
  return out;
}

bool BindingCovers(const SecretBinding& binding, std::string_view host, uint16_t port) {
  std::string name = Lower(host);
  if (!name.empty() && name.back() == '.') name.pop_back();
  const bool host_ok = std::any_of(binding.hosts.begin(), binding.hosts.end(), [&](const std::string& pattern) {
    if (pattern.rfind("*.", 0) != 0) return name == pattern;
    const std::string_view suffix = std::string_view(pattern).substr(1);  // ".suffix"
    return name.size() > suffix.size() && std::string_view(name).substr(name.size() - suffix.size()) == suffix;
  });
  if (!host_ok) return false;
  return binding.ports.empty() ? port == 443
                               : std::find(binding.ports.begin(), binding.ports.end(), port) != binding.ports.end();
}

bool BindingMatches(const SecretBinding& binding, std::string_view host, uint16_t port, std::string_view method,
                    std::string_view path) {
  if (!BindingCovers(binding, host, port)) return false;
  if (!binding.methods.empty() &&
      std::find(binding.methods.begin(), binding.methods.end(), method) == binding.methods.end()) {
    return false;
  }
  if (binding.path_prefixes.empty()) return true;
  const std::optional<std::string> normalized = NormalizedPath(path.substr(0, path.find('?')));
  if (!normalized) return false;
  return std::any_of(binding.path_prefixes.begin(), binding.path_prefixes.end(),
                     [&](const std::string& prefix) { return PrefixMatches(prefix, *normalized); });
}

StatusOr<std::vector<SecretBinding>> ParseSecretBindings(const nlohmann::json& j, std::string_view where) {
  const std::string at(where);
  if (!j.is_array() || j.empty() || j.size() > kMaxBindings) {
    return Status::Error(at + ": a list of 1 to " + std::to_string(kMaxBindings) + " bindings", EINVAL);
  }
  std::vector<SecretBinding> bindings;
  for (const nlohmann::json& item : j) {
    if (!item.is_object()) return Status::Error(at + ": each binding is an object", EINVAL);
    SecretBinding b;
    for (const auto& [key, value] : item.items()) {
      auto strings = [&](std::vector<std::string>& out) -> Status {
        if (!value.is_array()) return Status::Error(at + "." + key + ": a list of strings", EINVAL);
        for (const nlohmann::json& v : value) {
          if (!v.is_string()) return Status::Error(at + "." + key + ": a list of strings", EINVAL);
          out.push_back(v.get<std::string>());
        }
        return Status();
      };
      if (key == "hosts") {
        RETURN_IF_ERROR(strings(b.hosts));
      } else if (key == "methods") {
        RETURN_IF_ERROR(strings(b.methods));
      } else if (key == "path_prefixes") {
        RETURN_IF_ERROR(strings(b.path_prefixes));
      } else if (key == "ports") {
        if (!value.is_array()) return Status::Error(at + ".ports: a list of ports", EINVAL);
        for (const nlohmann::json& v : value) {
          if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 || v.get<uint64_t>() > 65535) {
            return Status::Error(at + ".ports: 1 to 65535", EINVAL);
          }
          b.ports.push_back(static_cast<uint16_t>(v.get<uint64_t>()));
        }
      } else if (key == "header" || key == "value" || key == "basic_user") {
        if (!value.is_string()) return Status::Error(at + "." + key + ": a string", EINVAL);
        if (key == "header") b.header = value.get<std::string>();
        if (key == "value") b.value_template = value.get<std::string>();
        if (key == "basic_user") {
          b.how = SecretBinding::How::kBasic;
          b.user = value.get<std::string>();
        }
      } else {
        return Status::Error(at + ": no field " + key, EINVAL);
      }
    }
    if (b.how == SecretBinding::How::kBasic && (item.contains("header") || item.contains("value"))) {
      return Status::Error(at + ": basic_user, or header and value, not both", EINVAL);
    }
    Status valid = ValidateBinding(b);
    if (!valid.ok()) return Status::Error(at + ": " + valid.message(), EINVAL);
    bindings.push_back(std::move(b));
  }
  return bindings;
}

nlohmann::json SecretBindingsJson(const std::vector<SecretBinding>& bindings) {
  nlohmann::json out = nlohmann::json::array();
  for (const SecretBinding& b : bindings) {
    nlohmann::json item = {{"hosts", b.hosts}, {"ports", b.ports}, {"methods", b.methods},
                           {"path_prefixes", b.path_prefixes}};
    if (b.how == SecretBinding::How::kBasic) {
      item["basic_user"] = b.user;
    } else {
      item["header"] = b.header;
      item["value"] = b.value_template;
    }
    out.push_back(std::move(item));
  }
  return out;
}

Status ValidateSecretValue(std::string_view value) {
  if (value.empty() || value.size() > 8192) return Status::Error("a secret's value is 1 to 8,192 bytes", EINVAL);
  if (HasControl(value)) return Status::Error("a secret's value has no control characters (no CR, LF, NUL)", EINVAL);
  return Status();
}

std::pair<std::string, std::string> BindingHeader(const SecretBinding& binding, std::string_view secret) {
  if (binding.how == SecretBinding::How::kBasic) {
    return {"Authorization", "Basic " + Base64Encode(binding.user + ":" + std::string(secret))};
  }
  std::string value = binding.value_template;
  value.replace(value.find(kPlaceholder), kPlaceholder.size(), secret);
  return {binding.header, value};
}

}  // namespace corral::supervisor
