#include "supervisor/sandboxes/full_network.h"

#include <fcntl.h>

#include <cerrno>
#include <string_view>

#include "common/log.h"
#include "isolation/net/netlink.h"
#include "isolation/net/nftables.h"
#include "isolation/netns.h"

namespace corral::supervisor {
namespace {

using isolation::net::RouteSocket;

constexpr std::string_view kTableFamily = "inet";

uint32_t V4Value(const IpAddress& address) {  // host order
  return (uint32_t{address.bytes[12]} << 24) | (uint32_t{address.bytes[13]} << 16) |
         (uint32_t{address.bytes[14]} << 8) | address.bytes[15];
}

// Slot N's addresses: the subnet's N-th /30, gateway .1 and sandbox .2 of it.
struct Slot {
  int index = -1;
  std::string interface;
  uint32_t gateway = 0;
  uint32_t address = 0;
};

Slot SlotAt(const Cidr& subnet, int index) {
  Slot slot;
  slot.index = index;
  slot.interface = std::string(kFullNetworkLinkPrefix) + std::to_string(index);
  const uint32_t base = V4Value(subnet.base) + static_cast<uint32_t>(index) * 4;
  slot.gateway = base + 1;
  slot.address = base + 2;
  return slot;
}

int SlotCount(const Cidr& subnet) { return 1 << (30 - subnet.prefix); }

// "crl17" -> 17; anything else -> -1.
int SlotOfName(std::string_view name) {
  const std::string_view prefix = kFullNetworkLinkPrefix;
  if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) return -1;
  std::string_view digits = name.substr(prefix.size());
  if (digits.size() > 6 || (digits.size() > 1 && digits[0] == '0')) return -1;
  int value = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    value = value * 10 + (c - '0');
  }
  return value;
}

// One of our links (crl<N>) and the sandbox its ifalias names.
struct OurLink {
  std::string name;
  int ifindex = 0;
  std::string sandbox_id;  // from the ifalias; "" when it has none of ours
};

StatusOr<std::vector<OurLink>> ListOurLinks(RouteSocket& sock) {
  ASSIGN_OR_RETURN(std::vector<isolation::net::LinkInfo> all, sock.Links());
  std::vector<OurLink> links;
  const std::string_view prefix = kFullNetworkAliasPrefix;
  for (isolation::net::LinkInfo& link : all) {
    if (SlotOfName(link.name) < 0) continue;
    OurLink ours{std::move(link.name), link.ifindex, ""};
    if (std::string_view(link.alias).substr(0, prefix.size()) == prefix) ours.sandbox_id = link.alias.substr(prefix.size());
    links.push_back(std::move(ours));
  }
  return links;
}

Status DeleteLink(RouteSocket& sock, const OurLink& link) { return sock.DeleteLink(link.ifindex, link.name); }

// The sandbox ids of our tables ("corral_<id>", family inet) in the calling thread's namespace.
StatusOr<std::set<std::string>> ListOurTables() {
  return isolation::net::ListTables(kTableFamily, kFullNetworkTablePrefix);
}

Status DeleteTable(const std::string& sandbox_id) {
  return isolation::net::DeleteTable(kTableFamily, kFullNetworkTablePrefix + sandbox_id);
}

// The sandbox's table, made or replaced in one nftables transaction ("": removed).
Status ReplaceTable(const std::string& sandbox_id, const std::string& ruleset) {
  return isolation::net::ReplaceTable(kTableFamily, kFullNetworkTablePrefix + sandbox_id, ruleset);
}

// A table name is made from the id: only the characters of our ids.
bool SafeId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

// Ranges without those that another one of the list covers: nftables refuses overlapping
// elements in an interval set.
std::vector<Cidr> Outermost(const std::vector<Cidr>& ranges) {
  std::vector<Cidr> kept;
  for (size_t i = 0; i < ranges.size(); ++i) {
    bool covered = false;
    for (size_t j = 0; j < ranges.size() && !covered; ++j) {
      if (i == j || !ranges[j].Covers(ranges[i])) continue;
      // Equal ranges: keep the first.
      covered = !ranges[i].Covers(ranges[j]) || j < i;
    }
    if (!covered) kept.push_back(ranges[i]);
  }
  return kept;
}

