// FullNetwork against the real kernel: a network namespace of the test's own plays network.netns
// (the host side), and a child process in a new network namespace plays a sandbox's init. What
// the kernel holds afterwards (links, addresses, routes, nftables tables) is read back with
// iproute2 and nft, not with the code under test. The packet-level behaviour (NAT, refusals,
// DNS) is tried end to end by tests/e2e/test_full_network.py.
#include "supervisor/sandboxes/full_network.h"
#include "tests/root/netns_child_util.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace corral::supervisor {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Runs a shell command; returns its stdout, or nullopt when it failed.
std::optional<std::string> Shell(const std::string& command) {
  FILE* pipe = popen((command + " 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  if (pclose(pipe) != 0) return std::nullopt;
  return out;
}

// A stand-in for a sandbox's init.
using FakeSandbox = test::NetnsChild;

class FullNetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces, netlink, nftables)";
    if (!Shell("command -v nft") || !Shell("command -v nsenter")) {
      GTEST_SKIP() << "needs nft (package nftables) and nsenter (util-linux)";
    }
    static int counter = 0;
    netns_name_ = "corral-fnt-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    ASSERT_TRUE(Shell("ip netns add " + netns_name_)) << "ip netns add " << netns_name_;
    made_netns_ = true;
    // A kernel without nf_tables (some guests): say so instead of failing every test.
    if (!Shell("ip netns exec " + netns_name_ + " nft list tables")) {
      GTEST_SKIP() << "nftables does not work in a network namespace here (nf_tables module missing?)";
    }
  }

  void TearDown() override {
    sandboxes_.clear();  // kill them first: their veths go with their namespaces
    if (made_netns_) (void)Shell("ip netns delete " + netns_name_);
  }

  std::unique_ptr<FullNetwork> Make(const std::string& subnet, std::vector<std::string> dns = {}) {
    FullNetworkConfig config;
    config.netns = "/run/netns/" + netns_name_;
    auto cidr = Cidr::Parse(subnet);
    EXPECT_TRUE(cidr.ok());
    config.subnet = *cidr;
    for (const auto& server : dns) config.dns.push_back(*IpAddress::Parse(server));
    auto made = FullNetwork::Create(config);
    EXPECT_TRUE(made.ok()) << made.status().ToString();
    return made.ok() ? std::move(*made) : nullptr;
  }

  FakeSandbox& NewSandbox() {
    auto sandbox = FakeSandbox::Start();
    EXPECT_NE(sandbox, nullptr);
    sandboxes_.push_back(std::move(sandbox));
    return *sandboxes_.back();
  }

  std::string InHost(const std::string& command) const { return "ip netns exec " + netns_name_ + " " + command; }

  // The nftables tables of the host side's namespace, by name.
  std::vector<std::string> HostTables() {
    std::vector<std::string> names;
    auto out = Shell(InHost("nft -j list tables"));
    if (!out) return names;
    auto j = nlohmann::json::parse(*out, nullptr, false);
    for (const auto& entry : j.value("nftables", nlohmann::json::array())) {
      if (entry.contains("table")) names.push_back(entry["table"].value("family", "") + " " + entry["table"].value("name", ""));
    }
    return names;
  }

  // Interface names of the host side's namespace.
  std::vector<std::string> HostLinks() {
    std::vector<std::string> names;
    auto out = Shell("ip -n " + netns_name_ + " -j link show");
    if (!out) return names;
    for (const auto& link : nlohmann::json::parse(*out, nullptr, false)) names.push_back(link.value("ifname", ""));
    return names;
  }

  std::string netns_name_;
  bool made_netns_ = false;
  std::vector<std::unique_ptr<FakeSandbox>> sandboxes_;
};

