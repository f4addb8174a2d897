#include "api/ws_forward.h"

#include <deque>
#include <utility>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <nlohmann/json.hpp>

#include "api/error_codes.h"
#include "api/ws_frames.h"
#include "common/log.h"
#include "common/unix_time.h"

namespace corral::api {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using nlohmann::json;

namespace {

// The id of the `auth` ops this node sends upstream itself (their replies go no further).
constexpr char kRenewId[] = "corral-forward-auth";
// Bytes queued for an upstream above which the client's input waits.
constexpr size_t kUpstreamHighWater = 4 << 20;

json ErrorReply(const json& id, const Status& status) {
  const ErrorCode code = ErrorCodeFor(status);
  return json{{"id", id},
              {"ok", false},
              {"error", {{"code", ErrorCodeName(code)}, {"message", status.message()}}}};
}

}  // namespace

// One WebSocket to another node, for one client connection: messages queue until it is open,
// then go in order; what it receives goes to `on_message`, and its end to `on_end` (once).
class WsForwarder::Upstream : public std::enable_shared_from_this<Upstream> {
 public:
  using OnMessage = std::function<void(bool text, std::string message)>;
  // `unsent`: the text messages it never sent (when it never opened: the client's ops, to answer).
  using OnEnd = std::function<void(bool was_open, const std::string& why, std::vector<std::string> unsent)>;
  using Full = std::function<bool()>;
  using OnDrained = std::function<void()>;

  Upstream(net::io_context& io, supervisor::FleetTarget target)
      : resolver_(io), ws_(io), target_(std::move(target)) {}

  void Start(const std::string& token, const HopSigner& signer, OnMessage on_message, OnEnd on_end, Full full,
             OnDrained on_drained) {
    on_message_ = std::move(on_message);
    on_end_ = std::move(on_end);
    full_ = std::move(full);
    on_drained_ = std::move(on_drained);
    auto host_port = SplitHostPort(target_.address);
    if (!host_port.ok()) return End(host_port.status().message());
    const std::string authorization = "Bearer " + token;
    const std::string mark = signer.Sign("GET", "/v1/ws", authorization, UnixNowMs());
    ws_.set_option(websocket::stream_base::decorator([authorization, mark](websocket::request_type& request) {
      request.set(beast::http::field::authorization, authorization);
      request.set(kHopHeader, mark);
      request.set(beast::http::field::sec_websocket_protocol, "corral.v1");
    }));
    beast::get_lowest_layer(ws_).expires_after(PeerHttp::kConnectTimeout);
    auto self = shared_from_this();
    resolver_.async_resolve(host_port->first, host_port->second,
                            [self, host = target_.address](beast::error_code ec, tcp::resolver::results_type found) {
      if (ec) return self->End("resolve: " + ec.message());
      beast::get_lowest_layer(self->ws_).async_connect(found, [self, host](beast::error_code connect_ec,
                                                                           const tcp::endpoint&) {
        if (connect_ec) return self->End("connect: " + connect_ec.message());
        beast::error_code ignored;
        beast::get_lowest_layer(self->ws_).socket().set_option(tcp::no_delay(true), ignored);
        self->ws_.async_handshake(host, "/v1/ws", [self](beast::error_code handshake_ec) {
          if (handshake_ec) return self->End("handshake: " + handshake_ec.message());
          beast::get_lowest_layer(self->ws_).expires_never();
          self->ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::client));
          self->ws_.auto_fragment(false);
          self->open_ = true;
          self->Write();
          self->Read();
        });
      });
    });
  }

  void Send(bool text, std::string message) {
    if (ended_) return;
    queued_bytes_ += message.size();
    queue_.emplace_back(text, std::move(message));
    if (open_) Write();
  }

  // Abrupt: the socket closes, pending operations end; no callback follows.
  void Close() {
    ended_ = true;
    on_message_ = nullptr;
    on_end_ = nullptr;
    on_drained_ = nullptr;
    resolver_.cancel();
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().close(ignored);
  }

  size_t queued_bytes() const { return queued_bytes_; }
  const supervisor::FleetTarget& target() const { return target_; }

  // The client's queue went down: a read that waited for it goes on.
  void Resume() {
    if (!waiting_ || ended_) return;
    waiting_ = false;
    Read();
  }

 private:
  void Write() {
    if (writing_ || queue_.empty() || ended_) return;
    writing_ = true;
    ws_.text(queue_.front().first);
    ws_.async_write(net::buffer(queue_.front().second), [self = shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->End("write: " + ec.message());
      self->queued_bytes_ -= self->queue_.front().second.size();
      self->queue_.pop_front();
      if (self->on_drained_ && self->queued_bytes_ <= kUpstreamHighWater) self->on_drained_();
      self->Write();
    });
  }

  void Read() {
    if (ended_) return;
    // The client reads slower than the node sends: wait for it (Resume, on its drain), and the
    // node's stream waits in turn (TCP pushes back).
    if (full_ && full_()) {
      waiting_ = true;
      return;
    }
    ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->End(ec == websocket::error::closed ? "closed (" + std::to_string(self->ws_.reason().code) + ")"
                                                              : "read: " + ec.message());
      std::string message = beast::buffers_to_string(self->buffer_.data());
      self->buffer_.consume(self->buffer_.size());
      if (self->on_message_) self->on_message_(self->ws_.got_text(), std::move(message));
      self->Read();
    });
  }

  void End(const std::string& why) {
    if (ended_) return;
    ended_ = true;
    OnEnd on_end = std::move(on_end_);
    on_message_ = nullptr;
    on_drained_ = nullptr;
    beast::error_code ignored;
    beast::get_lowest_layer(ws_).socket().close(ignored);
    std::vector<std::string> unsent;
    for (auto& [text, message] : queue_) {
      if (text) unsent.push_back(std::move(message));
    }
    queue_.clear();
    if (on_end) on_end(open_, why, std::move(unsent));
  }

  tcp::resolver resolver_;
  websocket::stream<beast::tcp_stream> ws_;
  supervisor::FleetTarget target_;
  beast::flat_buffer buffer_;
  std::deque<std::pair<bool, std::string>> queue_;
  size_t queued_bytes_ = 0;
  bool open_ = false;
  bool writing_ = false;
  bool waiting_ = false;  // a read waits for the client's queue
  bool ended_ = false;
  OnMessage on_message_;
  OnEnd on_end_;
  Full full_;
  OnDrained on_drained_;
};

