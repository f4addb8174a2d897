#include "supervisor/egress/egress_policy.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <nlohmann/json.hpp>

namespace corral::supervisor {
namespace {

using nlohmann::json;

IpAddress V4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  IpAddress address;
  address.v4 = true;
  address.bytes[10] = 0xff;
  address.bytes[11] = 0xff;
  address.bytes[12] = a;
  address.bytes[13] = b;
  address.bytes[14] = c;
  address.bytes[15] = d;
  return address;
}

// Whether the first `bits` bits of two 16-byte addresses agree.
bool PrefixEqual(const std::array<uint8_t, 16>& a, const std::array<uint8_t, 16>& b, int bits) {
  for (int i = 0; i < 16 && bits > 0; ++i, bits -= 8) {
    const uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((a[i] & mask) != (b[i] & mask)) return false;
  }
  return true;
}

struct Range {
  const char* cidr;
  const char* reason;
};

// Not public, IPv4 (RFC 6890 and what clouds use).
constexpr Range kV4Ranges[] = {
    {"0.0.0.0/8", "unspecified"},          {"10.0.0.0/8", "private"},
    {"100.64.0.0/10", "shared address space"}, {"127.0.0.0/8", "loopback"},
    {"169.254.169.254/32", "cloud metadata"}, {"169.254.0.0/16", "link-local"},
    {"172.16.0.0/12", "private"},          {"192.0.0.0/24", "IETF protocol assignments"},
    {"192.168.0.0/16", "private"},         {"198.18.0.0/15", "benchmarking"},
    {"224.0.0.0/4", "multicast"},          {"255.255.255.255/32", "broadcast"},
    {"240.0.0.0/4", "reserved"},
};
constexpr Range kV6Ranges[] = {
    {"fd00:ec2::254/128", "cloud metadata"}, {"::/128", "unspecified"}, {"::1/128", "loopback"},
    {"fc00::/7", "private"},     {"fe80::/10", "link-local"},  {"fec0::/10", "site-local"},
    {"ff00::/8", "multicast"},   {"100::/64", "discard"},
};

const std::vector<std::pair<Cidr, const char*>>& NonPublicRanges() {
  static const auto* ranges = [] {
    auto* list = new std::vector<std::pair<Cidr, const char*>>;
    // Most specific first (the metadata address before link-local).
    for (const Range& r : kV4Ranges) list->emplace_back(*Cidr::Parse(r.cidr), r.reason);
    for (const Range& r : kV6Ranges) list->emplace_back(*Cidr::Parse(r.cidr), r.reason);
    return list;
  }();
  return *ranges;
}

// The IPv4 address an IPv6 one carries on purpose: NAT64 (64:ff9b::/96), 6to4 (2002::/16), and
// the deprecated compatible form (::a.b.c.d). Mapped addresses are IPv4 already.
std::optional<IpAddress> EmbeddedV4(const IpAddress& address) {
  if (address.v4) return std::nullopt;
  const auto& b = address.bytes;
  static const std::array<uint8_t, 12> kNat64 = {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::equal(kNat64.begin(), kNat64.end(), b.begin())) return V4(b[12], b[13], b[14], b[15]);
  if (b[0] == 0x20 && b[1] == 0x02) return V4(b[2], b[3], b[4], b[5]);
  if (std::all_of(b.begin(), b.begin() + 12, [](uint8_t x) { return x == 0; }) &&
      (b[12] | b[13] | b[14]) != 0) {
    return V4(b[12], b[13], b[14], b[15]);
  }
  return std::nullopt;
}

bool IsLabelChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'; }

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

}  // namespace

// ---- Addresses ----

std::optional<IpAddress> IpAddress::Parse(std::string_view text) {
  if (text.empty() || text.size() > 45) return std::nullopt;
  const std::string s(text);
  IpAddress address;
  in_addr v4{};
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v4.s_addr);
    return V4(p[0], p[1], p[2], p[3]);
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, s.c_str(), &v6) == 1) {
    std::memcpy(address.bytes.data(), v6.s6_addr, 16);
    static const std::array<uint8_t, 12> kMapped = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    address.v4 = std::equal(kMapped.begin(), kMapped.end(), address.bytes.begin());
    return address;
  }
  return std::nullopt;
}

