// The nftables ruleset of a full-network sandbox, as text (the kernel's view of it is checked by
// tests/root/full_network_test.cc).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "supervisor/sandboxes/full_network.h"

namespace corral::supervisor {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Ruleset(const std::vector<std::string>& dns, const std::vector<std::string>& allowed) {
  std::vector<IpAddress> servers;
  for (const auto& s : dns) servers.push_back(*IpAddress::Parse(s));
  std::vector<Cidr> ranges;
  for (const auto& c : allowed) ranges.push_back(*Cidr::Parse(c));
  return FullNetworkRuleset("sb_x", "crl3", "10.231.0.14", *Cidr::Parse("10.231.0.0/16"), servers, ranges);
}

TEST(FullNetworkRulesetTest, RefusesEveryNonPublicRangeAndTheSubnet) {
  const std::string rules = Ruleset({}, {});
  EXPECT_THAT(rules, HasSubstr("table inet corral_sb_x {"));
  EXPECT_THAT(rules, HasSubstr("iifname \"crl3\" ip saddr != 10.231.0.14 drop"));
  EXPECT_THAT(rules, HasSubstr("iifname \"crl3\" meta nfproto != ipv4 drop"));
  EXPECT_THAT(rules, HasSubstr("iifname \"crl3\" ip daddr 10.231.0.0/16 reject with icmpx type admin-prohibited"));
  for (const char* range : {"10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
                            "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4", "0.0.0.0/8"}) {
    const std::string element = " " + std::string(range);
    EXPECT_TRUE(rules.find(element + ",") != std::string::npos || rules.find(element + " }") != std::string::npos)
        << range;
  }
  // Covered by 169.254.0.0/16: nftables refuses overlapping elements in one set.
  EXPECT_THAT(rules, Not(HasSubstr("169.254.169.254")));
  // Nothing unsolicited towards the sandbox, nothing to the host side itself.
  EXPECT_THAT(rules, HasSubstr("oifname \"crl3\" ct state established,related accept\n    oifname \"crl3\" reject"));
  EXPECT_THAT(rules, HasSubstr("chain input {"));
  EXPECT_THAT(rules, HasSubstr("ip saddr 10.231.0.14 oifname != \"crl3\" masquerade"));
  // No DNS servers, no allowed ranges: no rules for them.
  EXPECT_THAT(rules, Not(HasSubstr("dport 53")));
  EXPECT_THAT(rules, Not(HasSubstr("} accept")));
}

TEST(FullNetworkRulesetTest, AcceptsDnsAndAllowedRangesBeforeTheRefusals) {
  const std::string rules = Ruleset({"10.0.0.2", "192.0.2.53"}, {"10.77.0.5/32", "10.77.0.0/16", "fd00::/8"});
  const size_t dns = rules.find("ip daddr { 10.0.0.2, 192.0.2.53 } meta l4proto { tcp, udp } th dport 53 accept");
  const size_t allowed = rules.find("ip daddr { 10.77.0.0/16 } accept");  // the /32 inside it collapsed
  const size_t refused = rules.find("reject with icmpx");
  ASSERT_NE(dns, std::string::npos) << rules;
  ASSERT_NE(allowed, std::string::npos) << rules;
  EXPECT_LT(dns, refused);
  EXPECT_LT(allowed, refused);
  EXPECT_THAT(rules, Not(HasSubstr("fd00")));  // no IPv6 route in the sandbox: no IPv6 rule
}

}  // namespace
}  // namespace corral::supervisor