TEST_F(FullNetworkTest, AttachGivesTheSandboxEth0ItsAddressARouteAndAFilter) {
  auto network = Make("10.99.0.0/24", {"192.0.2.53"});
  ASSERT_NE(network, nullptr);
  FakeSandbox& sandbox = NewSandbox();
  // Before: the sandbox has only lo, the host side no link or table of ours.
  EXPECT_THAT(*Shell(sandbox.In("ip -o link show")), Not(HasSubstr("eth0")));
  EXPECT_THAT(HostTables(), Not(::testing::Contains("inet corral_sb_one")));

  auto attached = network->Attach("sb_one", sandbox.pidfd.get(), {*Cidr::Parse("10.77.0.5/32")});
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  EXPECT_EQ(attached->interface, "crl0");
  EXPECT_EQ(attached->address, "10.99.0.2");
  EXPECT_EQ(attached->gateway, "10.99.0.1");

  // Inside: eth0, up, with the address and a default route via the gateway.
  auto addr = Shell(sandbox.In("ip -j addr show eth0"));
  ASSERT_TRUE(addr);
  auto addr_json = nlohmann::json::parse(*addr);
  ASSERT_EQ(addr_json.size(), 1u);
  EXPECT_THAT(addr_json[0].value("flags", nlohmann::json::array()).dump(), HasSubstr("\"UP\""));
  EXPECT_THAT(*addr, HasSubstr("\"local\":\"10.99.0.2\",\"prefixlen\":30"));
  EXPECT_THAT(*Shell(sandbox.In("ip route show default")), HasSubstr("default via 10.99.0.1 dev eth0"));

  // The host side: crl0 with our alias and the gateway address, forwarding on, the table.
  auto link = Shell("ip -n " + netns_name_ + " -j -d link show crl0");
  ASSERT_TRUE(link);
  EXPECT_THAT(*link, HasSubstr("\"ifalias\":\"corral:sb_one\""));
  EXPECT_THAT(*Shell("ip -n " + netns_name_ + " -o addr show crl0"), HasSubstr("10.99.0.1/30"));
  EXPECT_EQ(*Shell(InHost("cat /proc/sys/net/ipv4/ip_forward")), "1\n");
  EXPECT_THAT(HostTables(), ::testing::Contains("inet corral_sb_one"));
  const std::string rules = *Shell(InHost("nft list table inet corral_sb_one"));
  EXPECT_THAT(rules, HasSubstr("iifname \"crl0\" ip saddr != 10.99.0.2 drop"));
  EXPECT_THAT(rules, HasSubstr("ip daddr 10.77.0.5 accept"));
  EXPECT_THAT(rules, HasSubstr("ip daddr 192.0.2.53 meta l4proto { tcp, udp } th dport 53 accept"));
  EXPECT_THAT(rules, HasSubstr("169.254.0.0/16"));
  EXPECT_THAT(rules, HasSubstr("masquerade"));
  EXPECT_EQ(*network->Tables(), std::set<std::string>{"sb_one"});
  EXPECT_EQ(*network->AttachedLinks(), std::set<std::string>{"sb_one"});
}

TEST_F(FullNetworkTest, EachSandboxGetsItsOwnSlotUntilTheSubnetIsFull) {
  auto network = Make("10.99.1.0/29");  // two /30s
  ASSERT_NE(network, nullptr);
  FakeSandbox& a = NewSandbox();
  FakeSandbox& b = NewSandbox();
  FakeSandbox& c = NewSandbox();
  auto first = network->Attach("sb_a", a.pidfd.get(), {});
  auto second = network->Attach("sb_b", b.pidfd.get(), {});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(first->address, "10.99.1.2");
  EXPECT_EQ(second->address, "10.99.1.6");
  EXPECT_EQ(second->interface, "crl1");
  auto third = network->Attach("sb_c", c.pidfd.get(), {});
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().error_number(), EAGAIN);
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("10.99.1.0/29"));
  // Nothing of the refused one is left.
  EXPECT_THAT(HostTables(), Not(::testing::Contains("inet corral_sb_c")));
  EXPECT_THAT(*Shell(c.In("ip -o link show")), Not(HasSubstr("eth0")));

  // A slot comes free when its sandbox goes; the next one takes it.
  a.Kill();
  { auto s = network->Detach("sb_a"); ASSERT_TRUE(s.ok()) << s.ToString(); }
  auto again = network->Attach("sb_c", c.pidfd.get(), {});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->interface, "crl0");
}

TEST_F(FullNetworkTest, DetachRemovesTheTableAndTheLinkAndIsIdempotent) {
  auto network = Make("10.99.2.0/24");
  ASSERT_NE(network, nullptr);
  FakeSandbox& sandbox = NewSandbox();
  FakeSandbox& other = NewSandbox();
  ASSERT_TRUE(network->Attach("sb_gone", sandbox.pidfd.get(), {}).ok());
  ASSERT_TRUE(network->Attach("sb_kept", other.pidfd.get(), {}).ok());
  { auto s = network->Detach("sb_gone"); ASSERT_TRUE(s.ok()) << s.ToString(); }
  EXPECT_THAT(HostTables(), Not(::testing::Contains("inet corral_sb_gone")));
  EXPECT_THAT(*Shell(sandbox.In("ip -o link show")), Not(HasSubstr("eth0")));  // the pair went
  EXPECT_TRUE(network->Detach("sb_gone").ok());
  // The other sandbox is untouched.
  EXPECT_THAT(HostTables(), ::testing::Contains("inet corral_sb_kept"));
  EXPECT_THAT(*Shell(other.In("ip -o addr show eth0")), HasSubstr("10.99.2.6/30"));
}