std::string SetOf(const std::vector<std::string>& elements) {
  std::string text = "{ ";
  for (size_t i = 0; i < elements.size(); ++i) text += (i ? ", " : "") + elements[i];
  return text + " }";
}

// Runs fn(socket) on a thread of its own in the namespace `netns_fd`, with a route netlink
// socket made there.
template <typename Fn>
auto InNamespace(int netns_fd, Fn fn) -> decltype(fn(std::declval<RouteSocket&>())) {
  using Result = decltype(fn(std::declval<RouteSocket&>()));
  return isolation::InNetworkNamespace(netns_fd, "enter network.netns", [&]() -> Result {
    ASSIGN_OR_RETURN(RouteSocket host, RouteSocket::Connect("network.netns"));
    return fn(host);
  });
}

// The lowest slot without a link, after deleting a link left from an earlier run of this sandbox.
StatusOr<Slot> FreeSlot(RouteSocket& host, const std::string& sandbox_id, const Cidr& subnet) {
  ASSIGN_OR_RETURN(std::vector<OurLink> links, ListOurLinks(host));
  std::set<int> used;
  for (const OurLink& link : links) {
    if (link.sandbox_id == sandbox_id) {
      RETURN_IF_ERROR(DeleteLink(host, link));
    } else {
      used.insert(SlotOfName(link.name));
    }
  }
  int index = 0;
  while (used.count(index)) ++index;
  if (index >= SlotCount(subnet)) {
    return Status::Error("full network: all " + std::to_string(SlotCount(subnet)) + " addresses of " +
                             subnet.ToString() + " are in use (network.full_subnet)",
                         EAGAIN);
  }
  return SlotAt(subnet, index);
}

// The sandbox's side of its slot: eth0's address, eth0 up, the default route via the gateway.
Status ConfigureEth0(RouteSocket& inside, const Slot& slot) {
  ASSIGN_OR_RETURN(int eth0, inside.LinkIndex("eth0", "eth0 in the sandbox"));
  RETURN_IF_ERROR(inside.AddAddress(eth0, slot.address, 30, "the sandbox's eth0"));
  RETURN_IF_ERROR(inside.SetUp(eth0, "the sandbox's eth0"));
  return inside.AddDefaultRoute(eth0, slot.gateway);
}

}  // namespace

std::string FullNetworkRuleset(const std::string& sandbox_id, const std::string& interface,
                               const std::string& address, const Cidr& subnet,
                               const std::vector<IpAddress>& dns, const std::vector<Cidr>& allowed) {
  const std::string in = "iifname \"" + interface + "\" ";
  const std::string out = "oifname \"" + interface + "\" ";
  const std::string refuse = "reject with icmpx type admin-prohibited";
  std::string rules;
  auto rule = [&rules](const std::string& text) { rules += "    " + text + "\n"; };

  rule(in + "ip saddr != " + address + " drop");
  rule(in + "meta nfproto != ipv4 drop");
  std::vector<std::string> servers;
  for (const IpAddress& server : dns) {
    if (server.v4) servers.push_back(server.ToString());
  }
  if (!servers.empty()) rule(in + "ip daddr " + SetOf(servers) + " meta l4proto { tcp, udp } th dport 53 accept");
  std::vector<Cidr> v4_allowed;
  for (const Cidr& cidr : allowed) {
    if (cidr.base.v4) v4_allowed.push_back(cidr);
  }
  std::vector<std::string> accepted;
  for (const Cidr& cidr : Outermost(v4_allowed)) accepted.push_back(cidr.ToString());
  if (!accepted.empty()) rule(in + "ip daddr " + SetOf(accepted) + " accept");
  rule(in + "ip daddr " + subnet.ToString() + " " + refuse);
  std::vector<std::string> refused;
  for (const Cidr& cidr : Outermost(NonPublicV4Ranges())) refused.push_back(cidr.ToString());
  rule(in + "ip daddr " + SetOf(refused) + " " + refuse);
  rule(out + "ct state established,related accept");
  // Refused, not dropped: the tables of two sandboxes hook the same place, and the first to see a
  // packet from one sandbox to another may be the receiver's (this rule) rather than the
  // sender's (the subnet rule above); either way the sender hears at once.
  rule(out + refuse);
  const std::string forward = rules;

  rules.clear();
  rule(in + "ct state established,related accept");
  rule(in + refuse);
  const std::string input = rules;

  const std::string table = std::string(kFullNetworkTablePrefix) + sandbox_id;
  return "table inet " + table + " {\n"
         "  chain forward {\n"
         "    type filter hook forward priority filter - 1; policy accept;\n" +
         forward +
         "  }\n"
         "  chain input {\n"
         "    type filter hook input priority filter - 1; policy accept;\n" +
         input +
         "  }\n"
         "  chain postrouting {\n"
         "    type nat hook postrouting priority srcnat; policy accept;\n"
         "    ip saddr " + address + " oifname != \"" + interface + "\" masquerade\n"
         "  }\n"
         "}\n";
}

