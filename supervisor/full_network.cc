#include "supervisor/full_network.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <unistd.h>

#include <netlink/addr.h>
#include <netlink/cache.h>
#include <netlink/errno.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/route.h>
#include <nftables/libnftables.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "common/log.h"

namespace corral::supervisor {
namespace {

// Runs `fn` on a thread of its own and returns what it returned: a thread may enter other
// network namespaces (setns(CLONE_NEWNET) changes only the calling thread) and then ends.
template <typename Fn>
auto OnOwnThread(Fn fn) -> decltype(fn()) {
  std::optional<decltype(fn())> result;
  std::thread thread([&] { result.emplace(fn()); });
  thread.join();
  return std::move(*result);
}

Status NlError(int error, const std::string& what) {
  return Status::Error(what + ": " + nl_geterror(error), EIO);
}

struct Socket {
  nl_sock* sock = nullptr;
  ~Socket() {
    if (sock) nl_socket_free(sock);
  }
};

// A route netlink socket in the calling thread's network namespace.
Status Connect(Socket& socket, const std::string& where) {
  socket.sock = nl_socket_alloc();
  if (socket.sock == nullptr) return Status::Error("netlink socket: out of memory", ENOMEM);
  int error = nl_connect(socket.sock, NETLINK_ROUTE);
  if (error < 0) return NlError(error, "netlink socket in " + where);
  return Status();
}

template <typename T, void (*Put)(T*)>
struct Ref {
  T* p = nullptr;
  Ref() = default;
  explicit Ref(T* pointer) : p(pointer) {}
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  ~Ref() {
    if (p) Put(p);
  }
};
using LinkRef = Ref<rtnl_link, rtnl_link_put>;
using AddrRef = Ref<rtnl_addr, rtnl_addr_put>;
using NlAddrRef = Ref<nl_addr, nl_addr_put>;
using RouteRef = Ref<rtnl_route, rtnl_route_put>;
using CacheRef = Ref<nl_cache, nl_cache_free>;

uint32_t V4Value(const IpAddress& address) {  // host order
  return (uint32_t{address.bytes[12]} << 24) | (uint32_t{address.bytes[13]} << 16) |
         (uint32_t{address.bytes[14]} << 8) | address.bytes[15];
}

std::string V4Text(uint32_t value) {
  return std::to_string(value >> 24) + "." + std::to_string((value >> 16) & 255) + "." +
         std::to_string((value >> 8) & 255) + "." + std::to_string(value & 255);
}

nl_addr* V4NlAddr(uint32_t value, int prefix) {
  const uint32_t network_order = htonl(value);
  nl_addr* address = nl_addr_build(AF_INET, &network_order, sizeof(network_order));
  if (address) nl_addr_set_prefixlen(address, prefix);
  return address;
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

struct LinkInfo {
  std::string name;
  int ifindex = 0;
  std::string sandbox_id;  // from the ifalias; "" when it has none of ours
};

StatusOr<std::vector<LinkInfo>> ListOurLinks(nl_sock* sock) {
  CacheRef cache;
  int error = rtnl_link_alloc_cache(sock, AF_UNSPEC, &cache.p);
  if (error < 0) return NlError(error, "list links");
  std::vector<LinkInfo> links;
  for (nl_object* object = nl_cache_get_first(cache.p); object; object = nl_cache_get_next(object)) {
    auto* link = reinterpret_cast<rtnl_link*>(object);
    const char* name = rtnl_link_get_name(link);
    if (name == nullptr || SlotOfName(name) < 0) continue;
    LinkInfo info;
    info.name = name;
    info.ifindex = rtnl_link_get_ifindex(link);
    const char* alias = rtnl_link_get_ifalias(link);
    const std::string_view prefix = kFullNetworkAliasPrefix;
    if (alias && std::string_view(alias).substr(0, prefix.size()) == prefix) {
      info.sandbox_id = std::string(alias + prefix.size());
    }
    links.push_back(std::move(info));
  }
  return links;
}

Status DeleteLink(nl_sock* sock, const LinkInfo& info) {
  LinkRef link(rtnl_link_alloc());
  if (!link.p) return Status::Error("out of memory", ENOMEM);
  rtnl_link_set_ifindex(link.p, info.ifindex);
  int error = rtnl_link_delete(sock, link.p);
  // Gone meanwhile (its sandbox's namespace went): what we wanted.
  if (error < 0 && error != -NLE_NODEV && error != -NLE_OBJ_NOTFOUND) return NlError(error, "delete link " + info.name);
  return Status();
}

Status SetUp(nl_sock* sock, int ifindex, const std::string& name, const std::string& alias = "") {
  LinkRef current(rtnl_link_alloc());
  LinkRef change(rtnl_link_alloc());
  if (!current.p || !change.p) return Status::Error("out of memory", ENOMEM);
  rtnl_link_set_ifindex(current.p, ifindex);
  rtnl_link_set_flags(change.p, IFF_UP);
  if (!alias.empty()) rtnl_link_set_ifalias(change.p, alias.c_str());
  int error = rtnl_link_change(sock, current.p, change.p, 0);
  if (error < 0) return NlError(error, "bring " + name + " up");
  return Status();
}

Status AddAddress(nl_sock* sock, int ifindex, uint32_t value, const std::string& name) {
  AddrRef address(rtnl_addr_alloc());
  NlAddrRef local(V4NlAddr(value, 30));
  if (!address.p || !local.p) return Status::Error("out of memory", ENOMEM);
  rtnl_addr_set_ifindex(address.p, ifindex);
  int error = rtnl_addr_set_local(address.p, local.p);
  if (error >= 0) error = rtnl_addr_add(sock, address.p, 0);
  if (error < 0) return NlError(error, "address " + V4Text(value) + "/30 on " + name);
  return Status();
}

Status AddDefaultRoute(nl_sock* sock, int ifindex, uint32_t gateway) {
  RouteRef route(rtnl_route_alloc());
  NlAddrRef destination(V4NlAddr(0, 0));
  NlAddrRef via(V4NlAddr(gateway, 32));
  if (!route.p || !destination.p || !via.p) return Status::Error("out of memory", ENOMEM);
  rtnl_route_set_family(route.p, AF_INET);
  rtnl_route_set_table(route.p, RT_TABLE_MAIN);
  rtnl_route_set_scope(route.p, RT_SCOPE_UNIVERSE);
  rtnl_route_set_protocol(route.p, RTPROT_STATIC);
  int error = rtnl_route_set_dst(route.p, destination.p);
  if (error < 0) return NlError(error, "default route");
  rtnl_nexthop* hop = rtnl_route_nh_alloc();
  if (hop == nullptr) return Status::Error("out of memory", ENOMEM);
  rtnl_route_nh_set_gateway(hop, via.p);
  rtnl_route_nh_set_ifindex(hop, ifindex);
  rtnl_route_add_nexthop(route.p, hop);  // the route owns it now
  error = rtnl_route_add(sock, route.p, NLM_F_CREATE | NLM_F_EXCL);
  if (error < 0) return NlError(error, "default route via " + V4Text(gateway));
  return Status();
}

// Runs nft commands (one transaction) and returns what they print.
StatusOr<std::string> Nft(const std::string& commands) {
  nft_ctx* ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  if (ctx == nullptr) return Status::Error("nftables: cannot make a context", ENOMEM);
  nft_ctx_buffer_output(ctx);
  nft_ctx_buffer_error(ctx);
  const int rc = nft_run_cmd_from_buffer(ctx, commands.c_str());
  // Each get empties its buffer: one call each.
  const char* printed = nft_ctx_get_output_buffer(ctx);
  const char* complaint = nft_ctx_get_error_buffer(ctx);
  std::string output = printed ? printed : "";
  std::string error = complaint ? complaint : "";
  nft_ctx_free(ctx);
  if (rc != 0) {
    while (!error.empty() && (error.back() == '\n' || error.back() == ' ')) error.pop_back();
    return Status::Error("nftables: " + (error.empty() ? std::string("failed") : error), EIO);
  }
  return output;
}

// The sandbox ids of our tables ("corral_<id>", family inet) in the calling thread's namespace.
// nft lists them one per line: "table inet corral_sb_...".
StatusOr<std::set<std::string>> ListOurTables() {
  ASSIGN_OR_RETURN(std::string text, Nft("list tables inet"));
  std::set<std::string> ids;
  const std::string prefix = std::string("table inet ") + kFullNetworkTablePrefix;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + at, end - at);
    if (line.size() > prefix.size() && line.substr(0, prefix.size()) == prefix) {
      ids.insert(std::string(line.substr(prefix.size())));
    }
    at = end + 1;
  }
  return ids;
}

Status DeleteTable(const std::string& sandbox_id) {
  return Nft("delete table inet " + std::string(kFullNetworkTablePrefix) + sandbox_id).status();
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

Status WriteIpForward() {
  const char* path = "/proc/sys/net/ipv4/ip_forward";
  UniqueFd fd(open(path, O_RDWR | O_CLOEXEC));
  if (!fd) return ErrnoError(std::string("open ") + path);
  char value = 0;
  if (pread(fd.get(), &value, 1, 0) != 1) return ErrnoError(std::string("read ") + path);
  if (value == '1') return Status();
  if (pwrite(fd.get(), "1\n", 2, 0) != 2) return ErrnoError(std::string("write ") + path);
  LogInfo("network", "IPv4 forwarding switched on (net.ipv4.ip_forward=1) for full-network sandboxes", {});
  return Status();
}

// Runs fn(socket) on a thread of its own in the namespace `netns_fd`, with a route netlink
// socket made there.
template <typename Fn>
auto InNamespace(int netns_fd, Fn fn) -> decltype(fn(static_cast<nl_sock*>(nullptr))) {
  using Result = decltype(fn(static_cast<nl_sock*>(nullptr)));
  return OnOwnThread([&]() -> Result {
    if (setns(netns_fd, CLONE_NEWNET) != 0) return ErrnoError("enter network.netns");
    Socket host;
    RETURN_IF_ERROR(Connect(host, "network.netns"));
    return fn(host.sock);
  });
}

// The sandbox's table, made or replaced in one nftables transaction.
Status ReplaceTable(const std::string& sandbox_id, const std::string& ruleset) {
  const std::string table = std::string("inet ") + kFullNetworkTablePrefix + sandbox_id;
  return Nft("add table " + table + "\ndelete table " + table + "\n" + ruleset).status();
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
  return OnOwnThread([&]() -> StatusOr<NetworkAttachment> {
    // The sandbox's side first: a socket made in a namespace stays in it.
    if (setns(init_pidfd, CLONE_NEWNET) != 0) return ErrnoError("enter the sandbox's network namespace");
    UniqueFd sandbox_ns(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!sandbox_ns) return ErrnoError("open the sandbox's network namespace");
    Socket inside;
    RETURN_IF_ERROR(Connect(inside, "the sandbox"));
    if (setns(netns_.get(), CLONE_NEWNET) != 0) {
      return ErrnoError("enter network.netns" + (config_.netns.empty() ? std::string() : " " + config_.netns));
    }
    Socket host;
    RETURN_IF_ERROR(Connect(host, "network.netns"));
    if (!forwarding_checked_) {
      RETURN_IF_ERROR(WriteIpForward());
      forwarding_checked_ = true;
    }

    // A link or table left from an earlier run of this sandbox goes first.
    ASSIGN_OR_RETURN(std::vector<LinkInfo> links, ListOurLinks(host.sock));
    std::set<int> used;
    for (const LinkInfo& link : links) {
      if (link.sandbox_id == sandbox_id) {
        RETURN_IF_ERROR(DeleteLink(host.sock, link));
      } else {
        used.insert(SlotOfName(link.name));
      }
    }
    int index = 0;
    while (used.count(index)) ++index;
    if (index >= SlotCount(config_.subnet)) {
      return Status::Error("full network: all " + std::to_string(SlotCount(config_.subnet)) + " addresses of " +
                               config_.subnet.ToString() + " are in use (network.full_subnet)",
                           EAGAIN);
    }
    const Slot slot = SlotAt(config_.subnet, index);

    LinkRef veth(rtnl_link_veth_alloc());
    if (!veth.p) return Status::Error("out of memory", ENOMEM);
    rtnl_link_set_name(veth.p, slot.interface.c_str());
    {
      LinkRef peer(rtnl_link_veth_get_peer(veth.p));
      rtnl_link_set_name(peer.p, "eth0");
      rtnl_link_set_ns_fd(peer.p, sandbox_ns.get());
    }
    int error = rtnl_link_add(host.sock, veth.p, NLM_F_CREATE | NLM_F_EXCL);
    if (error < 0) return NlError(error, "create veth " + slot.interface);

    LinkInfo made{slot.interface, 0, sandbox_id};
    auto undo = [&](Status status) -> StatusOr<NetworkAttachment> {
      if (made.ifindex > 0) (void)DeleteLink(host.sock, made);
      (void)ReplaceTable(sandbox_id, "");  // made and deleted: gone, whether it was there or not
      return status;
    };
    made.ifindex = static_cast<int>(if_nametoindex(slot.interface.c_str()));
    if (made.ifindex == 0) return undo(ErrnoError("find " + slot.interface));
    if (Status s = SetUp(host.sock, made.ifindex, slot.interface, kFullNetworkAliasPrefix + sandbox_id); !s.ok()) {
      return undo(s);
    }
    if (Status s = AddAddress(host.sock, made.ifindex, slot.gateway, slot.interface); !s.ok()) return undo(s);

    LinkRef eth0;
    error = rtnl_link_get_kernel(inside.sock, 0, "eth0", &eth0.p);
    if (error < 0) return undo(NlError(error, "find eth0 in the sandbox"));
    const int inner = rtnl_link_get_ifindex(eth0.p);
    if (Status s = AddAddress(inside.sock, inner, slot.address, "the sandbox's eth0"); !s.ok()) return undo(s);
    if (Status s = SetUp(inside.sock, inner, "the sandbox's eth0"); !s.ok()) return undo(s);
    if (Status s = AddDefaultRoute(inside.sock, inner, slot.gateway); !s.ok()) return undo(s);

    Status filtered = ReplaceTable(sandbox_id, FullNetworkRuleset(sandbox_id, slot.interface, V4Text(slot.address),
                                                                  config_.subnet, config_.dns, allowed));
    if (!filtered.ok()) return undo(filtered);

    NetworkAttachment attachment;
    attachment.interface = slot.interface;
    attachment.address = V4Text(slot.address);
    attachment.gateway = V4Text(slot.gateway);
    return attachment;
  });
}

Status FullNetwork::Update(const std::string& sandbox_id, const std::vector<Cidr>& allowed) {
  if (!SafeId(sandbox_id)) return Status::Error("full network: bad sandbox id " + sandbox_id, EINVAL);
  std::lock_guard lock(mu_);
  return InNamespace(netns_.get(), [&](nl_sock* host) -> Status {
    ASSIGN_OR_RETURN(std::vector<LinkInfo> links, ListOurLinks(host));
    for (const LinkInfo& link : links) {
      if (link.sandbox_id != sandbox_id) continue;
      const Slot slot = SlotAt(config_.subnet, SlotOfName(link.name));
      return ReplaceTable(sandbox_id, FullNetworkRuleset(sandbox_id, slot.interface, V4Text(slot.address),
                                                         config_.subnet, config_.dns, allowed));
    }
    return Status();
  });
}

Status FullNetwork::Detach(const std::string& sandbox_id) {
  if (!SafeId(sandbox_id)) return Status::Error("full network: bad sandbox id " + sandbox_id, EINVAL);
  std::lock_guard lock(mu_);
  return InNamespace(netns_.get(), [&](nl_sock* host) -> Status {
    ASSIGN_OR_RETURN(std::vector<LinkInfo> links, ListOurLinks(host));
    for (const LinkInfo& link : links) {
      if (link.sandbox_id == sandbox_id) RETURN_IF_ERROR(DeleteLink(host, link));
    }
    ASSIGN_OR_RETURN(std::set<std::string> tables, ListOurTables());
    if (tables.count(sandbox_id)) RETURN_IF_ERROR(DeleteTable(sandbox_id));
    return Status();
  });
}

Status FullNetwork::Cleanup(const std::set<std::string>& running) {
  std::lock_guard lock(mu_);
  return InNamespace(netns_.get(), [&](nl_sock* host) -> Status {
    ASSIGN_OR_RETURN(std::vector<LinkInfo> links, ListOurLinks(host));
    for (const LinkInfo& link : links) {
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
  return InNamespace(netns_.get(), [&](nl_sock* host) -> StatusOr<std::set<std::string>> {
    ASSIGN_OR_RETURN(std::vector<LinkInfo> links, ListOurLinks(host));
    std::set<std::string> ids;
    for (const LinkInfo& link : links) {
      if (!link.sandbox_id.empty()) ids.insert(link.sandbox_id);
    }
    return ids;
  });
}

StatusOr<std::set<std::string>> FullNetwork::Tables() {
  std::lock_guard lock(mu_);
  return OnOwnThread([&]() -> StatusOr<std::set<std::string>> {
    if (setns(netns_.get(), CLONE_NEWNET) != 0) return ErrnoError("enter network.netns");
    return ListOurTables();
  });
}

}  // namespace corral::supervisor