// What one client connection has forwarded.
struct WsForwarder::Client {
  std::weak_ptr<WsConnection> ws;
  std::map<std::string, std::shared_ptr<Upstream>> upstreams;  // by node
  std::map<std::string, std::string> command_nodes;           // commands attached through a node
  std::map<std::string, std::string> session_nodes;           // sessions, once located
  std::map<uint32_t, std::pair<std::string, uint32_t>> to_remote;  // local channel -> node, its channel
  std::map<std::pair<std::string, uint32_t>, uint32_t> to_local;
  uint32_t next_channel = WsForwarder::kForwardedChannelBase;
  bool paused = false;  // its input waits for an upstream's queue

  uint32_t LocalChannel(const std::string& node, uint32_t remote) {
    auto [it, added] = to_local.emplace(std::make_pair(node, remote), next_channel);
    if (added) to_remote[next_channel++] = {node, remote};
    return it->second;
  }
};

WsForwarder::WsForwarder(net::io_context& io, std::shared_ptr<WsHandler> local, supervisor::FleetRouter& router,
                         const HopSigner& signer)
    : io_(io), local_(std::move(local)), router_(router), signer_(signer) {}

WsForwarder::~WsForwarder() {
  for (auto& [id, client] : clients_) {
    for (auto& [node, upstream] : client->upstreams) upstream->Close();
  }
}

void WsForwarder::OnOpen(const std::shared_ptr<WsConnection>& connection) {
  auto client = std::make_unique<Client>();
  client->ws = connection;
  clients_[connection->id()] = std::move(client);
  local_->OnOpen(connection);
  // The client's queue went down: the upstream streams that waited for it read again.
  connection->AddOnDrain([this, id = connection->id()] {
    auto found = clients_.find(id);
    if (found == clients_.end()) return;
    for (auto& [node, upstream] : found->second->upstreams) upstream->Resume();
  });
}

void WsForwarder::OnClose(const std::shared_ptr<WsConnection>& connection) {
  auto it = clients_.find(connection->id());
  if (it != clients_.end()) {
    for (auto& [node, upstream] : it->second->upstreams) upstream->Close();
    clients_.erase(it);
  }
  local_->OnClose(connection);
}