IpAddress IpAddress::FromSockaddr(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    const auto* p = reinterpret_cast<const uint8_t*>(&in->sin_addr.s_addr);
    return V4(p[0], p[1], p[2], p[3]);
  }
  IpAddress address;
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
  std::memcpy(address.bytes.data(), in6->sin6_addr.s6_addr, 16);
  static const std::array<uint8_t, 12> kMapped = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  address.v4 = std::equal(kMapped.begin(), kMapped.end(), address.bytes.begin());
  return address;
}

std::string IpAddress::ToString() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (v4) {
    inet_ntop(AF_INET, bytes.data() + 12, text, sizeof(text));
  } else {
    inet_ntop(AF_INET6, bytes.data(), text, sizeof(text));
  }
  return text;
}

StatusOr<Cidr> Cidr::Parse(std::string_view text) {
  const size_t slash = text.find('/');
  auto address = IpAddress::Parse(text.substr(0, slash));
  if (!address) return Status::Error("not an address or CIDR range: " + Quote(text), EINVAL);
  Cidr cidr;
  cidr.base = *address;
  const int max = address->v4 ? 32 : 128;
  cidr.prefix = max;
  if (slash != std::string_view::npos) {
    std::string_view bits = text.substr(slash + 1);
    int prefix = 0;
    if (bits.empty() || bits.size() > 3 || !std::all_of(bits.begin(), bits.end(), ::isdigit)) {
      return Status::Error("bad prefix length in " + Quote(text), EINVAL);
    }
    for (char c : bits) prefix = prefix * 10 + (c - '0');
    if (prefix > max) return Status::Error("bad prefix length in " + Quote(text), EINVAL);
    cidr.prefix = prefix;
  }
  // Host bits must be zero: "10.1.2.3/8" is more likely a mistake than a range.
  IpAddress masked = cidr.base;
  const int total = cidr.prefix + (address->v4 ? 96 : 0);
  for (int i = 0; i < 16; ++i) {
    const int keep = std::clamp(total - i * 8, 0, 8);
    masked.bytes[i] &= keep == 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - keep));
  }
  if (!(masked == cidr.base)) {
    return Status::Error(Quote(text) + " has host bits set (the range is " + masked.ToString() + "/" +
                             std::to_string(cidr.prefix) + ")",
                         EINVAL);
  }
  return cidr;
}

bool Cidr::Contains(const IpAddress& address) const {
  if (address.v4 != base.v4) return false;
  return PrefixEqual(base.bytes, address.bytes, prefix + (base.v4 ? 96 : 0));
}

bool Cidr::Covers(const Cidr& inner) const { return inner.prefix >= prefix && Contains(inner.base); }

std::string Cidr::ToString() const { return base.ToString() + "/" + std::to_string(prefix); }

std::string_view NonPublicReason(const IpAddress& address) {
  for (const auto& [range, reason] : NonPublicRanges()) {
    if (range.Contains(address)) return reason;
  }
  if (auto inner = EmbeddedV4(address)) {
    for (const auto& [range, reason] : NonPublicRanges()) {
      if (range.Contains(*inner)) return reason;
    }
  }
  return "";
}

std::vector<Cidr> NonPublicV4Ranges() {
  std::vector<Cidr> ranges;
  for (const Range& r : kV4Ranges) ranges.push_back(*Cidr::Parse(r.cidr));
  return ranges;
}

std::optional<ServerAddress> ParseResolverAddress(std::string_view text) {
  ServerAddress server;
  std::string_view host = text;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return std::nullopt;
      port = rest.substr(1);
      if (port.empty()) return std::nullopt;
    }
  } else if (std::count(text.begin(), text.end(), ':') == 1) {
    host = text.substr(0, text.find(':'));
    port = text.substr(text.find(':') + 1);
    if (port.empty()) return std::nullopt;
  }
  auto address = IpAddress::Parse(host);
  if (!address) return std::nullopt;
  server.address = *address;
  if (!port.empty()) {
    if (port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit)) return std::nullopt;
    const int value = std::stoi(std::string(port));
    if (value < 1 || value > 65535) return std::nullopt;
    server.port = static_cast<uint16_t>(value);
  }
  return server;
}

// ---- Names ----

std::string NormalizeHostName(std::string_view host) {
  std::string name(host);
  if (!name.empty() && name.back() == '.') name.pop_back();
  if (name.empty() || name.size() > 253) return "";
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('.', start);
    if (end == std::string::npos) end = name.size();
    const std::string_view label(name.data() + start, end - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-' ||
        !std::all_of(label.begin(), label.end(), IsLabelChar)) {
      return "";
    }
    start = end + 1;
  }
  return name;
}

