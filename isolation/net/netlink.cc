#include "isolation/net/netlink.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <unistd.h>

#include <netlink/addr.h>
#include <netlink/cache.h>
#include <netlink/errno.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/route.h>

#include <cerrno>

#include "common/unique_fd.h"

namespace corral::isolation::net {
namespace {

Status NlError(int error, const std::string& what) {
  return Status::Error(what + ": " + nl_geterror(error), EIO);
}

// Owns one reference of a libnl object.
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

nl_addr* V4NlAddr(uint32_t value, int prefix) {
  const uint32_t network_order = htonl(value);
  nl_addr* address = nl_addr_build(AF_INET, &network_order, sizeof(network_order));
  if (address) nl_addr_set_prefixlen(address, prefix);
  return address;
}

}  // namespace

std::string Ipv4Text(uint32_t value) {
  return std::to_string(value >> 24) + "." + std::to_string((value >> 16) & 255) + "." +
         std::to_string((value >> 8) & 255) + "." + std::to_string(value & 255);
}

void RouteSocket::Free::operator()(nl_sock* sock) const { nl_socket_free(sock); }

RouteSocket::~RouteSocket() = default;

StatusOr<RouteSocket> RouteSocket::Connect(std::string_view where) {
  RouteSocket socket(nl_socket_alloc());
  if (!socket.sock_) return Status::Error("netlink socket: out of memory", ENOMEM);
  int error = nl_connect(socket.sock_.get(), NETLINK_ROUTE);
  if (error < 0) return NlError(error, "netlink socket in " + std::string(where));
  return socket;
}

StatusOr<std::vector<LinkInfo>> RouteSocket::Links() {
  CacheRef cache;
  int error = rtnl_link_alloc_cache(sock_.get(), AF_UNSPEC, &cache.p);
  if (error < 0) return NlError(error, "list links");
  std::vector<LinkInfo> links;
  for (nl_object* object = nl_cache_get_first(cache.p); object; object = nl_cache_get_next(object)) {
    auto* link = reinterpret_cast<rtnl_link*>(object);
    const char* name = rtnl_link_get_name(link);
    if (name == nullptr) continue;
    const char* alias = rtnl_link_get_ifalias(link);
    links.push_back(LinkInfo{name, rtnl_link_get_ifindex(link), alias ? alias : ""});
  }
  return links;
}

StatusOr<int> RouteSocket::LinkIndex(const std::string& name, std::string_view what) {
  LinkRef link;
  int error = rtnl_link_get_kernel(sock_.get(), 0, name.c_str(), &link.p);
  if (error < 0) return NlError(error, "find " + std::string(what));
  return rtnl_link_get_ifindex(link.p);
}

Status RouteSocket::DeleteLink(int ifindex, std::string_view name) {
  LinkRef link(rtnl_link_alloc());
  if (!link.p) return Status::Error("out of memory", ENOMEM);
  rtnl_link_set_ifindex(link.p, ifindex);
  int error = rtnl_link_delete(sock_.get(), link.p);
  // Gone meanwhile (e.g. its peer's namespace went): what we wanted.
  if (error < 0 && error != -NLE_NODEV && error != -NLE_OBJ_NOTFOUND) {
    return NlError(error, "delete link " + std::string(name));
  }
  return Status();
}

Status RouteSocket::AddVethPair(const std::string& name, const std::string& peer_name, int peer_ns_fd) {
  LinkRef veth(rtnl_link_veth_alloc());
  if (!veth.p) return Status::Error("out of memory", ENOMEM);
  rtnl_link_set_name(veth.p, name.c_str());
  {
    LinkRef peer(rtnl_link_veth_get_peer(veth.p));
    rtnl_link_set_name(peer.p, peer_name.c_str());
    rtnl_link_set_ns_fd(peer.p, peer_ns_fd);
  }
  int error = rtnl_link_add(sock_.get(), veth.p, NLM_F_CREATE | NLM_F_EXCL);
  if (error < 0) return NlError(error, "create veth " + name);
  return Status();
}

Status RouteSocket::SetUp(int ifindex, std::string_view name, const std::string& alias) {
  LinkRef current(rtnl_link_alloc());
  LinkRef change(rtnl_link_alloc());
  if (!current.p || !change.p) return Status::Error("out of memory", ENOMEM);
  rtnl_link_set_ifindex(current.p, ifindex);
  rtnl_link_set_flags(change.p, IFF_UP);
  if (!alias.empty()) rtnl_link_set_ifalias(change.p, alias.c_str());
  int error = rtnl_link_change(sock_.get(), current.p, change.p, 0);
  if (error < 0) return NlError(error, "bring " + std::string(name) + " up");
  return Status();
}

Status RouteSocket::AddAddress(int ifindex, uint32_t value, int prefix, std::string_view name) {
  AddrRef address(rtnl_addr_alloc());
  NlAddrRef local(V4NlAddr(value, prefix));
  if (!address.p || !local.p) return Status::Error("out of memory", ENOMEM);
  rtnl_addr_set_ifindex(address.p, ifindex);
  int error = rtnl_addr_set_local(address.p, local.p);
  if (error >= 0) error = rtnl_addr_add(sock_.get(), address.p, 0);
  if (error < 0) {
    return NlError(error, "address " + Ipv4Text(value) + "/" + std::to_string(prefix) + " on " + std::string(name));
  }
  return Status();
}

Status RouteSocket::AddDefaultRoute(int ifindex, uint32_t gateway) {
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
  error = rtnl_route_add(sock_.get(), route.p, NLM_F_CREATE | NLM_F_EXCL);
  if (error < 0) return NlError(error, "default route via " + Ipv4Text(gateway));
  return Status();
}

StatusOr<int> InterfaceIndex(const std::string& name) {
  const unsigned index = if_nametoindex(name.c_str());
  if (index == 0) return ErrnoError("find " + name);
  return static_cast<int>(index);
}

StatusOr<bool> EnableIpv4Forwarding() {
  const char* path = "/proc/sys/net/ipv4/ip_forward";
  UniqueFd fd(open(path, O_RDWR | O_CLOEXEC));
  if (!fd) return ErrnoError(std::string("open ") + path);
  char value = 0;
  if (pread(fd.get(), &value, 1, 0) != 1) return ErrnoError(std::string("read ") + path);
  if (value == '1') return false;
  if (pwrite(fd.get(), "1\n", 2, 0) != 2) return ErrnoError(std::string("write ") + path);
  return true;
}

}  // namespace corral::isolation::net
