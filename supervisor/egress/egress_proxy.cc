#include "supervisor/egress/egress_proxy.h"

#include <ares.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "isolation/netns.h"
#include "supervisor/egress/egress_resolver.h"
#include "supervisor/egress/intercept_ca.h"
#include "supervisor/egress/secret_tls.h"
#include "supervisor/loopback_acceptor.h"
#include "supervisor/proxy_names.h"

namespace corral::supervisor {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxHeaderBytes = 16 * 1024;
constexpr size_t kChunk = 64 * 1024;

int64_t Millis(Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); }

// "host:port" (CONNECT's target, and an absolute URL's authority), host possibly "[v6]".
bool SplitHostPort(std::string_view authority, uint16_t default_port, std::string& host, uint16_t& port) {
  std::string_view port_text;
  if (!authority.empty() && authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return false;
    host = std::string(authority.substr(1, close - 1));
    std::string_view rest = authority.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port_text = rest.substr(1);
      if (port_text.empty()) return false;
    }
  } else {
    const size_t colon = authority.rfind(':');
    if (colon != std::string_view::npos) {
      if (authority.find(':') != colon) return false;  // an IPv6 address must be in brackets
      port_text = authority.substr(colon + 1);
      if (port_text.empty()) return false;
      authority = authority.substr(0, colon);
    }
    host = std::string(authority);
  }
  if (host.empty()) return false;
  if (port_text.empty()) {
    if (default_port == 0) return false;
    port = default_port;
    return true;
  }
  if (port_text.size() > 5 || !std::all_of(port_text.begin(), port_text.end(), ::isdigit)) return false;
  const int value = std::stoi(std::string(port_text));
  if (value < 1 || value > 65535) return false;
  port = static_cast<uint16_t>(value);
  return true;
}

// Runs on the resolver pool: blocking lookups never hold up the event loop.
awaitable<Resolved> ResolveOnPool(std::string host, std::optional<ServerAddress> server, uint64_t timeout_s) {
  co_return server ? AresResolve(host, *server, timeout_s) : SystemResolve(host);
}

std::string JoinList(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out + "]";
}

std::string RulesText(const EgressRules& rules) {
  std::vector<std::string> ports, cidrs;
  for (uint16_t port : rules.ports) ports.push_back(std::to_string(port));
  for (const Cidr& cidr : rules.cidrs) cidrs.push_back(cidr.ToString());
  return "domains " + JoinList(rules.domains) + ", ports " + JoinList(ports) + ", cidrs " + JoinList(cidrs);
}

// A per-sandbox token bucket: `rate` bytes a second, bursts of up to one second's worth.
struct Bucket {
  uint64_t rate = 0;
  double tokens = 0;
  Clock::time_point last = Clock::now();

  // How long to wait before `bytes` may go (0 when at once); takes them either way.
  Clock::duration Take(size_t bytes) {
    if (rate == 0) return Clock::duration::zero();
    const Clock::time_point now = Clock::now();
    tokens = std::min<double>(static_cast<double>(rate),
                              tokens + std::chrono::duration<double>(now - last).count() * static_cast<double>(rate));
    last = now;
    tokens -= static_cast<double>(bytes);
    if (tokens >= 0) return Clock::duration::zero();
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(-tokens / static_cast<double>(rate)));
  }
};

}  // namespace

std::vector<std::string> EgressProxyEnvironment(uint16_t port) {
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  const std::string local = "localhost,127.0.0.1,::1";
  return {"http_proxy=" + url, "https_proxy=" + url, "HTTP_PROXY=" + url, "HTTPS_PROXY=" + url,
          "no_proxy=" + local, "NO_PROXY=" + local};
}

