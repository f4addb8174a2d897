// Egress rules: which hosts a sandbox's proxy may connect to (DESIGN.md §3 Network).
//
// A sandbox's rules are lists of domains, ports and CIDR ranges:
//   - a domain is exact ("registry.npmjs.org"), a wildcard for every name below one
//     ("*.github.com": api.github.com and a.b.github.com, not github.com itself), or "*" (any name);
//   - a request must name an allowed port and, for a name, an allowed domain; a literal address
//     ("http://203.0.113.7/") is allowed only by a CIDR rule that contains it;
//   - after resolution, an address that is loopback, private (RFC 1918, 100.64/10, fc00::/7),
//     link-local (169.254/16 with the metadata address, fe80::/10), multicast, or otherwise not
//     a public unicast address is refused unless a CIDR rule contains it (an operator's internal
//     mirror, named on purpose). The proxy connects to the address it checked.
//
// What a sandbox may ask for is capped twice: by the daemon's config ([egress] allowed_*) and by
// the user's token (limits.egress); a rule outside either is refused when it is set, with an
// error that names it. Nothing is built in: with no rules, nothing leaves.
//
// Pure functions and values; no I/O.
#pragma once

#include <netinet/in.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/status.h"

namespace corral::supervisor {

// An IPv4 or IPv6 address as 16 bytes (IPv4 as ::ffff:a.b.c.d).
struct IpAddress {
  std::array<uint8_t, 16> bytes{};
  bool v4 = false;

  static std::optional<IpAddress> Parse(std::string_view text);  // no brackets, no zone
  static IpAddress FromSockaddr(const sockaddr* address);
  std::string ToString() const;
  bool operator==(const IpAddress&) const = default;
};

struct Cidr {
  IpAddress base;
  int prefix = 0;  // in the address's own family's bits (0..32 or 0..128)

  // "10.0.0.0/8", "fd00::/8", or a bare address (a /32 or /128). Host bits must be zero.
  static StatusOr<Cidr> Parse(std::string_view text);
  bool Contains(const IpAddress& address) const;
  // True when every address of `inner` is in this range.
  bool Covers(const Cidr& inner) const;
  std::string ToString() const;
  bool operator==(const Cidr&) const = default;
};

// Why an address is not public ("loopback", "private", "shared address space", "link-local",
// "cloud metadata", "multicast", "unspecified", "reserved", ...), or "" for a public unicast
// address. IPv4 inside IPv6 (mapped, NAT64, 6to4) is judged by the IPv4 address it carries.
std::string_view NonPublicReason(const IpAddress& address);

// The IPv4 ranges that NonPublicReason names (full network mode refuses them in its filter).
std::vector<Cidr> NonPublicV4Ranges();

// A DNS server: "IP", "IP:port", "[IPv6]:port" (port 53 when none).
struct ServerAddress {
  IpAddress address;
  uint16_t port = 53;
};
std::optional<ServerAddress> ParseResolverAddress(std::string_view text);

struct EgressRules {
  std::vector<std::string> domains;  // normalized: lower case, no trailing dot
  std::vector<uint16_t> ports;
  std::vector<Cidr> cidrs;

  bool empty() const { return domains.empty() && cidrs.empty(); }
  bool operator==(const EgressRules&) const = default;
};

// Rules as a request or a token names them: each list given replaces that list of the rules it
// is laid over (a new sandbox's: the configuration's defaults; a change: the sandbox's current
// rules; a token's limits.egress: the configuration's allowed_*). A list left out keeps theirs.
struct EgressRulesChange {
  std::optional<std::vector<std::string>> domains;  // normalized, as in EgressRules
  std::optional<std::vector<uint16_t>> ports;
  std::optional<std::vector<Cidr>> cidrs;

  // Every list given: the rules themselves (a fork names its source's rules whole).
  static EgressRulesChange Whole(const EgressRules& rules) { return {rules.domains, rules.ports, rules.cidrs}; }
  EgressRules Over(const EgressRules& base) const;
  bool operator==(const EgressRulesChange&) const = default;
};

// {"domains": [...], "ports": [...], "cidrs": [...]}; every key optional, nothing else allowed.
// `where` prefixes error messages ("egress", "limits.egress"). The API's edge parses requests and
// token claims with ParseEgressRulesChange; the configuration and the store use ParseEgressRules
// (the change laid over `defaults`) and EgressRulesJson (every key, always).
StatusOr<EgressRulesChange> ParseEgressRulesChange(const nlohmann::json& j, std::string_view where);
StatusOr<EgressRules> ParseEgressRules(const nlohmann::json& j, std::string_view where, const EgressRules& defaults);
nlohmann::json EgressRulesJson(const EgressRules& rules);

// Checks a domain or pattern's syntax; returns it normalized.
StatusOr<std::string> NormalizeDomainPattern(std::string_view pattern);
// Lower case, no trailing dot; "" when `host` is not a valid DNS name.
std::string NormalizeHostName(std::string_view host);
// Whether `pattern` (a rule: exact, "*.suffix" or "*") matches the normalized name `host`.
bool DomainMatches(std::string_view pattern, std::string_view host);
// Whether every name `inner` matches is matched by `outer` (for caps).
bool PatternCovers(std::string_view outer, std::string_view inner);

// Refuses rules outside `caps`, naming the first rule that is ("egress: the domain \"x\" is not
// allowed (egress.allowed_domains)"). `source` names where the caps come from.
Status CheckWithinCaps(const EgressRules& rules, const EgressRules& caps, std::string_view source);

// The rules of `rules` that lie within `caps` (a token's narrower caps applied to the config's
// defaults, for a sandbox that names no rules of its own).
EgressRules NarrowToCaps(const EgressRules& rules, const EgressRules& caps);

// The decision on a request's host and port, before resolution.
struct HostDecision {
  bool allowed = false;
  std::optional<IpAddress> literal;  // the host is an address
  std::string reason;                // when refused: "port", "domain", "address"
  std::string message;               // for the agent: what was refused and which rule would allow it
  std::string rule;                  // when allowed: the rule that matched ("*.example.com", "port 443")
};
HostDecision DecideHost(const EgressRules& rules, std::string_view host, uint16_t port);

// The decision on one resolved address: allowed when public, or inside a CIDR rule.
struct AddressDecision {
  bool allowed = false;
  std::string reason;   // "private_address" when refused
  std::string message;
};
AddressDecision DecideAddress(const EgressRules& rules, const IpAddress& address);

}  // namespace corral::supervisor
