#include "supervisor/egress/egress_policy.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace corral::supervisor {
namespace {

using nlohmann::json;

IpAddress Ip(const char* text) {
  auto address = IpAddress::Parse(text);
  EXPECT_TRUE(address.has_value()) << text;
  return address.value_or(IpAddress{});
}

EgressRules Rules(const json& j) {
  auto rules = ParseEgressRules(j, "egress", EgressRules{{}, {443, 80}, {}});
  EXPECT_TRUE(rules.ok()) << rules.status().ToString();
  return rules.ok() ? *rules : EgressRules{};
}

TEST(EgressAddress, EveryNonPublicRangeIsNamedAndPublicOnesAreNot) {
  const std::pair<const char*, const char*> cases[] = {
      {"127.0.0.1", "loopback"},       {"127.255.0.9", "loopback"},   {"10.1.2.3", "private"},
      {"172.16.0.1", "private"},       {"172.31.255.255", "private"}, {"192.168.1.1", "private"},
      {"100.64.0.1", "shared address space"}, {"169.254.169.254", "cloud metadata"},
      {"169.254.1.1", "link-local"},   {"224.0.0.251", "multicast"},  {"0.0.0.0", "unspecified"},
      {"255.255.255.255", "broadcast"}, {"240.0.0.1", "reserved"},   {"::1", "loopback"},
      {"::", "unspecified"},           {"fd12::1", "private"},        {"fc00::1", "private"},
      {"fe80::1", "link-local"},       {"ff02::1", "multicast"},      {"fd00:ec2::254", "cloud metadata"},
      // IPv4 carried in IPv6 is judged as the IPv4 address.
      {"::ffff:127.0.0.1", "loopback"}, {"::ffff:169.254.169.254", "cloud metadata"},
      {"64:ff9b::10.0.0.1", "private"}, {"2002:a9fe:a9fe::1", "cloud metadata"}, {"::127.0.0.1", "loopback"},
  };
  for (const auto& [text, reason] : cases) EXPECT_EQ(NonPublicReason(Ip(text)), reason) << text;
  // Positive controls: public unicast, including neighbours of the ranges above.
  for (const char* text : {"203.0.113.10", "8.8.8.8", "172.32.0.1", "172.15.255.255", "100.128.0.1",
                           "169.253.255.255", "11.0.0.1", "2606:4700::1111", "64:ff9b::8.8.8.8", "::ffff:1.1.1.1"}) {
    EXPECT_EQ(NonPublicReason(Ip(text)), "") << text;
  }
}

TEST(EgressAddress, ParsesAndPrintsBothFamilies) {
  EXPECT_EQ(Ip("203.0.113.10").ToString(), "203.0.113.10");
  EXPECT_TRUE(Ip("203.0.113.10").v4);
  EXPECT_EQ(Ip("::ffff:203.0.113.10"), Ip("203.0.113.10"));
  EXPECT_EQ(Ip("2001:DB8::1").ToString(), "2001:db8::1");
  for (const char* bad : {"", "1.2.3", "1.2.3.4.5", "256.0.0.1", "[::1]", "fe80::1%eth0", "example.com"}) {
    EXPECT_FALSE(IpAddress::Parse(bad).has_value()) << bad;
  }
}

TEST(EgressCidr, ContainsCoversAndRefusesHostBits) {
  auto ten = Cidr::Parse("10.0.0.0/8");
  ASSERT_TRUE(ten.ok());
  EXPECT_TRUE(ten->Contains(Ip("10.255.1.2")));
  EXPECT_FALSE(ten->Contains(Ip("11.0.0.0")));
  EXPECT_FALSE(ten->Contains(Ip("::a00:1")));  // another family
  EXPECT_TRUE(ten->Covers(*Cidr::Parse("10.77.0.0/16")));
  EXPECT_FALSE(ten->Covers(*Cidr::Parse("0.0.0.0/0")));
  auto single = Cidr::Parse("169.254.169.254");
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->ToString(), "169.254.169.254/32");
  EXPECT_TRUE(single->Contains(Ip("169.254.169.254")));
  EXPECT_FALSE(single->Contains(Ip("169.254.169.253")));
  auto v6 = Cidr::Parse("fd00::/8");
  ASSERT_TRUE(v6.ok());
  EXPECT_TRUE(v6->Contains(Ip("fd12::1")));
  EXPECT_FALSE(v6->Contains(Ip("fe00::1")));
  EXPECT_TRUE(Cidr::Parse("0.0.0.0/0")->Contains(Ip("8.8.8.8")));
  auto host_bits = Cidr::Parse("10.1.2.3/8");
  ASSERT_FALSE(host_bits.ok());
  EXPECT_NE(host_bits.status().message().find("10.0.0.0/8"), std::string::npos);
  for (const char* bad : {"10.0.0.0/33", "10.0.0.0/", "10.0.0.0/x", "::/129", "example.com/8"}) {
    EXPECT_FALSE(Cidr::Parse(bad).ok()) << bad;
  }
}