StatusOr<std::string> WsForwarder::TargetOf(Client& client, const std::string& op, const json& request,
                                            supervisor::FleetTarget& target) {
  auto field = [&](const char* key) {
    auto it = request.find(key);
    return it != request.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto locate = [&](supervisor::FleetResource kind, const std::string& id) -> StatusOr<std::string> {
    if (id.empty()) return std::string();  // here: the local op answers what is missing
    ASSIGN_OR_RETURN(target, router_.Locate(kind, id));
    return target.here ? std::string() : target.node_id;
  };
  if (op == "exec" || op == "sandbox.watch" || op == "sandbox.unwatch") {
    return locate(supervisor::FleetResource::kSandbox, field("sandbox"));
  }
  if (op == "attach") return locate(supervisor::FleetResource::kCommand, field("command"));
  if (op == "stdin" || op == "close_stdin" || op == "signal" || op == "resize" || op == "detach") {
    auto it = client.command_nodes.find(field("command"));
    if (it == client.command_nodes.end()) return std::string();
    auto upstream = client.upstreams.find(it->second);
    if (upstream == client.upstreams.end()) return std::string();
    target = upstream->second->target();
    return it->second;
  }
  if (op.rfind("session.", 0) == 0) {
    const std::string session = field("session");
    auto known = client.session_nodes.find(session);
    if (known != client.session_nodes.end()) {
      auto upstream = client.upstreams.find(known->second);
      if (upstream != client.upstreams.end()) {
        target = upstream->second->target();
        return known->second;
      }
    }
    ASSIGN_OR_RETURN(std::string node, locate(supervisor::FleetResource::kSession, session));
    if (!node.empty()) client.session_nodes[session] = node;
    return node;
  }
  return std::string();
}

WsForwarder::Upstream& WsForwarder::UpstreamTo(Client& client, const supervisor::FleetTarget& target) {
  auto it = client.upstreams.find(target.node_id);
  if (it != client.upstreams.end()) return *it->second;
  auto ws = client.ws.lock();
  auto upstream = std::make_shared<Upstream>(io_, target);
  client.upstreams[target.node_id] = upstream;
  const uint64_t id = ws->id();
  std::weak_ptr<WsConnection> weak = ws;
  upstream->Start(
      ws->token(), signer_,
      [this, id, node = target.node_id](bool text, std::string message) {
        FromUpstream(id, node, text, std::move(message));
      },
      [this, id, node = target.node_id](bool was_open, const std::string& why, std::vector<std::string> unsent) {
        UpstreamFailed(id, node, was_open, why, std::move(unsent));
      },
      [weak] {
        auto connection = weak.lock();
        return connection && connection->full();
      },
      [this, id] { Drained(id); });
  return *upstream;
}

void WsForwarder::OnText(const std::shared_ptr<WsConnection>& connection, std::string message) {
  auto found = clients_.find(connection->id());
  // A connection another node forwarded is served here, whatever the catalog says (no loops).
  if (found == clients_.end() || !connection->forwarded_by().empty()) return local_->OnText(connection, std::move(message));
  Client& client = *found->second;
  json request = json::parse(message, nullptr, false);
  if (!request.is_object() || !request.contains("op") || !request["op"].is_string()) {
    return local_->OnText(connection, std::move(message));
  }
  const std::string op = request["op"].get<std::string>();
  if (op == "auth") {
    // The new token for every node this connection reaches, then for this one (its answer).
    if (request.contains("token") && request["token"].is_string()) {
      const std::string renew = json{{"id", kRenewId}, {"op", "auth"}, {"token", request["token"]}}.dump();
      for (auto& [node, upstream] : client.upstreams) upstream->Send(true, renew);
    }
    return local_->OnText(connection, std::move(message));
  }
  supervisor::FleetTarget target;
  StatusOr<std::string> node = TargetOf(client, op, request, target);
  if (!node.ok()) return connection->SendText(ErrorReply(request.value("id", json()), node.status()).dump());
  if (node->empty()) return local_->OnText(connection, std::move(message));
  Upstream& upstream = UpstreamTo(client, target);
  upstream.Send(true, std::move(message));
  if (upstream.queued_bytes() > kUpstreamHighWater && !client.paused) {
    client.paused = true;
    connection->PauseReading();
  }
}

void WsForwarder::OnBinary(const std::shared_ptr<WsConnection>& connection, std::string message) {
  auto found = clients_.find(connection->id());
  if (found == clients_.end() || !connection->forwarded_by().empty()) {
    return local_->OnBinary(connection, std::move(message));
  }
  Client& client = *found->second;
  StatusOr<Frame> frame = DecodeFrame(message);
  if (!frame.ok()) return local_->OnBinary(connection, std::move(message));  // it refuses it
  auto remote = client.to_remote.find(frame->header.channel);
  if (remote == client.to_remote.end()) return local_->OnBinary(connection, std::move(message));
  auto upstream = client.upstreams.find(remote->second.first);
  if (upstream == client.upstreams.end()) return local_->OnBinary(connection, std::move(message));
  FrameHeader header = frame->header;
  header.channel = remote->second.second;
  upstream->second->Send(false, EncodeFrame(header, frame->data));
}

void WsForwarder::FromUpstream(uint64_t client_id, const std::string& node, bool text, std::string message) {
  auto found = clients_.find(client_id);
  if (found == clients_.end()) return;
  Client& client = *found->second;
  auto connection = client.ws.lock();
  if (!connection || connection->closed()) return;
  if (!text) {
    StatusOr<Frame> frame = DecodeFrame(message);
    if (!frame.ok()) return;
    FrameHeader header = frame->header;
    header.channel = client.LocalChannel(node, header.channel);
    return connection->SendBinary(EncodeFrame(header, frame->data));
  }
  json reply = json::parse(message, nullptr, false);
  if (!reply.is_object()) return connection->SendText(std::move(message));
  if (reply.contains("id") && reply["id"] == kRenewId) {
    if (reply.value("ok", false) != true) LogWarn("fleet", "renewing a forwarded stream's token failed", {{"node", node}});
    return;
  }
  bool changed = false;
  auto remap = [&](json& object) {
    auto channel = object.find("channel");
    if (channel == object.end() || !channel->is_number_unsigned()) return;
    *channel = client.LocalChannel(node, channel->get<uint32_t>());
    changed = true;
  };
  remap(reply);
  auto result = reply.find("result");
  if (result != reply.end() && result->is_object()) {
    remap(*result);
    auto command = result->find("command");
    if (command != result->end() && command->is_string()) client.command_nodes[command->get<std::string>()] = node;
  }
  connection->SendText(changed ? reply.dump() : std::move(message));
}

void WsForwarder::Drained(uint64_t client_id) {
  auto found = clients_.find(client_id);
  if (found == clients_.end() || !found->second->paused) return;
  for (auto& [node, upstream] : found->second->upstreams) {
    if (upstream->queued_bytes() > kUpstreamHighWater) return;
  }
  found->second->paused = false;
  if (auto connection = found->second->ws.lock()) connection->ResumeReading();
}

void WsForwarder::UpstreamFailed(uint64_t client_id, const std::string& node, bool was_open, const std::string& why,
                                 std::vector<std::string> unsent) {
  auto found = clients_.find(client_id);
  if (found == clients_.end()) return;
  Client& client = *found->second;
  auto upstream = client.upstreams.find(node);
  const std::string address = upstream != client.upstreams.end() ? upstream->second->target().address : "";
  if (upstream != client.upstreams.end()) client.upstreams.erase(upstream);
  LogWarn("fleet", "forwarded stream ended", {{"node", node}, {"address", address}, {"error", why}});
  auto connection = client.ws.lock();
  if (!connection || connection->closed()) return;
  if (was_open) {
    // Its streams are gone with it: the client reconnects and resumes them from their seqs.
    return connection->Close(1001, "node " + node + " ended the forwarded stream");
  }
  // It never opened: each op sent to it is answered, as the node itself would have.
  const Status unavailable =
      Status::Error("node " + node + " (" + address + ") did not answer: " + why, EAGAIN);
  for (const std::string& text : unsent) {
    json op = json::parse(text, nullptr, false);
    if (op.is_object() && op.contains("id") && op["id"] != kRenewId) {
      connection->SendText(ErrorReply(op["id"], unavailable).dump());
    }
  }
  Drained(client_id);
}

}  // namespace corral::api