StatusOr<std::unique_ptr<FullNetwork>> FullNetwork::Create(FullNetworkConfig config) {
  if (!config.subnet.base.v4 || config.subnet.prefix > 30 || config.subnet.prefix < 8) {
    return Status::Error("network.full_subnet: expected an IPv4 range from /8 to /30, like \"10.231.0.0/16\"", EINVAL);
  }
  const std::string path = config.netns.empty() ? "/proc/self/ns/net" : config.netns;
  UniqueFd netns(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!netns) return ErrnoError("network.netns: open " + path);
  return std::unique_ptr<FullNetwork>(new FullNetwork(std::move(config), std::move(netns)));
}

FullNetwork::FullNetwork(FullNetworkConfig config, UniqueFd netns)
    : config_(std::move(config)), netns_(std::move(netns)) {}

FullNetwork::~FullNetwork() = default;

StatusOr<NetworkAttachment> FullNetwork::Attach(const std::string& sandbox_id, int init_pidfd,
                                                const std::vector<Cidr>& allowed) {
  if (!SafeId(sandbox_id)) return Status::Error("full network: bad sandbox id " + sandbox_id, EINVAL);
  std::lock_guard lock(mu_);
  return isolation::OnOwnThread([&]() -> StatusOr<NetworkAttachment> {
    // The sandbox's side first: a socket made in a namespace stays in it.
    RETURN_IF_ERROR(isolation::EnterNetworkNamespace(init_pidfd, "enter the sandbox's network namespace"));
    ASSIGN_OR_RETURN(UniqueFd sandbox_ns,
                     isolation::OpenThreadNetworkNamespace("open the sandbox's network namespace"));
    ASSIGN_OR_RETURN(RouteSocket inside, RouteSocket::Connect("the sandbox"));
    RETURN_IF_ERROR(isolation::EnterNetworkNamespace(
        netns_.get(), "enter network.netns" + (config_.netns.empty() ? std::string() : " " + config_.netns)));
    ASSIGN_OR_RETURN(RouteSocket host, RouteSocket::Connect("network.netns"));
    if (!forwarding_checked_) {
      ASSIGN_OR_RETURN(bool switched_on, isolation::net::EnableIpv4Forwarding());
      if (switched_on) {
        LogInfo("network", "IPv4 forwarding switched on (net.ipv4.ip_forward=1) for full-network sandboxes", {});
      }
      forwarding_checked_ = true;
    }
    ASSIGN_OR_RETURN(const Slot slot, FreeSlot(host, sandbox_id, config_.subnet));
    RETURN_IF_ERROR(host.AddVethPair(slot.interface, "eth0", sandbox_ns.get()));

    OurLink made{slot.interface, 0, sandbox_id};
    auto undo = [&](Status status) -> StatusOr<NetworkAttachment> {
      if (made.ifindex > 0) (void)DeleteLink(host, made);
      (void)ReplaceTable(sandbox_id, "");  // made and deleted: gone, whether it was there or not
      return status;
    };
    StatusOr<int> ifindex = isolation::net::InterfaceIndex(slot.interface);
    if (!ifindex.ok()) return undo(ifindex.status());
    made.ifindex = *ifindex;
    if (Status s = host.SetUp(made.ifindex, slot.interface, kFullNetworkAliasPrefix + sandbox_id); !s.ok()) {
      return undo(s);
    }
    if (Status s = host.AddAddress(made.ifindex, slot.gateway, 30, slot.interface); !s.ok()) return undo(s);
    if (Status s = ConfigureEth0(inside, slot); !s.ok()) return undo(s);
    const std::string address = isolation::net::Ipv4Text(slot.address);
    Status filtered = ReplaceTable(
        sandbox_id, FullNetworkRuleset(sandbox_id, slot.interface, address, config_.subnet, config_.dns, allowed));
    if (!filtered.ok()) return undo(filtered);
    return NetworkAttachment{slot.interface, address, isolation::net::Ipv4Text(slot.gateway)};
  });
}