StatusOr<std::string> NormalizeDomainPattern(std::string_view pattern) {
  if (pattern == "*") return std::string("*");
  const bool wildcard = pattern.substr(0, 2) == "*.";
  std::string name = NormalizeHostName(wildcard ? pattern.substr(2) : pattern);
  if (name.empty() || IpAddress::Parse(name)) {
    return Status::Error(Quote(pattern) + " is not a domain (\"example.com\", \"*.example.com\" or \"*\"; addresses go in cidrs)",
                         EINVAL);
  }
  return wildcard ? "*." + name : name;
}

bool DomainMatches(std::string_view pattern, std::string_view host) {
  if (pattern == "*") return true;
  if (pattern.substr(0, 2) == "*.") {
    const std::string_view suffix = pattern.substr(1);  // ".example.com"
    return host.size() > suffix.size() && host.substr(host.size() - suffix.size()) == suffix;
  }
  return pattern == host;
}

bool PatternCovers(std::string_view outer, std::string_view inner) {
  if (outer == "*") return true;
  if (inner == "*") return false;
  if (inner.substr(0, 2) == "*.") {
    // Every name below inner's suffix: only a wildcard at or above that suffix covers them all.
    if (outer.substr(0, 2) != "*.") return false;
    const std::string_view suffix = inner.substr(2);
    return outer.substr(2) == suffix || DomainMatches(outer, suffix);
  }
  return DomainMatches(outer, inner);
}

// ---- Rules ----

StatusOr<EgressRulesChange> ParseEgressRulesChange(const json& j, std::string_view where) {
  const std::string prefix = std::string(where) + ": ";
  if (!j.is_object()) return Status::Error(prefix + "expected {\"domains\", \"ports\", \"cidrs\"}", EINVAL);
  EgressRulesChange change;
  for (const auto& [key, value] : j.items()) {
    if (key != "domains" && key != "ports" && key != "cidrs") {
      return Status::Error(prefix + "unknown field \"" + key + "\"", EINVAL);
    }
    if (!value.is_array()) return Status::Error(prefix + key + ": expected a list", EINVAL);
  }
  if (j.contains("domains")) {
    auto& domains = change.domains.emplace();
    for (const auto& item : j["domains"]) {
      if (!item.is_string()) return Status::Error(prefix + "domains: expected strings", EINVAL);
      auto pattern = NormalizeDomainPattern(item.get<std::string>());
      if (!pattern.ok()) return Status::Error(prefix + "domains: " + pattern.status().message(), EINVAL);
      if (std::find(domains.begin(), domains.end(), *pattern) == domains.end()) domains.push_back(*pattern);
    }
  }
  if (j.contains("ports")) {
    auto& ports = change.ports.emplace();
    for (const auto& item : j["ports"]) {
      if (!item.is_number_integer() || item.get<int64_t>() < 1 || item.get<int64_t>() > 65535) {
        return Status::Error(prefix + "ports: expected numbers from 1 to 65535", EINVAL);
      }
      const auto port = static_cast<uint16_t>(item.get<int64_t>());
      if (std::find(ports.begin(), ports.end(), port) == ports.end()) ports.push_back(port);
    }
  }
  if (j.contains("cidrs")) {
    auto& cidrs = change.cidrs.emplace();
    for (const auto& item : j["cidrs"]) {
      if (!item.is_string()) return Status::Error(prefix + "cidrs: expected strings", EINVAL);
      auto cidr = Cidr::Parse(item.get<std::string>());
      if (!cidr.ok()) return Status::Error(prefix + "cidrs: " + cidr.status().message(), EINVAL);
      cidrs.push_back(*cidr);
    }
  }
  return change;
}

EgressRules EgressRulesChange::Over(const EgressRules& base) const {
  EgressRules rules = base;
  if (domains) rules.domains = *domains;
  if (ports) rules.ports = *ports;
  if (cidrs) rules.cidrs = *cidrs;
  return rules;
}

StatusOr<EgressRules> ParseEgressRules(const json& j, std::string_view where, const EgressRules& defaults) {
  ASSIGN_OR_RETURN(EgressRulesChange change, ParseEgressRulesChange(j, where));
  return change.Over(defaults);
}