TEST(EgressDomains, ExactAndWildcardPatterns) {
  EXPECT_TRUE(DomainMatches("example.com", "example.com"));
  EXPECT_FALSE(DomainMatches("example.com", "www.example.com"));
  EXPECT_TRUE(DomainMatches("*.example.com", "www.example.com"));
  EXPECT_TRUE(DomainMatches("*.example.com", "a.b.example.com"));
  EXPECT_FALSE(DomainMatches("*.example.com", "example.com"));
  EXPECT_FALSE(DomainMatches("*.example.com", "badexample.com"));
  EXPECT_FALSE(DomainMatches("*.example.com", "example.com.evil.test"));
  EXPECT_TRUE(DomainMatches("*", "anything.test"));
  EXPECT_EQ(NormalizeHostName("WWW.Example.COM."), "www.example.com");
  for (const char* bad : {"", "a..b", "-a.com", "a-.com", "a b.com", "a/b", "ex%41mple.com", "a.com:80"}) {
    EXPECT_EQ(NormalizeHostName(bad), "") << bad;
  }
  EXPECT_EQ(*NormalizeDomainPattern("*.Example.com."), "*.example.com");
  for (const char* bad : {"*example.com", "a.*.com", "**.a.com", "10.0.0.1", "", "*."}) {
    EXPECT_FALSE(NormalizeDomainPattern(bad).ok()) << bad;
  }
}

TEST(EgressDomains, CapsCoverOnlyWhatTheyMatch) {
  EXPECT_TRUE(PatternCovers("*", "*"));
  EXPECT_TRUE(PatternCovers("*", "*.a.com"));
  EXPECT_TRUE(PatternCovers("*.a.com", "*.b.a.com"));
  EXPECT_TRUE(PatternCovers("*.a.com", "*.a.com"));
  EXPECT_TRUE(PatternCovers("*.a.com", "x.a.com"));
  EXPECT_FALSE(PatternCovers("*.a.com", "a.com"));
  EXPECT_FALSE(PatternCovers("*.a.com", "*"));
  EXPECT_FALSE(PatternCovers("x.a.com", "*.a.com"));
  EXPECT_FALSE(PatternCovers("*.b.a.com", "*.a.com"));
}

TEST(EgressRulesParse, FieldsDefaultsAndErrors) {
  EgressRules defaults{{"example.com"}, {443}, {}};
  auto rules = ParseEgressRules(json{{"domains", {"*.Example.test", "*.example.test"}}}, "egress", defaults);
  ASSERT_TRUE(rules.ok());
  EXPECT_EQ(rules->domains, std::vector<std::string>{"*.example.test"});  // normalized, once
  EXPECT_EQ(rules->ports, std::vector<uint16_t>{443});                     // the default kept
  auto round = ParseEgressRules(EgressRulesJson(*rules), "egress", {});
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(EgressRulesJson(*round), EgressRulesJson(*rules));
  const std::pair<json, const char*> bad[] = {
      {json{{"domain", {"a.com"}}}, "unknown field \"domain\""},
      {json{{"ports", {0}}}, "ports"},
      {json{{"ports", {70000}}}, "ports"},
      {json{{"ports", "443"}}, "expected a list"},
      {json{{"cidrs", {"10.0.0.1/8"}}}, "host bits"},
      {json{{"domains", {"10.0.0.1"}}}, "addresses go in cidrs"},
      {json::array(), "expected"},
  };
  for (const auto& [j, fragment] : bad) {
    auto parsed = ParseEgressRules(j, "egress", defaults);
    ASSERT_FALSE(parsed.ok()) << j.dump();
    EXPECT_NE(parsed.status().message().find(fragment), std::string::npos) << parsed.status().message();
  }
}

