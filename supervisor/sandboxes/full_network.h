// FullNetwork: a sandbox's "full" network mode (DESIGN.md §3 Network), for operators who allow
// it. Instead of only `lo`, the sandbox gets a real interface, routed and NATed to the host's
// uplink, behind a filter that still refuses what the egress proxy refuses:
//
//   network.netns (default: corrald's own)       the sandbox's network namespace
//   crl<N>  <subnet>.4N+1/30   <---- veth ---->  eth0  <subnet>.4N+2/30, default route via .4N+1
//
//   table inet corral_<sandbox id>, in network.netns:
//     forward      from crl<N>: only its own source address and only IPv4 (else dropped); DNS
//                  (port 53) to the network.dns servers and the CIDRs of its egress rules
//                  accepted; every non-public range (egress_policy.h NonPublicV4Ranges) and the
//                  whole subnet (the other sandboxes) refused with ICMP admin-prohibited, so a
//                  client fails at once; the rest accepted. Towards crl<N>: replies only (the
//                  rest refused the same way).
//     input        from crl<N> to network.netns itself (the gateway, the host's addresses):
//                  replies only; the rest refused.
//     postrouting  its address masqueraded out of any other interface.
//
// The kernel is the only record, so nothing is lost with the daemon: slot N is the lowest with no
// crl<N> link, the link's ifalias is "corral:<sandbox id>", and the table is named after the
// sandbox. The veth goes when the sandbox's network namespace goes (its last process exits);
// Detach removes the table (and the link, if the sandbox still runs); Cleanup removes the links
// and tables of sandboxes that are not running (recovery). IPv4 forwarding is switched on in
// network.netns at the first Attach (logged).
//
// This is the orchestration: slots, names, the ruleset, what to undo. Links and addresses are made
// with libnl (isolation/net/netlink.h), the filter with libnftables (isolation/net/nftables.h),
// from a thread that enters the namespaces (isolation/netns.h; setns affects only that thread).
// Every call blocks on netlink: run them on the worker pool, never on the event loop. Calls are
// serialized.
#pragma once

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/unique_fd.h"
#include "supervisor/egress/egress_policy.h"

namespace corral::supervisor {

inline constexpr char kNetworkLoopback[] = "loopback";
inline constexpr char kNetworkFull[] = "full";
inline constexpr char kFullNetworkUnsafe[] = "full_network";  // the create request's "unsafe" entry
inline constexpr char kFullNetworkLinkPrefix[] = "crl";
inline constexpr char kFullNetworkAliasPrefix[] = "corral:";
inline constexpr char kFullNetworkTablePrefix[] = "corral_";

struct FullNetworkConfig {
  std::string netns;             // the path of the namespace for the host side; "" = corrald's own
  Cidr subnet;                   // IPv4, prefix at most 30: one /30 per sandbox
  std::vector<IpAddress> dns;    // IPv4 nameservers the sandbox may reach on port 53
};

// What a sandbox got (also its "network" event).
struct NetworkAttachment {
  std::string interface;  // crl<N>, in network.netns
  std::string address;    // the sandbox's, on its eth0
  std::string gateway;    // the host side's
};

class FullNetwork {
 public:
  // Opens network.netns (an error names the path when it cannot) and checks the subnet.
  static StatusOr<std::unique_ptr<FullNetwork>> Create(FullNetworkConfig config);
  ~FullNetwork();

  // Gives the running sandbox whose init's pidfd is `init_pidfd` its eth0, address, default
  // route, filter and NAT; `allowed` are its egress CIDRs (IPv6 ones are ignored: the sandbox has
  // no IPv6 route). On error nothing of it is left.
  StatusOr<NetworkAttachment> Attach(const std::string& sandbox_id, int init_pidfd,
                                     const std::vector<Cidr>& allowed);
  // Replaces the filter of an attached sandbox (its egress CIDRs changed); the next connection
  // is decided by the new one. A sandbox that is not attached: nothing to do.
  Status Update(const std::string& sandbox_id, const std::vector<Cidr>& allowed);
  // Removes the sandbox's filter and NAT, and its link if the sandbox still runs. Idempotent.
  Status Detach(const std::string& sandbox_id);
  // Removes every link and table of a sandbox not in `running` (at recovery).
  Status Cleanup(const std::set<std::string>& running);

  // What the kernel holds now (for tests and `corral doctor`): sandbox ids with a link, and
  // with a table.
  StatusOr<std::set<std::string>> AttachedLinks();
  StatusOr<std::set<std::string>> Tables();

  const FullNetworkConfig& config() const { return config_; }

 private:
  FullNetwork(FullNetworkConfig config, UniqueFd netns);

  FullNetworkConfig config_;
  UniqueFd netns_;  // the host side's namespace (corrald's own when network.netns is "")
  std::mutex mu_;
  bool forwarding_checked_ = false;
};

// The nftables ruleset of one sandbox (a "table inet corral_<id> { ... }" block), for Attach and
// Update; public for the unit tests.
std::string FullNetworkRuleset(const std::string& sandbox_id, const std::string& interface,
                               const std::string& address, const Cidr& subnet,
                               const std::vector<IpAddress>& dns, const std::vector<Cidr>& allowed);

}  // namespace corral::supervisor