json EgressRulesJson(const EgressRules& rules) {
  json cidrs = json::array();
  for (const Cidr& cidr : rules.cidrs) cidrs.push_back(cidr.ToString());
  return {{"domains", rules.domains}, {"ports", rules.ports}, {"cidrs", cidrs}};
}

Status CheckWithinCaps(const EgressRules& rules, const EgressRules& caps, std::string_view source) {
  for (const std::string& domain : rules.domains) {
    const bool covered = std::any_of(caps.domains.begin(), caps.domains.end(),
                                     [&](const std::string& cap) { return PatternCovers(cap, domain); });
    if (!covered) {
      return Status::Error("egress: the domain " + Quote(domain) + " is not allowed (" + std::string(source) + " domains)",
                           EPERM);
    }
  }
  for (uint16_t port : rules.ports) {
    if (std::find(caps.ports.begin(), caps.ports.end(), port) == caps.ports.end()) {
      return Status::Error("egress: the port " + std::to_string(port) + " is not allowed (" + std::string(source) + " ports)",
                           EPERM);
    }
  }
  for (const Cidr& cidr : rules.cidrs) {
    const bool covered =
        std::any_of(caps.cidrs.begin(), caps.cidrs.end(), [&](const Cidr& cap) { return cap.Covers(cidr); });
    if (!covered) {
      return Status::Error("egress: the range " + cidr.ToString() + " is not allowed (" + std::string(source) + " cidrs)",
                           EPERM);
    }
  }
  return Status();
}

EgressRules NarrowToCaps(const EgressRules& rules, const EgressRules& caps) {
  EgressRules out;
  for (const std::string& domain : rules.domains) {
    if (std::any_of(caps.domains.begin(), caps.domains.end(),
                    [&](const std::string& cap) { return PatternCovers(cap, domain); })) {
      out.domains.push_back(domain);
    }
  }
  for (uint16_t port : rules.ports) {
    if (std::find(caps.ports.begin(), caps.ports.end(), port) != caps.ports.end()) out.ports.push_back(port);
  }
  for (const Cidr& cidr : rules.cidrs) {
    if (std::any_of(caps.cidrs.begin(), caps.cidrs.end(), [&](const Cidr& cap) { return cap.Covers(cidr); })) {
      out.cidrs.push_back(cidr);
    }
  }
  return out;
}

HostDecision DecideHost(const EgressRules& rules, std::string_view host, uint16_t port) {
  HostDecision decision;
  if (std::find(rules.ports.begin(), rules.ports.end(), port) == rules.ports.end()) {
    decision.reason = "port";
    decision.message = "port " + std::to_string(port) + " is not in this sandbox's egress ports";
    return decision;
  }
  std::string_view bare = host;
  if (bare.size() >= 2 && bare.front() == '[' && bare.back() == ']') bare = bare.substr(1, bare.size() - 2);
  if (auto literal = IpAddress::Parse(bare)) {
    decision.literal = literal;
    for (const Cidr& cidr : rules.cidrs) {
      if (cidr.Contains(*literal)) {
        decision.allowed = true;
        decision.rule = cidr.ToString();
        return decision;
      }
    }
    decision.reason = "address";
    decision.message = literal->ToString() + " is an address that no rule in this sandbox's egress cidrs contains";
    return decision;
  }
  const std::string name = NormalizeHostName(host);
  if (name.empty()) {
    decision.reason = "domain";
    decision.message = Quote(host) + " is not a host name";
    return decision;
  }
  for (const std::string& pattern : rules.domains) {
    if (DomainMatches(pattern, name)) {
      decision.allowed = true;
      decision.rule = pattern;
      return decision;
    }
  }
  decision.reason = "domain";
  decision.message = name + " is not in this sandbox's egress domains";
  return decision;
}

AddressDecision DecideAddress(const EgressRules& rules, const IpAddress& address) {
  AddressDecision decision;
  for (const Cidr& cidr : rules.cidrs) {
    if (cidr.Contains(address)) {
      decision.allowed = true;
      return decision;
    }
  }
  const std::string_view why = NonPublicReason(address);
  if (why.empty()) {
    decision.allowed = true;
    return decision;
  }
  decision.reason = "private_address";
  decision.message = address.ToString() + " is a " + std::string(why) +
                     " address, which no rule in this sandbox's egress cidrs names";
  return decision;
}

}  // namespace corral::supervisor