TEST(EgressRulesParse, CapsRefuseWhatTheyDoNotCoverAndNameIt) {
  const EgressRules caps = Rules({{"domains", {"*.example.test", "registry.test"}}, {"ports", {443, 80}},
                                  {"cidrs", {"10.77.0.0/16"}}});
  EXPECT_TRUE(CheckWithinCaps(Rules({{"domains", {"www.example.test", "registry.test"}}, {"cidrs", {"10.77.0.5"}}}),
                              caps, "limits.egress")
                  .ok());
  const std::pair<json, const char*> outside[] = {
      {json{{"domains", {"example.test"}}}, "\"example.test\""},
      {json{{"domains", {"*"}}}, "\"*\""},
      {json{{"ports", {22}}}, "port 22"},
      {json{{"cidrs", {"10.0.0.0/8"}}}, "10.0.0.0/8"},
  };
  for (const auto& [j, fragment] : outside) {
    Status status = CheckWithinCaps(Rules(j), caps, "limits.egress");
    ASSERT_FALSE(status.ok()) << j.dump();
    EXPECT_NE(status.message().find(fragment), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("limits.egress"), std::string::npos) << status.message();
  }
}

TEST(EgressRulesParse, NarrowToCapsKeepsOnlyWhatIsCovered) {
  const EgressRules caps = Rules({{"domains", {"*.example.test"}}, {"ports", {443}}, {"cidrs", {"10.77.0.0/16"}}});
  const EgressRules narrowed = NarrowToCaps(
      Rules({{"domains", {"www.example.test", "evil.test", "*"}}, {"ports", {443, 80}}, {"cidrs", {"10.77.0.5", "10.0.0.0/8"}}}),
      caps);
  EXPECT_EQ(narrowed.domains, (std::vector<std::string>{"www.example.test"}));
  EXPECT_EQ(narrowed.ports, (std::vector<uint16_t>{443}));
  ASSERT_EQ(narrowed.cidrs.size(), 1u);
  EXPECT_EQ(narrowed.cidrs[0].ToString(), "10.77.0.5/32");
  EXPECT_TRUE(CheckWithinCaps(narrowed, caps, "caps").ok());
}

TEST(EgressDecide, HostsPortsAndAddresses) {
  const EgressRules rules = Rules({{"domains", {"*.example.test", "registry.test"}}, {"ports", {443}},
                                   {"cidrs", {"10.77.0.0/16"}}});
  HostDecision ok = DecideHost(rules, "WWW.example.test", 443);
  EXPECT_TRUE(ok.allowed);
  EXPECT_EQ(ok.rule, "*.example.test");
  HostDecision port = DecideHost(rules, "registry.test", 80);
  EXPECT_FALSE(port.allowed);
  EXPECT_EQ(port.reason, "port");
  HostDecision other = DecideHost(rules, "evil.test", 443);
  EXPECT_FALSE(other.allowed);
  EXPECT_EQ(other.reason, "domain");
  EXPECT_NE(other.message.find("evil.test"), std::string::npos);
  // A literal address needs a CIDR rule; a public one is no exception.
  HostDecision literal = DecideHost(rules, "203.0.113.10", 443);
  EXPECT_FALSE(literal.allowed);
  EXPECT_EQ(literal.reason, "address");
  EXPECT_TRUE(DecideHost(rules, "10.77.0.5", 443).allowed);
  EXPECT_TRUE(DecideHost(Rules({{"cidrs", {"fd00::/8"}}, {"ports", {443}}}), "[fd00::1]", 443).allowed);
  // After resolution.
  EXPECT_TRUE(DecideAddress(rules, Ip("203.0.113.10")).allowed);
  AddressDecision metadata = DecideAddress(rules, Ip("169.254.169.254"));
  EXPECT_FALSE(metadata.allowed);
  EXPECT_EQ(metadata.reason, "private_address");
  EXPECT_NE(metadata.message.find("cloud metadata"), std::string::npos);
  EXPECT_FALSE(DecideAddress(rules, Ip("127.0.0.1")).allowed);
  EXPECT_TRUE(DecideAddress(rules, Ip("10.77.0.5")).allowed);   // named by a rule
  EXPECT_FALSE(DecideAddress(rules, Ip("10.78.0.5")).allowed);  // its neighbour is not
  // No rules: nothing at all.
  EXPECT_FALSE(DecideHost(EgressRules{}, "example.test", 443).allowed);
}

}  // namespace
}  // namespace corral::supervisor
