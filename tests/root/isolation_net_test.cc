// isolation/netns.h and isolation/net/ against the real kernel. Child processes, each in a network
// namespace of its own until killed, play the namespaces; what the kernel holds afterwards (a
// socket's namespace, links, addresses, routes, nftables tables) is read back with ioctl
// SIOCGSKNS, /proc, iproute2 and nft, not with the code under test. Every refusal has a control.
#include <fcntl.h>
#include <linux/sockios.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "isolation/net/netlink.h"
#include "isolation/net/nftables.h"
#include "isolation/netns.h"
#include "tests/root/netns_child_util.h"

namespace corral::isolation {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A shell command's stdout, or "<failed>" when it failed.
std::string Shell(const std::string& command) {
  FILE* pipe = popen((command + " 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) return "<failed>";
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  if (pclose(pipe) != 0) return "<failed>";
  return out;
}

ino_t InodeOf(int fd) {
  struct stat st {};
  return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

ino_t ThreadNetns() {
  struct stat st {};
  return stat("/proc/thread-self/ns/net", &st) == 0 ? st.st_ino : 0;
}

// The network namespace a socket was made in (SIOCGSKNS), by inode.
ino_t SocketNetns(int sock) {
  UniqueFd ns(ioctl(sock, SIOCGSKNS));
  return ns ? InodeOf(ns.get()) : 0;
}

class IsolationNetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (setns, network namespaces, netlink)";
    a_ = test::NetnsChild::Start();
    b_ = test::NetnsChild::Start();
    ASSERT_TRUE(a_ && b_ && a_->file && b_->file && a_->pidfd);
    auto home = OpenThreadNetworkNamespace("open the test's network namespace");
    ASSERT_TRUE(home.ok()) << home.status().ToString();
    home_ = std::move(*home);
  }
  std::unique_ptr<test::NetnsChild> a_, b_;
  UniqueFd home_;
};

// ---- isolation/netns.h

TEST_F(IsolationNetTest, SocketInNetworkNamespaceIsMadeThereAndTheThreadComesBack) {
  const ino_t home = ThreadNetns();
  auto sock = SocketInNetworkNamespace(a_->file.get(), home_.get(), AF_INET, SOCK_STREAM | SOCK_CLOEXEC, "a");
  ASSERT_TRUE(sock.ok()) << sock.status().ToString();
  EXPECT_EQ(SocketNetns(sock->get()), InodeOf(a_->file.get()));
  EXPECT_EQ(ThreadNetns(), home);
  // Control: a socket made here is in the test's own namespace, not a's.
  UniqueFd here(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_EQ(SocketNetns(here.get()), home);
  EXPECT_NE(home, InodeOf(a_->file.get()));
}

TEST_F(IsolationNetTest, WhatIsNoNamespaceIsRefusedAndTheThreadStays) {
  const ino_t home = ThreadNetns();
  UniqueFd not_a_namespace(open("/proc/self/status", O_RDONLY | O_CLOEXEC));
  Status entered = EnterNetworkNamespace(not_a_namespace.get(), "enter x");
  EXPECT_EQ(entered.error_number(), EINVAL) << entered.ToString();
  EXPECT_THAT(entered.message(), HasSubstr("enter x"));
  auto sock = SocketInNetworkNamespace(not_a_namespace.get(), home_.get(), AF_INET, SOCK_STREAM, "x.netns");
  ASSERT_FALSE(sock.ok());
  EXPECT_THAT(sock.status().message(), HasSubstr("setns x.netns"));
  Status checked = CheckNetworkNamespaceEntry(-1, home_.get(), "x.netns: /nowhere");
  EXPECT_EQ(checked.error_number(), EBADF);
  EXPECT_THAT(checked.message(), HasSubstr("x.netns: /nowhere (setns)"));
  EXPECT_EQ(ThreadNetns(), home);
  // Control: a real namespace passes the check, and the thread is back home after it.
  Status ok = CheckNetworkNamespaceEntry(a_->file.get(), home_.get(), "a");
  EXPECT_TRUE(ok.ok()) << ok.ToString();
  EXPECT_EQ(ThreadNetns(), home);
}

TEST_F(IsolationNetTest, InNetworkNamespaceRunsOnAThreadThereByFileOrPidfd) {
  const ino_t home = ThreadNetns();
  auto there = InNetworkNamespace(a_->file.get(), "enter a", [] { return StatusOr<ino_t>(ThreadNetns()); });
  ASSERT_TRUE(there.ok()) << there.status().ToString();
  EXPECT_EQ(*there, InodeOf(a_->file.get()));
  auto by_pidfd = InNetworkNamespace(a_->pidfd.get(), "enter a", [] { return StatusOr<ino_t>(ThreadNetns()); });
  ASSERT_TRUE(by_pidfd.ok()) << by_pidfd.status().ToString();
  EXPECT_EQ(*by_pidfd, InodeOf(a_->file.get()));
  EXPECT_EQ(ThreadNetns(), home);
  // Control: a bad fd is refused before fn runs.
  bool ran = false;
  Status refused = InNetworkNamespace(-1, "enter nowhere", [&] {
    ran = true;
    return Status();
  });
  EXPECT_EQ(refused.error_number(), EBADF);
  EXPECT_FALSE(ran);
}

// ---- isolation/net/netlink.h

TEST_F(IsolationNetTest, RouteSocketMakesAVethPairWithAddressesAliasAndRoute) {
  Status made = InNetworkNamespace(a_->file.get(), "enter a", [&]() -> Status {
    ASSIGN_OR_RETURN(net::RouteSocket host, net::RouteSocket::Connect("a"));
    RETURN_IF_ERROR(host.AddVethPair("tveth0", "eth0", b_->file.get()));
    ASSIGN_OR_RETURN(int ifindex, net::InterfaceIndex("tveth0"));
    RETURN_IF_ERROR(host.SetUp(ifindex, "tveth0", "corral:test"));
    return host.AddAddress(ifindex, 0x0a630001, 30, "tveth0");  // 10.99.0.1/30
  });
  ASSERT_TRUE(made.ok()) << made.ToString();
  Status inside = InNetworkNamespace(b_->file.get(), "enter b", [&]() -> Status {
    ASSIGN_OR_RETURN(net::RouteSocket sock, net::RouteSocket::Connect("b"));
    ASSIGN_OR_RETURN(int eth0, sock.LinkIndex("eth0", "eth0 in b"));
    RETURN_IF_ERROR(sock.AddAddress(eth0, 0x0a630002, 30, "eth0"));
    RETURN_IF_ERROR(sock.SetUp(eth0, "eth0"));
    return sock.AddDefaultRoute(eth0, 0x0a630001);
  });
  ASSERT_TRUE(inside.ok()) << inside.ToString();

  EXPECT_THAT(Shell(a_->In("ip -j -d link show tveth0")), HasSubstr("\"ifalias\":\"corral:test\""));
  EXPECT_THAT(Shell(a_->In("ip -o addr show tveth0")), HasSubstr("10.99.0.1/30"));
  EXPECT_THAT(Shell(b_->In("ip -o addr show eth0")), HasSubstr("10.99.0.2/30"));
  EXPECT_THAT(Shell(b_->In("ip route show default")), HasSubstr("default via 10.99.0.1 dev eth0"));
  auto links = InNetworkNamespace(a_->file.get(), "enter a", []() -> StatusOr<std::vector<net::LinkInfo>> {
    ASSIGN_OR_RETURN(net::RouteSocket sock, net::RouteSocket::Connect("a"));
    return sock.Links();
  });
  ASSERT_TRUE(links.ok()) << links.status().ToString();
  std::set<std::string> seen;
  for (const auto& link : *links) seen.insert(link.name + "=" + link.alias);
  EXPECT_EQ(seen, (std::set<std::string>{"lo=", "tveth0=corral:test"}));
}

TEST_F(IsolationNetTest, RouteSocketRefusesWhatIsThereOrMissingAndDeletesOnce) {
  Status checked = InNetworkNamespace(a_->file.get(), "enter a", [&]() -> Status {
    ASSIGN_OR_RETURN(net::RouteSocket sock, net::RouteSocket::Connect("a"));
    RETURN_IF_ERROR(sock.AddVethPair("tveth1", "eth1", b_->file.get()));
    Status again = sock.AddVethPair("tveth1", "eth1", b_->file.get());
    EXPECT_FALSE(again.ok());
    EXPECT_THAT(again.message(), HasSubstr("create veth tveth1"));
    EXPECT_THAT(sock.LinkIndex("nope0", "nope0 here").status().message(), HasSubstr("find nope0 here"));
    EXPECT_EQ(net::InterfaceIndex("nope0").status().error_number(), ENODEV);
    ASSIGN_OR_RETURN(int ifindex, net::InterfaceIndex("tveth1"));
    EXPECT_THAT(Shell(b_->In("ip -o link show")), HasSubstr("eth1"));
    RETURN_IF_ERROR(sock.DeleteLink(ifindex, "tveth1"));
    EXPECT_EQ(net::InterfaceIndex("tveth1").status().error_number(), ENODEV);
    return sock.DeleteLink(ifindex, "tveth1");  // gone already: fine
  });
  EXPECT_TRUE(checked.ok()) << checked.ToString();
  // The peer went with it.
  const std::string links = Shell(b_->In("ip -o link show"));
  EXPECT_THAT(links, HasSubstr("lo:"));
  EXPECT_THAT(links, Not(HasSubstr("eth1")));
}

TEST_F(IsolationNetTest, EnableIpv4ForwardingOnlyInTheNamespace) {
  const std::string host_before = Shell("cat /proc/sys/net/ipv4/ip_forward");
  if (Shell(b_->In("cat /proc/sys/net/ipv4/ip_forward")) != "0\n") {
    GTEST_SKIP() << "new network namespaces start with forwarding on here (net.core.devconf_inherit_init_net)";
  }
  auto first = InNetworkNamespace(a_->file.get(), "enter a", [] { return net::EnableIpv4Forwarding(); });
  auto second = InNetworkNamespace(a_->file.get(), "enter a", [] { return net::EnableIpv4Forwarding(); });
  ASSERT_TRUE(first.ok() && second.ok()) << first.status().ToString();
  EXPECT_TRUE(*first);    // a new namespace starts with forwarding off
  EXPECT_FALSE(*second);  // on already
  EXPECT_EQ(Shell(a_->In("cat /proc/sys/net/ipv4/ip_forward")), "1\n");
  // Control: the other namespace and the test's own are as they were.
  EXPECT_EQ(Shell(b_->In("cat /proc/sys/net/ipv4/ip_forward")), "0\n");
  EXPECT_EQ(Shell("cat /proc/sys/net/ipv4/ip_forward"), host_before);
}

// ---- isolation/net/nftables.h

TEST_F(IsolationNetTest, TablesAreReplacedListedAndDeleted) {
  if (Shell("command -v nft") == "<failed>" || Shell(a_->In("nft list tables")) == "<failed>") {
    GTEST_SKIP() << "needs nft (package nftables) working in a network namespace";
  }
  const std::string v1 = "table inet ttest_a {\n  chain input {\n    type filter hook input priority 0; policy accept;\n"
                         "    tcp dport 1111 drop\n  }\n}\n";
  const std::string v2 = "table inet ttest_a {\n  chain input {\n    type filter hook input priority 0; policy accept;\n"
                         "    tcp dport 2222 drop\n  }\n}\n";
  Status done = InNetworkNamespace(a_->file.get(), "enter a", [&]() -> Status {
    RETURN_IF_ERROR(net::ReplaceTable("inet", "ttest_a", v1));
    RETURN_IF_ERROR(net::ReplaceTable("inet", "ttest_a", v2));
    return net::RunNft("add table inet other_b").status();
  });
  ASSERT_TRUE(done.ok()) << done.ToString();
  const std::string rules = Shell(a_->In("nft list table inet ttest_a"));
  EXPECT_THAT(rules, HasSubstr("tcp dport 2222 drop"));
  EXPECT_THAT(rules, Not(HasSubstr("1111")));
  auto listed = InNetworkNamespace(a_->file.get(), "enter a", [] { return net::ListTables("inet", "ttest_"); });
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(*listed, std::set<std::string>{"a"});  // not other_b
  // The test's own namespace has none of it.
  auto here = net::ListTables("inet", "ttest_");
  ASSERT_TRUE(here.ok());
  EXPECT_TRUE(here->empty());

  Status deleted = InNetworkNamespace(a_->file.get(), "enter a", []() -> Status {
    RETURN_IF_ERROR(net::DeleteTable("inet", "ttest_a"));
    Status again = net::DeleteTable("inet", "ttest_a");
    EXPECT_EQ(again.error_number(), EIO);
    EXPECT_THAT(again.message(), HasSubstr("nftables: "));
    EXPECT_EQ(net::RunNft("this is not nft").status().error_number(), EIO);
    return net::ReplaceTable("inet", "ttest_gone", "");  // removes it whether it is there or not
  });
  EXPECT_TRUE(deleted.ok()) << deleted.ToString();
  const std::string tables = Shell(a_->In("nft list tables"));
  EXPECT_THAT(tables, HasSubstr("other_b"));
  EXPECT_THAT(tables, Not(HasSubstr("ttest_")));
}

}  // namespace
}  // namespace corral::isolation