TEST_F(FullNetworkTest, CleanupRemovesWhatBelongsToNoRunningSandbox) {
  auto network = Make("10.99.3.0/24");
  ASSERT_NE(network, nullptr);
  FakeSandbox& running = NewSandbox();
  FakeSandbox& died = NewSandbox();
  FakeSandbox& stale = NewSandbox();
  ASSERT_TRUE(network->Attach("sb_running", running.pidfd.get(), {}).ok());
  ASSERT_TRUE(network->Attach("sb_died", died.pidfd.get(), {}).ok());
  ASSERT_TRUE(network->Attach("sb_stale", stale.pidfd.get(), {}).ok());
  // One sandbox died with the daemon: its veth went with it, its table stayed. Another one's
  // process lives on but the store says it is not running: its link and table both go.
  died.Kill();
  EXPECT_THAT(HostTables(), ::testing::Contains("inet corral_sb_died"));
  { auto s = network->Cleanup({"sb_running"}); ASSERT_TRUE(s.ok()) << s.ToString(); }
  EXPECT_EQ(*network->Tables(), std::set<std::string>{"sb_running"});
  EXPECT_EQ(*network->AttachedLinks(), std::set<std::string>{"sb_running"});
  EXPECT_THAT(*Shell(stale.In("ip -o link show")), Not(HasSubstr("eth0")));
  EXPECT_THAT(*Shell(running.In("ip -o addr show eth0")), HasSubstr("10.99.3.2/30"));
  // A table that is not ours is never touched.
  ASSERT_TRUE(Shell(InHost("nft add table inet someone_else")));
  ASSERT_TRUE(network->Cleanup({}).ok());
  EXPECT_THAT(HostTables(), ::testing::Contains("inet someone_else"));
  EXPECT_THAT(HostTables(), Not(::testing::Contains("inet corral_sb_running")));
}

TEST_F(FullNetworkTest, UpdateReplacesTheAllowedRangesOfAnAttachedSandbox) {
  auto network = Make("10.99.4.0/24");
  ASSERT_NE(network, nullptr);
  FakeSandbox& sandbox = NewSandbox();
  ASSERT_TRUE(network->Attach("sb_upd", sandbox.pidfd.get(), {}).ok());
  EXPECT_THAT(*Shell(InHost("nft list table inet corral_sb_upd")), Not(HasSubstr("10.77.0.0/16")));
  ASSERT_TRUE(network->Update("sb_upd", {*Cidr::Parse("10.77.0.0/16"), *Cidr::Parse("fd00::/8")}).ok());
  const std::string rules = *Shell(InHost("nft list table inet corral_sb_upd"));
  EXPECT_THAT(rules, HasSubstr("ip daddr 10.77.0.0/16 accept"));
  EXPECT_THAT(rules, Not(HasSubstr("fd00")));  // no IPv6 route: IPv6 ranges have no rule
  ASSERT_TRUE(network->Update("sb_upd", {}).ok());
  EXPECT_THAT(*Shell(InHost("nft list table inet corral_sb_upd")), Not(HasSubstr("10.77.0.0/16")));
  // Not attached: nothing to do, and nothing made.
  ASSERT_TRUE(network->Update("sb_nothere", {*Cidr::Parse("10.77.0.0/16")}).ok());
  EXPECT_THAT(HostTables(), Not(::testing::Contains("inet corral_sb_nothere")));
}

TEST_F(FullNetworkTest, BadInputIsRefused) {
  FullNetworkConfig config;
  config.netns = "/run/netns/" + netns_name_ + "-missing";
  config.subnet = *Cidr::Parse("10.99.5.0/24");
  auto missing = FullNetwork::Create(config);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(config.netns));
  config.netns = "/run/netns/" + netns_name_;
  config.subnet = *Cidr::Parse("10.99.5.0/31");
  EXPECT_FALSE(FullNetwork::Create(config).ok());
  config.subnet = *Cidr::Parse("10.99.5.0/24");
  auto network = FullNetwork::Create(config);
  ASSERT_TRUE(network.ok());  // the positive control
  FakeSandbox& sandbox = NewSandbox();
  auto bad = (*network)->Attach("sb x; flush ruleset", sandbox.pidfd.get(), {});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().error_number(), EINVAL);
}

}  // namespace
}  // namespace corral::supervisor