struct EgressProxy::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::io_context& io_context, EgressProxyConfig proxy_config, Store& store_ref, UniqueFd netns_fd,
       UniqueFd own_fd)
      : io(io_context), config(std::move(proxy_config)), store(store_ref), netns(std::move(netns_fd)),
        own_netns(std::move(own_fd)) {}

  struct Sandbox {
    Bucket bucket;
    std::set<std::shared_ptr<beast::tcp_stream>> streams;  // both sides of every connection
    size_t connections = 0;
    uint64_t generation = 0;  // which Serve: a connection of an earlier one does not count here
  };

  // What one connection asked and what came of it: the event's data.
  // (Its byte counts grow through AddBytes, which reports them as they go.)
  struct Record {
    std::string decision;  // allowed | denied | failed
    std::string reason;
    std::string message;
    std::string method;
    std::string host;
    uint16_t port = 0;
    std::string address;
    std::string rule;
    uint64_t bytes_up = 0;    // from the sandbox
    uint64_t bytes_down = 0;  // to the sandbox
    Clock::time_point started = Clock::now();
    bool intercepted = false;          // a secret's host: TLS ended here (secret_tls.h)
    std::vector<std::string> secrets;  // the secrets added to its request
  };

  // Whose secrets a running sandbox may use, as SetSecrets handed them.
  struct SecretNames {
    std::string iss;
    std::string sub;
    std::vector<std::string> names;
  };

  asio::io_context& io;
  EgressProxyConfig config;
  Store& store;
  UniqueFd netns;
  UniqueFd own_netns;
  asio::thread_pool resolvers{2};
  std::map<std::string, Sandbox> sandboxes;
  std::map<std::string, EgressRules> handed_rules;  // by sandbox, as SetRules handed them
  std::map<std::string, SecretNames> handed_secrets;  // by sandbox, as SetSecrets handed them
  SecretVault* vault = nullptr;
  InterceptCa* ca = nullptr;
  std::unique_ptr<asio::ssl::context> upstream_tls;
  LoopbackAcceptor acceptor{io, "egress",
                            [this](const std::string& id, tcp::socket socket) { OnAccept(id, std::move(socket)); }};
  bool stopped = false;
  EgressObserver* observer = nullptr;
  uint64_t decisions = 0;
  uint64_t generations = 0;

  // Stops accepting for the sandbox and closes its connections (its rules stay).
  void Close(const std::string& sandbox_id) {
    auto it = sandboxes.find(sandbox_id);
    if (it == sandboxes.end()) return;
    acceptor.Forget(sandbox_id);
    boost::system::error_code ignored;
    for (const auto& stream : it->second.streams) {
      stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
      stream->close();
    }
    sandboxes.erase(it);
  }

  // A connection to a served sandbox (the acceptor calls this between Serve and Forget only).
  void OnAccept(const std::string& sandbox_id, tcp::socket socket) {
    auto client = std::make_shared<beast::tcp_stream>(std::move(socket));
    sandboxes[sandbox_id].streams.insert(client);
    asio::co_spawn(io, shared_from_this()->ServeConnection(sandbox_id, client), asio::detached);
  }

  void Decided(const Record& record, std::string_view reason) {
    if (observer != nullptr && !stopped) observer->OnEgressDecision(record.decision, reason);
  }

  void AddBytes(Record& record, bool up, uint64_t bytes) {
    (up ? record.bytes_up : record.bytes_down) += bytes;
    if (observer != nullptr && !stopped) observer->OnEgressBytes(up, bytes);
  }

  void Write(const std::string& sandbox_id, const Record& record) {
    ++decisions;
    nlohmann::json data = {{"decision", record.decision}, {"method", record.method}, {"host", record.host},
                           {"port", record.port}};
    if (!record.reason.empty()) data["reason"] = record.reason;
    if (!record.message.empty()) data["message"] = record.message;
    if (!record.address.empty()) data["address"] = record.address;
    if (!record.rule.empty()) data["rule"] = record.rule;
    if (record.intercepted) data["tls"] = "intercepted";
    if (!record.secrets.empty()) data["secrets"] = record.secrets;
    data["bytes_up"] = record.bytes_up;
    data["bytes_down"] = record.bytes_down;
    data["duration_ms"] = Millis(Clock::now() - record.started);
    auto appended = store.AppendEvent(sandbox_id, "egress", data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    if (!appended.ok()) {
      LogError("egress", "cannot record a decision", {{"sandbox", sandbox_id}, {"error", appended.status().ToString()}});
    }
  }

  // An HTTP error to the sandbox, and its record.
  awaitable<void> Refuse(const std::string& sandbox_id, beast::tcp_stream& client, Record& record, int status,
                         std::string_view status_text, std::string decision) {
    record.decision = std::move(decision);
    Decided(record, record.reason);
    Write(sandbox_id, record);
    const std::string body = "corral egress: " + record.decision + ": " + record.message + "\n";
    const std::string response = "HTTP/1.1 " + std::to_string(status) + " " + std::string(status_text) +
                                 "\r\nContent-Type: text/plain; charset=utf-8\r\nX-Corral-Egress: " + record.decision +
                                 "; reason=" + record.reason + "\r\nContent-Length: " + std::to_string(body.size()) +
                                 "\r\nConnection: close\r\n\r\n" + body;
    boost::system::error_code ec;
    client.expires_after(std::chrono::seconds(10));
    co_await asio::async_write(client, asio::buffer(response), asio::redirect_error(use_awaitable, ec));
  }

  // A TCP socket in egress.netns (or the daemon's own namespace): made on this thread after
  // entering that namespace, which it leaves at once. Sockets stay in the namespace they were
  // made in.
  StatusOr<UniqueFd> OutboundSocket(bool v4) {
    const int family = v4 ? AF_INET : AF_INET6;
    if (!netns.valid()) {
      UniqueFd fd(socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!fd.valid()) return ErrnoError("socket");
      return fd;
    }
    return isolation::SocketInNetworkNamespace(netns.get(), own_netns.get(), family,
                                               SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, "egress.netns");
  }

  awaitable<Resolved> Resolve(std::string host) {
    auto self = shared_from_this();
    const std::optional<ServerAddress> server = config.resolver;
    const uint64_t timeout = config.connect_timeout_s;
    // A coroutine function, not a coroutine lambda: GCC 12 destroys a coroutine lambda's
    // captures twice when asio's co_spawn owns the lambda.
    co_return co_await asio::co_spawn(resolvers, ResolveOnPool(std::move(host), server, timeout), use_awaitable);
  }

  awaitable<void> ServeConnection(std::string sandbox_id, std::shared_ptr<beast::tcp_stream> client) {
    auto self = shared_from_this();
    beast::flat_buffer buffer;
    Record record;
    std::shared_ptr<beast::tcp_stream> upstream;
    bool counted = false;
    uint64_t generation = 0;
    {
      auto sandbox = sandboxes.find(sandbox_id);
      if (sandbox != sandboxes.end() && sandbox->second.connections < config.max_connections) {
        ++sandbox->second.connections;
        counted = true;
        generation = sandbox->second.generation;
      }
    }
    co_await Handle(sandbox_id, *client, buffer, record, upstream, counted);
    boost::system::error_code ignored;
    client->socket().shutdown(tcp::socket::shutdown_both, ignored);
    client->close();
    if (upstream) upstream->close();
    if (auto it = sandboxes.find(sandbox_id); it != sandboxes.end()) {
      it->second.streams.erase(client);
      if (upstream) it->second.streams.erase(upstream);
      if (counted && it->second.generation == generation) --it->second.connections;
    }
  }

  awaitable<void> Handle(const std::string& sandbox_id, beast::tcp_stream& client, beast::flat_buffer& buffer,
                         Record& record, std::shared_ptr<beast::tcp_stream>& upstream, bool counted) {
    boost::system::error_code ec;
    http::request_parser<http::empty_body> parser;
    parser.header_limit(kMaxHeaderBytes);
    parser.eager(false);
    client.expires_after(std::chrono::seconds(std::min<uint64_t>(config.idle_timeout_s, 60)));
    co_await http::async_read_header(client, buffer, parser, asio::redirect_error(use_awaitable, ec));
    if (ec) co_return;  // not HTTP, or gone: nothing was asked
    http::request<http::empty_body>& request = parser.get();
    record.method = std::string(request.method_string());
    const std::string target(request.target());
    const bool tunnel = request.method() == http::verb::connect;
    std::string path;
    if (!ParseTarget(target, tunnel, record, path)) {
      record.reason = "bad_request";
      record.message = "this is an HTTP proxy: ask for CONNECT host:port, or GET http://host/path (https:// goes through CONNECT)";
      record.host = target.substr(0, 255);
      co_return co_await Refuse(sandbox_id, client, record, 400, "Bad Request", "denied");
    }
    auto sandbox = sandboxes.find(sandbox_id);
    if (sandbox == sandboxes.end()) co_return;
    if (!counted) {
      record.reason = "connections";
      record.message = "this sandbox has " + std::to_string(config.max_connections) +
                       " connections open through the proxy already (egress.max_connections)";
      co_return co_await Refuse(sandbox_id, client, record, 429, "Too Many Requests", "denied");
    }
    // As of now: a change applies to the next connection.
    const auto handed = handed_rules.find(sandbox_id);
    const EgressRules rules = handed == handed_rules.end() ? EgressRules{} : handed->second;
    HostDecision host = DecideHost(rules, record.host, record.port);
    if (!host.allowed) {
      record.reason = host.reason;
      record.message = host.message + " (this sandbox's rules: " + RulesText(rules) + ")";
      co_return co_await Refuse(sandbox_id, client, record, 403, "Forbidden", "denied");
    }
    record.rule = host.rule;
    // A CONNECT to a host the sandbox's secrets are bound to is intercepted (secret_tls.h).
    std::vector<SandboxSecret> secrets;
    if (tunnel) {
      Opened opened = co_await OpenSecrets(sandbox_id);
      if (stopped || sandboxes.find(sandbox_id) == sandboxes.end()) co_return;
      if (!opened.status.ok()) {
        record.reason = "tls";
        record.message = "this sandbox's secrets cannot be read: " + opened.status.ToString();
        co_return co_await Refuse(sandbox_id, client, record, 502, "Bad Gateway", "failed");
      }
      if (SecretsBoundTo(opened.secrets, record.host, record.port)) secrets = std::move(opened.secrets);
    }
    // The addresses to try: the literal, or what the name resolves to, each checked.
    std::vector<IpAddress> candidates;
    if (host.literal) {
      candidates.push_back(*host.literal);
    } else {
      Resolved resolved = co_await Resolve(NormalizeHostName(record.host));
      if (stopped || sandboxes.find(sandbox_id) == sandboxes.end()) co_return;
      if (resolved.addresses.empty()) {
        record.reason = "resolve";
        record.message = "cannot resolve " + record.host + ": " + resolved.error;
        co_return co_await Refuse(sandbox_id, client, record, 502, "Bad Gateway", "failed");
      }
      std::string first_refusal;
      for (const IpAddress& address : resolved.addresses) {
        AddressDecision decision = DecideAddress(rules, address);
        if (decision.allowed) {
          candidates.push_back(address);
        } else if (first_refusal.empty()) {
          first_refusal = decision.message;
        }
      }
      if (candidates.empty()) {
        record.reason = "private_address";
        record.address = resolved.addresses.front().ToString();
        record.message = record.host + " resolves only to refused addresses: " + first_refusal;
        record.rule.clear();  // the domain matched, the address did not: no rule allowed this
        co_return co_await Refuse(sandbox_id, client, record, 403, "Forbidden", "denied");
      }
    }
    // Connect to a checked address: the first that answers.
    std::optional<std::string> connect_error = co_await ConnectUpstream(sandbox_id, candidates, record, upstream);
    if (!connect_error) co_return;  // the sandbox went away meanwhile
    if (!upstream) {
      record.reason = "connect";
      record.message = "cannot connect to " + record.host + " port " + std::to_string(record.port) + ": " + *connect_error;
      co_return co_await Refuse(sandbox_id, client, record, 502, "Bad Gateway", "failed");
    }
    if (!secrets.empty()) {
      std::string rule_kind = host.literal ? "cidr" : "domain";  // named: see Splice's call below
      co_await Intercept(sandbox_id, client, buffer, record, upstream, std::move(secrets), std::move(rule_kind));
      co_return;
    }
    record.decision = "allowed";
    Decided(record, host.literal ? "cidr" : "domain");
    // Named arguments only: with GCC 12, a temporary among them aborted the daemon in the pumps.
    co_await Splice(sandbox_id, client, buffer, request, path, record, upstream);  // path "": a tunnel
    Write(sandbox_id, record);
  }

  // The secrets of the sandbox, opened on the pool (a store read and AES-GCM each); none when it
  // names none or secrets are not enabled.
  struct Opened {
    Status status;
    std::vector<SandboxSecret> secrets;
  };
  awaitable<Opened> OpenSecrets(std::string sandbox_id) {
    auto self = shared_from_this();
    auto handed = handed_secrets.find(sandbox_id);
    if (vault == nullptr || ca == nullptr || handed == handed_secrets.end() || handed->second.names.empty()) {
      co_return Opened{};
    }
    co_return co_await asio::co_spawn(resolvers, OpenOnPool(vault, handed->second, std::move(sandbox_id)), use_awaitable);
  }

  static awaitable<Opened> OpenOnPool(SecretVault* vault, SecretNames owner, std::string sandbox_id) {
    auto opened = vault->Open(owner.iss, owner.sub, sandbox_id, owner.names);
    if (!opened.ok()) co_return Opened{opened.status(), {}};
    co_return Opened{Status(), std::move(*opened)};
  }

  // A connected CONNECT whose host the secrets are bound to: intercepted, decided and recorded.
  awaitable<void> Intercept(const std::string& sandbox_id, beast::tcp_stream& client, beast::flat_buffer& buffer,
                            Record& record, std::shared_ptr<beast::tcp_stream> upstream,
                            std::vector<SandboxSecret> secrets, std::string rule_kind) {
    auto self = shared_from_this();
    const std::string name = NormalizeHostName(record.host);
    auto server_tls = ca->ServerContext(name);
    if (!server_tls.ok()) {
      record.reason = "tls";
      record.message = server_tls.status().ToString();
      co_return co_await Refuse(sandbox_id, client, record, 502, "Bad Gateway", "failed");
    }
    record.intercepted = true;
    SecretTlsHooks hooks;
    Record* recorded = &record;
    hooks.relayed = [self, sandbox_id, recorded](bool up, size_t bytes) {
      return self->Relayed(sandbox_id, recorded, up, bytes);
    };
    hooks.injected = [this, sandbox_id, recorded](const std::vector<std::string>& names, const std::string& method) {
      Injected(sandbox_id, *recorded, names, method);
    };
    // Named arguments only (as for Splice).
    std::shared_ptr<asio::ssl::context> server_context = std::move(*server_tls);
    const uint16_t port = record.port;
    const uint64_t idle_timeout_s = config.idle_timeout_s;
    SecretTlsResult result = co_await InterceptWithSecrets(client, buffer, *upstream, name, port, server_context,
                                                           *upstream_tls, std::move(secrets), idle_timeout_s,
                                                           std::move(hooks));
    if (!result.upstream_error.empty()) {
      record.reason = "tls";
      record.message = result.upstream_error;
      co_return co_await Refuse(sandbox_id, client, record, 502, "Bad Gateway", "failed");
    }
    record.decision = "allowed";
    record.message = result.client_error;
    Decided(record, rule_kind);
    Write(sandbox_id, record);
  }

  // Counts a chunk relayed by an intercepted connection and waits for the sandbox's bandwidth;
  // false once the sandbox is gone.
  awaitable<bool> Relayed(std::string sandbox_id, Record* record, bool up, size_t bytes) {
    auto self = shared_from_this();
    AddBytes(*record, up, bytes);
    auto it = sandboxes.find(sandbox_id);
    if (stopped || it == sandboxes.end()) co_return false;
    const Clock::duration wait = it->second.bucket.Take(bytes);
    if (wait > Clock::duration::zero()) {
      asio::steady_timer pause(io, wait);
      boost::system::error_code ec;
      co_await pause.async_wait(asio::redirect_error(use_awaitable, ec));
    }
    co_return !stopped && sandboxes.find(sandbox_id) != sandboxes.end();
  }

  // A secret added to a request: one event each (never the value).
  void Injected(const std::string& sandbox_id, Record& record, const std::vector<std::string>& names,
                const std::string& method) {
    for (const std::string& name : names) {
      if (std::find(record.secrets.begin(), record.secrets.end(), name) == record.secrets.end()) {
        record.secrets.push_back(name);
      }
      const nlohmann::json data = {{"name", name}, {"host", record.host}, {"port", record.port}, {"method", method}};
      auto appended = store.AppendEvent(sandbox_id, "secret", data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      if (!appended.ok()) {
        LogError("egress", "cannot record a secret's use", {{"sandbox", sandbox_id}, {"error", appended.status().ToString()}});
      }
    }
  }

  // "CONNECT host:port" (`path` stays ""), or an absolute http:// URL (its path, "/" at least,
  // into `path`), into the record's host and port. False for anything else.
  static bool ParseTarget(const std::string& target, bool tunnel, Record& record, std::string& path) {
    if (tunnel) return SplitHostPort(target, 0, record.host, record.port);
    if (target.size() <= 7 || strncasecmp(target.c_str(), "http://", 7) != 0) return false;
    const size_t end = target.find_first_of("/?#", 7);
    const std::string authority = target.substr(7, end == std::string::npos ? std::string::npos : end - 7);
    path = end == std::string::npos ? "/" : target.substr(end);
    if (path[0] != '/') path = "/" + path;
    return authority.find('@') == std::string::npos && SplitHostPort(authority, 80, record.host, record.port);
  }

  // Connects `upstream` to the first of the checked addresses that answers (the record gets its
  // address). Why the last one failed ("" once one answered); nullopt when the sandbox went away.
  awaitable<std::optional<std::string>> ConnectUpstream(const std::string& sandbox_id,
                                                        const std::vector<IpAddress>& candidates, Record& record,
                                                        std::shared_ptr<beast::tcp_stream>& upstream) {
    boost::system::error_code ec;
    std::string connect_error;
    for (const IpAddress& address : candidates) {
      auto fd = OutboundSocket(address.v4);
      if (!fd.ok()) {
        connect_error = fd.status().ToString();
        continue;
      }
      tcp::socket socket(io);
      socket.assign(address.v4 ? tcp::v4() : tcp::v6(), fd->release(), ec);
      if (ec) {
        connect_error = ec.message();
        continue;
      }
      auto stream = std::make_shared<beast::tcp_stream>(std::move(socket));
      if (auto it = sandboxes.find(sandbox_id); it != sandboxes.end()) it->second.streams.insert(stream);
      upstream = stream;
      asio::ip::address ip = address.v4 ? asio::ip::address(asio::ip::make_address_v4(address.ToString()))
                                        : asio::ip::address(asio::ip::make_address_v6(address.ToString()));
      stream->expires_after(std::chrono::seconds(config.connect_timeout_s));
      co_await stream->async_connect(tcp::endpoint(ip, record.port), asio::redirect_error(use_awaitable, ec));
      if (stopped || sandboxes.find(sandbox_id) == sandboxes.end()) co_return std::nullopt;
      record.address = address.ToString();
      if (!ec) {
        boost::system::error_code ignored;
        stream->socket().set_option(tcp::no_delay(true), ignored);
        break;
      }
      connect_error = address.ToString() + ": " + (ec == beast::error::timeout ? "connection timed out" : ec.message());
      stream->close();
      upstream.reset();
    }
    co_return upstream ? std::string() : connect_error;
  }

  // The connection allowed and connected: the first bytes (CONNECT's answer to the sandbox, or
  // the request head to the server, `path` "" for a tunnel), then the bytes both ways until both
  // ends are done.
  awaitable<void> Splice(const std::string& sandbox_id, beast::tcp_stream& client, beast::flat_buffer& buffer,
                         const http::request<http::empty_body>& request, const std::string& path, Record& record,
                         const std::shared_ptr<beast::tcp_stream>& upstream) {
    boost::system::error_code ec;
    if (path.empty()) {
      static constexpr std::string_view kEstablished = "HTTP/1.1 200 Connection established\r\n\r\n";
      client.expires_after(std::chrono::seconds(config.idle_timeout_s));
      co_await asio::async_write(client, asio::buffer(kEstablished), asio::redirect_error(use_awaitable, ec));
    } else {
      std::string head = record.method + " " + path + " HTTP/1.1\r\n";
      for (const auto& field : request) {
        const std::string name(field.name_string());
        if (strcasecmp(name.c_str(), "Proxy-Connection") == 0 || strcasecmp(name.c_str(), "Proxy-Authorization") == 0 ||
            strcasecmp(name.c_str(), "Connection") == 0 || strcasecmp(name.c_str(), "Keep-Alive") == 0) {
          continue;
        }
        head += name + ": " + std::string(field.value()) + "\r\n";
      }
      head += "Connection: close\r\n\r\n";
      AddBytes(record, /*up=*/true, head.size());
      upstream->expires_after(std::chrono::seconds(config.idle_timeout_s));
      co_await asio::async_write(*upstream, asio::buffer(head), asio::redirect_error(use_awaitable, ec));
    }
    if (!ec && buffer.size() > 0) {
      // What the sandbox sent after the head (a body, or a TLS hello that did not wait).
      AddBytes(record, /*up=*/true, buffer.size());
      upstream->expires_after(std::chrono::seconds(config.idle_timeout_s));
      co_await asio::async_write(*upstream, buffer.data(), asio::redirect_error(use_awaitable, ec));
      buffer.consume(buffer.size());
    }
    if (!ec) {
      // Both ways at once; each direction ends at its EOF and passes the EOF on.
      // (Boost 1.74 has no awaitable operators: the upward pump runs on its own and wakes this
      // one through a timer when it ends.)
      auto client_ptr = FindStream(sandbox_id, client);
      if (client_ptr) {
        auto up_done = std::make_shared<Finished>(io);
        asio::co_spawn(io, Pump(sandbox_id, client_ptr, upstream, &record, /*up=*/true, up_done), asio::detached);
        co_await Pump(sandbox_id, upstream, client_ptr, &record, /*up=*/false, nullptr);
        if (!up_done->finished) co_await up_done->timer.async_wait(asio::redirect_error(use_awaitable, ec));
      }
    }
  }

  std::shared_ptr<beast::tcp_stream> FindStream(const std::string& sandbox_id, beast::tcp_stream& stream) {
    auto it = sandboxes.find(sandbox_id);
    if (it == sandboxes.end()) return nullptr;
    for (const auto& candidate : it->second.streams) {
      if (candidate.get() == &stream) return candidate;
    }
    return nullptr;
  }

  // Set when a pump ends; its timer is cancelled then, which wakes whoever waits on it.
  struct Finished {
    explicit Finished(asio::io_context& io_context) : timer(io_context, Clock::time_point::max()) {}
    bool finished = false;
    asio::steady_timer timer;
  };

  // `record` is the connection's, which outlives both pumps: the downward pump runs in the
  // connection's coroutine, which waits for the upward one.
  awaitable<void> Pump(std::string sandbox_id, std::shared_ptr<beast::tcp_stream> from,
                       std::shared_ptr<beast::tcp_stream> to, Record* record, bool up, std::shared_ptr<Finished> done) {
    auto self = shared_from_this();
    struct Signal {
      std::shared_ptr<Finished> done;
      ~Signal() {
        if (!done) return;
        done->finished = true;
        done->timer.cancel();
      }
    } signal{done};
    std::vector<char> chunk(kChunk);
    asio::steady_timer pause(io);
    boost::system::error_code ec;
    while (!stopped) {
      from->expires_after(std::chrono::seconds(config.idle_timeout_s));
      const size_t n = co_await from->async_read_some(asio::buffer(chunk), asio::redirect_error(use_awaitable, ec));
      if (ec || n == 0) break;
      AddBytes(*record, up, n);
      auto it = sandboxes.find(sandbox_id);
      if (it == sandboxes.end()) break;
      const Clock::duration wait = it->second.bucket.Take(n);
      if (wait > Clock::duration::zero()) {
        pause.expires_after(wait);
        co_await pause.async_wait(asio::redirect_error(use_awaitable, ec));
        if (stopped) break;
      }
      to->expires_after(std::chrono::seconds(config.idle_timeout_s));
      co_await asio::async_write(*to, asio::buffer(chunk.data(), n), asio::redirect_error(use_awaitable, ec));
      if (ec) break;
    }
    // Pass the end on (a half close), so the other direction can finish what it sends.
    boost::system::error_code ignored;
    to->socket().shutdown(tcp::socket::shutdown_send, ignored);
    if (ec && ec != asio::error::eof) {
      // A reset or a timeout: the whole connection is over.
      from->socket().shutdown(tcp::socket::shutdown_both, ignored);
      to->socket().shutdown(tcp::socket::shutdown_both, ignored);
    }
  }
};

StatusOr<std::unique_ptr<EgressProxy>> EgressProxy::Create(asio::io_context& io, EgressProxyConfig config,
                                                           Store& store) {
  static const int ares_ready = ares_library_init(ARES_LIB_INIT_ALL);
  if (ares_ready != ARES_SUCCESS) return Status::Error(std::string("c-ares: ") + ares_strerror(ares_ready));
  UniqueFd netns, own;
  if (!config.netns.empty()) {
    netns = UniqueFd(open(config.netns.c_str(), O_RDONLY | O_CLOEXEC));
    if (!netns.valid()) return ErrnoError("egress.netns: open " + config.netns);
    own = UniqueFd(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    if (!own.valid()) return ErrnoError("open /proc/thread-self/ns/net");
    // Prove both ways work now, not at the first connection.
    RETURN_IF_ERROR(isolation::CheckNetworkNamespaceEntry(netns.get(), own.get(), "egress.netns: " + config.netns));
  }
  return std::unique_ptr<EgressProxy>(new EgressProxy(io, std::move(config), store, std::move(netns), std::move(own)));
}

EgressProxy::EgressProxy(asio::io_context& io, EgressProxyConfig config, Store& store, UniqueFd netns,
                         UniqueFd own_netns)
    : config_(config), impl_(std::make_shared<Impl>(io, std::move(config), store, std::move(netns), std::move(own_netns))) {}

void EgressProxy::SetObserver(EgressObserver* observer) { impl_->observer = observer; }

EgressProxy::~EgressProxy() {
  impl_->stopped = true;
  impl_->observer = nullptr;
  std::vector<std::string> ids;
  for (const auto& [id, sandbox] : impl_->sandboxes) ids.push_back(id);
  for (const std::string& id : ids) Forget(id);
  impl_->resolvers.join();
}

void EgressProxy::Serve(const std::string& sandbox_id, std::vector<UniqueFd> listeners) {
  impl_->Close(sandbox_id);
  if (listeners.empty()) return;
  Impl::Sandbox sandbox;
  sandbox.bucket.rate = impl_->config.bandwidth;
  sandbox.bucket.tokens = static_cast<double>(impl_->config.bandwidth);
  if (!impl_->acceptor.Serve(sandbox_id, std::move(listeners[0]))) return;
  sandbox.generation = ++impl_->generations;
  impl_->sandboxes[sandbox_id] = std::move(sandbox);
}

void EgressProxy::Forget(const std::string& sandbox_id) {
  impl_->Close(sandbox_id);
  impl_->handed_rules.erase(sandbox_id);
  impl_->handed_secrets.erase(sandbox_id);
}

void EgressProxy::SetRules(const std::string& sandbox_id, EgressRules rules) {
  impl_->handed_rules[sandbox_id] = std::move(rules);
}

void EgressProxy::EnableSecrets(SecretVault& vault, InterceptCa& ca, std::unique_ptr<asio::ssl::context> upstream_tls) {
  impl_->vault = &vault;
  impl_->ca = &ca;
  impl_->upstream_tls = std::move(upstream_tls);
}

void EgressProxy::SetSecrets(const std::string& sandbox_id, const std::string& iss, const std::string& sub,
                             std::vector<std::string> names) {
  if (names.empty()) {
    impl_->handed_secrets.erase(sandbox_id);
    return;
  }
  impl_->handed_secrets[sandbox_id] = Impl::SecretNames{iss, sub, std::move(names)};
}

size_t EgressProxy::open_connections() const {
  size_t total = 0;
  for (const auto& [id, sandbox] : impl_->sandboxes) total += sandbox.connections;
  return total;
}

uint64_t EgressProxy::decisions() const { return impl_->decisions; }

}  // namespace corral::supervisor
