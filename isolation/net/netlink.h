// Links, addresses and routes over route netlink (libnl-route-3), for a sandbox's full network
// (supervisor/sandboxes/full_network.h). A RouteSocket works in the network namespace of the thread that
// connected it, wherever that thread goes afterwards (isolation/netns.h enters namespaces).
// IPv4 addresses are uint32_t in host byte order. Every call blocks on netlink.
//
// Errors: EIO with libnl's message after what was asked ("create veth crl3: Object exists"),
// ENOMEM; errno values of the kernel where a syscall failed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

struct nl_sock;

namespace corral::isolation::net {

// "10.0.0.1" for 0x0a000001.
std::string Ipv4Text(uint32_t address);

// A link as the kernel lists it.
struct LinkInfo {
  std::string name;
  int ifindex = 0;
  std::string alias;  // its ifalias; "" when it has none
};

class RouteSocket {
 public:
  // A NETLINK_ROUTE socket in the calling thread's network namespace. An error names `where`
  // ("netlink socket in <where>: ...").
  static StatusOr<RouteSocket> Connect(std::string_view where);
  RouteSocket(RouteSocket&&) noexcept = default;
  RouteSocket& operator=(RouteSocket&&) noexcept = default;
  ~RouteSocket();

  // Every link of the namespace.
  StatusOr<std::vector<LinkInfo>> Links();
  // The index of the link `name` (asked of the kernel); an error says "find <what>".
  StatusOr<int> LinkIndex(const std::string& name, std::string_view what);
  // Deletes the link `ifindex` (`name` is for the error); one that is gone already is fine.
  Status DeleteLink(int ifindex, std::string_view name);
  // A veth pair: `name` in this namespace and its peer `peer_name` in the network namespace
  // `peer_ns_fd`.
  Status AddVethPair(const std::string& name, const std::string& peer_name, int peer_ns_fd);
  // Brings the link up, setting its ifalias to `alias` when that is not empty.
  Status SetUp(int ifindex, std::string_view name, const std::string& alias = "");
  // Adds address/prefix to the link (`name` is for the error).
  Status AddAddress(int ifindex, uint32_t address, int prefix, std::string_view name);
  // A static default route via `gateway` on the link, in the main table (an error when there is
  // one already).
  Status AddDefaultRoute(int ifindex, uint32_t gateway);

 private:
  struct Free {
    void operator()(nl_sock* sock) const;
  };
  explicit RouteSocket(nl_sock* sock) : sock_(sock) {}
  std::unique_ptr<nl_sock, Free> sock_;
};

// The index of the interface `name` in the calling thread's network namespace (if_nametoindex);
// an error says "find <name>".
StatusOr<int> InterfaceIndex(const std::string& name);

// Switches IPv4 forwarding on (net.ipv4.ip_forward=1) in the calling thread's network namespace;
// true when it was off.
StatusOr<bool> EnableIpv4Forwarding();

}  // namespace corral::isolation::net
