#include "supervisor/egress/egress_resolver.h"

#include <ares.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>

namespace corral::supervisor {

Resolved SystemResolve(const std::string& host) {
  Resolved out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &list);
  if (rc != 0) {
    out.error = gai_strerror(rc);
    return out;
  }
  for (addrinfo* ai = list; ai != nullptr; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    IpAddress address = IpAddress::FromSockaddr(ai->ai_addr);
    if (std::find(out.addresses.begin(), out.addresses.end(), address) == out.addresses.end()) {
      out.addresses.push_back(address);
    }
  }
  freeaddrinfo(list);
  if (out.addresses.empty()) out.error = "no address";
  return out;
}

// One lookup with c-ares against one DNS server, run to its end on the calling thread.
Resolved AresResolve(const std::string& host, const ServerAddress& server, uint64_t timeout_s) {
  Resolved out;
  ares_options options{};
  options.timeout = static_cast<int>(std::min<uint64_t>(timeout_s, 30) * 1000 / 2);
  options.tries = 2;
  options.flags = ARES_FLAG_NOSEARCH | ARES_FLAG_NOALIASES;
  char lookups[] = "b";  // DNS only: not the daemon's /etc/hosts
  options.lookups = lookups;
  ares_channel channel = nullptr;
  if (int rc = ares_init_options(&channel, &options, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_FLAGS | ARES_OPT_LOOKUPS);
      rc != ARES_SUCCESS) {
    out.error = std::string("resolver: ") + ares_strerror(rc);
    return out;
  }
  const std::string csv = server.address.v4 ? server.address.ToString() + ":" + std::to_string(server.port)
                                            : "[" + server.address.ToString() + "]:" + std::to_string(server.port);
  if (int rc = ares_set_servers_ports_csv(channel, csv.c_str()); rc != ARES_SUCCESS) {
    ares_destroy(channel);
    out.error = std::string("resolver: ") + ares_strerror(rc);
    return out;
  }
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  bool done = false;
  struct Context {
    Resolved* out;
    bool* done;
  } context{&out, &done};
  ares_getaddrinfo(
      channel, host.c_str(), nullptr, &hints,
      [](void* arg, int status, int /*timeouts*/, ares_addrinfo* result) {
        auto* ctx = static_cast<Context*>(arg);
        *ctx->done = true;
        if (status != ARES_SUCCESS) {
          ctx->out->error = ares_strerror(status);
          return;
        }
        for (ares_addrinfo_node* node = result->nodes; node != nullptr; node = node->ai_next) {
          if (node->ai_family != AF_INET && node->ai_family != AF_INET6) continue;
          IpAddress address = IpAddress::FromSockaddr(node->ai_addr);
          auto& list = ctx->out->addresses;
          if (std::find(list.begin(), list.end(), address) == list.end()) list.push_back(address);
        }
        ares_freeaddrinfo(result);
        if (ctx->out->addresses.empty()) ctx->out->error = "no address";
      },
      &context);
  while (!done) {
    ares_socket_t sockets[ARES_GETSOCK_MAXNUM];
    const int bits = ares_getsock(channel, sockets, ARES_GETSOCK_MAXNUM);
    pollfd fds[ARES_GETSOCK_MAXNUM];
    nfds_t count = 0;
    for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
      const short events = static_cast<short>((ARES_GETSOCK_READABLE(bits, i) ? POLLIN : 0) |
                                              (ARES_GETSOCK_WRITABLE(bits, i) ? POLLOUT : 0));
      if (events != 0) fds[count++] = pollfd{sockets[i], events, 0};
    }
    if (count == 0) break;
    timeval wait{};
    timeval* tv = ares_timeout(channel, nullptr, &wait);
    const int ms = tv == nullptr ? 1000 : static_cast<int>(tv->tv_sec * 1000 + tv->tv_usec / 1000);
    const int ready = poll(fds, count, ms);
    if (ready <= 0) {
      ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
      continue;
    }
    for (nfds_t i = 0; i < count; ++i) {
      ares_process_fd(channel, (fds[i].revents & (POLLIN | POLLERR | POLLHUP)) ? fds[i].fd : ARES_SOCKET_BAD,
                      (fds[i].revents & POLLOUT) ? fds[i].fd : ARES_SOCKET_BAD);
    }
  }
  ares_destroy(channel);
  if (!done) out.error = "resolver gave no answer";
  return out;
}

}  // namespace corral::supervisor
