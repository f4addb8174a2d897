#include "api/http_text.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cctype>
#include <cstdio>
#include <random>

namespace corral::api {

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<std::string> PercentDecode(std::string_view in, bool plus_is_space) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '%') {
      if (i + 2 >= in.size()) return std::nullopt;
      int hi = HexValue(in[i + 1]);
      int lo = HexValue(in[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::vector<std::string_view> SplitSegments(std::string_view path) {
  std::vector<std::string_view> out;
  path.remove_prefix(1);
  size_t start = 0;
  for (;;) {
    size_t slash = path.find('/', start);
    out.push_back(
        path.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return out;
}

std::optional<std::vector<std::string>> DecodeSegments(std::string_view raw_path) {
  std::vector<std::string> out;
  for (std::string_view raw : SplitSegments(raw_path)) {
    auto decoded = PercentDecode(raw, /*plus_is_space=*/false);
    if (!decoded || decoded->find('\0') != std::string::npos) return std::nullopt;
    out.push_back(std::move(*decoded));
  }
  return out;
}

std::optional<std::map<std::string, std::string>> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    size_t eq = pair.find('=');
    auto key = PercentDecode(pair.substr(0, eq), true);
    auto value = PercentDecode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1), true);
    if (!key || !value) return std::nullopt;
    out.emplace(std::move(*key), std::move(*value));
  }
  return out;
}

std::string BearerTokenOf(std::string_view authorization) {
  std::string_view value = Trim(authorization);
  constexpr std::string_view kScheme = "bearer ";
  if (value.size() <= kScheme.size() || !IEquals(value.substr(0, kScheme.size()), kScheme)) return "";
  return std::string(Trim(value.substr(kScheme.size())));
}

void ScanSubprotocols(std::string_view list, OfferedSubprotocols& offered) {
  constexpr std::string_view kBearerPrefix = "bearer.";
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view entry = Trim(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (entry == kSubprotocol) {
      offered.corral_v1 = true;
    } else if (entry.substr(0, kBearerPrefix.size()) == kBearerPrefix) {
      offered.token = std::string(entry.substr(kBearerPrefix.size()));
    }
  }
}

std::string NewRequestId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

bool IsSafeHeaderText(std::string_view s) { return s.find_first_of("\r\n", 0) == std::string_view::npos; }

bool SameOrigin(std::string_view origin, std::string_view host) {
  if (host.empty()) return false;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (origin.size() == scheme.size() + host.size() && origin.substr(0, scheme.size()) == scheme &&
        origin.substr(scheme.size()) == host) {
      return true;
    }
  }
  return false;
}

uint16_t SendableCloseCode(uint16_t code) {
  bool ok =
      (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
  return ok ? code : 1011;
}

std::string TruncateReason(std::string reason) {
  if (reason.size() <= 123) return reason;
  size_t n = 123;
  while (n > 0 && (static_cast<unsigned char>(reason[n]) & 0xC0) == 0x80) --n;
  reason.resize(n);
  return reason;
}

std::string EndpointName(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "unix";
}

}  // namespace corral::api
