#include "supervisor/config_fleet.h"

#include <cctype>

namespace corral::supervisor {

std::string ParseStoreBackend(const toml::node& node, bool& postgresql) {
  const auto* s = node.as_string();
  if (s == nullptr || (s->get() != "sqlite" && s->get() != "postgresql")) return "expected \"sqlite\" or \"postgresql\"";
  postgresql = s->get() == "postgresql";
  return "";
}

std::string ParseStoreUrl(const toml::node& node, std::string& out) {
  const auto* s = node.as_string();
  const char* expected = "expected a connection string like \"postgresql://corral@db.internal/corral\"";
  if (s == nullptr || s->get().empty() || s->get().find('\0') != std::string::npos) return expected;
  out = s->get();
  return "";
}

std::string ParseNodeId(const toml::node& node, std::string& out) {
  const auto* s = node.as_string();
  const char* expected = "expected a name of letters, digits, '.', '-' and '_', at most 64 characters";
  if (s == nullptr || s->get().empty() || s->get().size() > 64) return expected;
  for (char c : s->get()) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') return expected;
  }
  out = s->get();
  return "";
}

std::string ParseNodeAddress(const toml::node& node, std::string& out) {
  const auto* s = node.as_string();
  const char* expected = "expected host:port, like \"10.0.0.5:7080\"";
  if (s == nullptr) return expected;
  const std::string& text = s->get();
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size() || text.size() - colon - 1 > 5) {
    return expected;
  }
  for (size_t i = colon + 1; i < text.size(); ++i) {
    if (!isdigit(static_cast<unsigned char>(text[i]))) return expected;
  }
  if (std::stoul(text.substr(colon + 1)) > 65535) return expected;
  for (char c : text.substr(0, colon)) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '[' && c != ']' && c != ':') {
      return expected;
    }
  }
  out = text;
  return "";
}

}  // namespace corral::supervisor