Status FullNetwork::Update(const std::string& sandbox_id, const std::vector<Cidr>& allowed) {
  if (!SafeId(sandbox_id)) return Status::Error("full network: bad sandbox id " + sandbox_id, EINVAL);
  std::lock_guard lock(mu_);
  return InNamespace(netns_.get(), [&](RouteSocket& host) -> Status {
    ASSIGN_OR_RETURN(std::vector<OurLink> links, ListOurLinks(host));
    for (const OurLink& link : links) {
      if (link.sandbox_id != sandbox_id) continue;
      const Slot slot = SlotAt(config_.subnet, SlotOfName(link.name));
      return ReplaceTable(sandbox_id, FullNetworkRuleset(sandbox_id, slot.interface,
                                                         isolation::net::Ipv4Text(slot.address), config_.subnet,
                                                         config_.dns, allowed));
    }
    return Status();
  });
}

Status FullNetwork::Detach(const std::string& sandbox_id) {
  if (!SafeId(sandbox_id)) return Status::Error("full network: bad sandbox id " + sandbox_id, EINVAL);
  std::lock_guard lock(mu_);
  return InNamespace(netns_.get(), [&](RouteSocket& host) -> Status {
    ASSIGN_OR_RETURN(std::vector<OurLink> links, ListOurLinks(host));
    for (const OurLink& link : links) {
      if (link.sandbox_id == sandbox_id) RETURN_IF_ERROR(DeleteLink(host, link));
    }
    ASSIGN_OR_RETURN(std::set<std::string> tables, ListOurTables());
    if (tables.count(sandbox_id)) RETURN_IF_ERROR(DeleteTable(sandbox_id));
    return Status();
  });
}

Status FullNetwork::Cleanup(const std::set<std::string>& running) {
  std::lock_guard lock(mu_);
  return InNamespace(netns_.get(), [&](RouteSocket& host) -> Status {
    ASSIGN_OR_RETURN(std::vector<OurLink> links, ListOurLinks(host));
    for (const OurLink& link : links) {
      if (link.sandbox_id.empty() || running.count(link.sandbox_id)) continue;
      LogInfo("network", "removing the link of a sandbox that is not running",
              {{"sandbox", link.sandbox_id}, {"interface", link.name}});
      RETURN_IF_ERROR(DeleteLink(host, link));
    }
    ASSIGN_OR_RETURN(std::set<std::string> tables, ListOurTables());
    for (const std::string& id : tables) {
      if (running.count(id)) continue;
      LogInfo("network", "removing the filter of a sandbox that is not running", {{"sandbox", id}});
      RETURN_IF_ERROR(DeleteTable(id));
    }
    return Status();
  });
}

StatusOr<std::set<std::string>> FullNetwork::AttachedLinks() {
  std::lock_guard lock(mu_);
  return InNamespace(netns_.get(), [&](RouteSocket& host) -> StatusOr<std::set<std::string>> {
    ASSIGN_OR_RETURN(std::vector<OurLink> links, ListOurLinks(host));
    std::set<std::string> ids;
    for (const OurLink& link : links) {
      if (!link.sandbox_id.empty()) ids.insert(link.sandbox_id);
    }
    return ids;
  });
}

StatusOr<std::set<std::string>> FullNetwork::Tables() {
  std::lock_guard lock(mu_);
  return isolation::InNetworkNamespace(netns_.get(), "enter network.netns", [&] { return ListOurTables(); });
}

}  // namespace corral::supervisor
