#include "api/ws_session.h"

#include <boost/asio/buffer.hpp>

#include "api/http_text.h"

namespace corral::api::internal {

namespace websocket = boost::beast::websocket;

WsSession::WsSession(std::shared_ptr<ServerCore> core, Stream stream, Peer peer, uint64_t id,
                     std::unique_ptr<ConnectionSlot> slot, std::unique_ptr<UserSlot> user_slot, AuthContext auth,
                     std::string token, std::string forwarded_by)
    : core_(std::move(core)),
      ws_(std::move(stream)),
      peer_(std::move(peer)),
      id_(id),
      slot_(std::move(slot)),
      user_slot_(std::move(user_slot)),
      auth_(std::move(auth)),
      token_(std::move(token)),
      forwarded_by_(std::move(forwarded_by)),
      abort_timer_(core_->io),
      expiry_timer_(core_->io) {}

WsSession::~WsSession() { core_->Unregister(id_); }

void WsSession::Start(Request request, bool select_subprotocol, const std::string& request_id) {
  auto timeout = websocket::stream_base::timeout::suggested(beast::role_type::server);
  timeout.handshake_timeout = core_->handshake_timeout;
  timeout.idle_timeout = core_->idle_timeout;
  timeout.keep_alive_pings = true;
  ws_.set_option(timeout);
  ws_.read_message_max(core_->limits.max_ws_message_bytes);
  // One frame per message, written in one go: Beast's default splits every message into 4 KiB
  // fragments, each its own socket write and trip through the event loop.
  ws_.auto_fragment(false);
  ws_.set_option(
      websocket::stream_base::decorator([select_subprotocol, request_id](websocket::response_type& res) {
        res.set(http::field::server, "corrald");
        res.set("X-Request-Id", request_id);
        // Only corral.v1 is ever echoed: a `bearer.<jwt>` entry must not come back in a header.
        if (select_subprotocol) res.set(http::field::sec_websocket_protocol, kSubprotocol);
      }));
  upgrade_request_ = std::move(request);
  ws_.async_accept(*upgrade_request_,
                   [self = shared_from_this()](const beast::error_code& ec) { self->OnAccept(ec); });
}

void WsSession::LogWho(std::string_view message, std::string_view key, std::string_view value) const {
  LogInfo(kLog, message,
          {{"connection", std::to_string(id_)},
           {"remote", peer_.name},
           {"iss", auth_.iss},
           {"sub", auth_.sub},
           {"jti", auth_.claims.jti},
           {key, value}});
}

void WsSession::OnAccept(const beast::error_code& ec) {
  upgrade_request_.reset();
  if (ec) {
    LogInfo(kLog, "websocket handshake failed",
            {{"connection", std::to_string(id_)}, {"remote", peer_.name}, {"error", ec.message()}});
    Finish(ec);
    return;
  }
  opened_ = true;
  core_->ws_connections->Add(1);
  core_->http_requests->WithLabels({"101"}).Increment();
  LogWho("websocket opened", "admin", auth_.admin ? "true" : "false");
  ArmExpiry();
  auto self = shared_from_this();
  CallSafely("WsHandler::OnOpen", [&] { core_->ws_handler->OnOpen(self); });
  if (!finished_) DoRead();
}

void WsSession::DoRead() {
  ws_.async_read(read_buffer_,
                 [self = shared_from_this()](const beast::error_code& ec, size_t) { self->OnRead(ec); });
}

void WsSession::OnRead(const beast::error_code& ec) {
  if (ec) {
    Finish(ec);
    return;
  }
  bool text = ws_.got_text();
  std::string message = beast::buffers_to_string(read_buffer_.data());
  read_buffer_.consume(read_buffer_.size());
  core_->ws_messages_in->Increment();
  core_->ws_bytes_in->Increment(message.size());
  auto self = shared_from_this();
  // A message that arrives after the token ended is read (the close handshake needs the reads)
  // and dropped: nothing runs under a token that no longer verifies.
  if (token_ended_) {
  } else if (text) {
    CallSafely("WsHandler::OnText", [&] { core_->ws_handler->OnText(self, std::move(message)); });
  } else {
    CallSafely("WsHandler::OnBinary", [&] { core_->ws_handler->OnBinary(self, std::move(message)); });
  }
  if (finished_) return;
  if (read_paused_ && !close_requested_) {
    read_parked_ = true;
    parked_self_ = shared_from_this();
  } else {
    DoRead();
  }
}

void WsSession::ResumeReading() {
  read_paused_ = false;
  if (read_parked_ && !finished_) {
    read_parked_ = false;
    auto self = std::move(parked_self_);
    DoRead();
  }
}

void WsSession::Enqueue(bool text, std::string payload) {
  if (!opened_ || finished_ || close_requested_) return;
  queued_bytes_ += payload.size();
  queue_.push_back(Outgoing{text, std::move(payload)});
  if (queued_bytes_ > core_->limits.ws_queue_hard_limit) {
    LogWarn(kLog, "websocket client too slow; closing",
            {{"connection", std::to_string(id_)},
             {"remote", peer_.name},
             {"queued_bytes", std::to_string(queued_bytes_)}});
    DropQueue();
    Close(static_cast<uint16_t>(websocket::close_code::policy_error), "too slow");
    ArmAbortTimer();
    return;
  }
  if (queued_bytes_ > core_->limits.ws_queue_high_water) above_high_water_ = true;
  if (!writing_) DoWrite();
}

void WsSession::DoWrite() {
  writing_ = true;
  const Outgoing& next = queue_.front();
  ws_.text(next.text);
  ws_.async_write(net::buffer(next.payload),
                  [self = shared_from_this()](const beast::error_code& ec, size_t) { self->OnWrite(ec); });
}

void WsSession::OnWrite(const beast::error_code& ec) {
  writing_ = false;
  if (ec) {
    Abort();
    return;
  }
  core_->ws_messages_out->Increment();
  core_->ws_bytes_out->Increment(queue_.front().payload.size());
  queued_bytes_ -= queue_.front().payload.size();
  queue_.pop_front();
  if (above_high_water_ && queued_bytes_ <= core_->limits.ws_queue_high_water) {
    above_high_water_ = false;
    if (on_drain_ && !finished_ && !close_requested_) {
      auto on_drain = on_drain_;  // the callback may replace itself
      CallSafely("WsConnection drain callback", on_drain);
    }
    for (size_t i = 0; i < more_on_drain_.size() && !finished_ && !close_requested_; ++i) {
      auto on_drain = more_on_drain_[i];  // a copy: the callback may add another
      CallSafely("WsConnection drain callback", on_drain);
    }
  }
  if (writing_ || finished_) return;  // the drain callback's send started the next write
  if (!queue_.empty()) {
    DoWrite();
  } else if (close_requested_ && !close_started_) {
    DoClose();
  }
}

void WsSession::Close(uint16_t code, std::string reason) {
  if (!opened_ || finished_ || close_requested_) return;
  close_requested_ = true;
  close_reason_ = websocket::close_reason(static_cast<websocket::close_code>(SendableCloseCode(code)),
                                          TruncateReason(std::move(reason)));
  // The close handshake ends in the read (Beast completes it with the peer's close frame).
  ResumeReading();
  if (!writing_ && queue_.empty()) DoClose();
}

void WsSession::DoClose() {
  close_started_ = true;
  ws_.async_close(close_reason_, [self = shared_from_this()](const beast::error_code& ec) {
    // The read, which Beast completes once the close handshake is over, calls Finish.
    if (ec && !self->finished_) self->Abort();
  });
}

void WsSession::DropQueue() {
  while (queue_.size() > (writing_ ? 1u : 0u)) queue_.pop_back();
  queued_bytes_ = queue_.empty() ? 0 : queue_.front().payload.size();
  above_high_water_ = false;
}

void WsSession::Abort() {
  beast::error_code ignored;
  beast::get_lowest_layer(ws_).socket().shutdown(net::socket_base::shutdown_both, ignored);
  beast::get_lowest_layer(ws_).close();
  // A parked read is owed: it fails at once on the closed socket, and Finish runs.
  ResumeReading();
}

void WsSession::ArmAbortTimer() {
  abort_timer_.expires_after(core_->handshake_timeout);
  abort_timer_.async_wait([self = shared_from_this()](const beast::error_code& ec) {
    if (!ec && !self->finished_) {
      LogInfo(kLog, "websocket close timed out", {{"connection", std::to_string(self->id_)}});
      self->Abort();
    }
  });
}

void WsSession::ArmExpiry() {
  if (auth_.admin || auth_.expires_at == 0 || finished_) return;
  expiry_timer_.expires_at(TokenDeadline(auth_.expires_at));
  // Weak: a connection waiting for its token to end is held by its read, not by this timer.
  expiry_timer_.async_wait([weak = weak_from_this()](const beast::error_code& ec) {
    auto self = weak.lock();
    if (!ec && self && !self->finished_) self->CheckToken();
  });
}

void WsSession::CheckToken() {
  if (auth_.admin || token_ended_ || finished_ || !opened_) return;
  auto verified = core_->Authenticate(token_, peer_, "");
  if (!verified.ok()) {
    EndForToken(verified.status().message());
    return;
  }
  if (verified->iss != auth_.iss || verified->sub != auth_.sub) {  // cannot happen: the same token
    EndForToken("token names another user");
    return;
  }
  auth_ = std::move(*verified);
  ArmExpiry();
}

void WsSession::EndForToken(const std::string& reason) {
  if (token_ended_ || finished_) return;
  token_ended_ = true;
  expiry_timer_.cancel();
  core_->auth_ended->Increment();
  LogWho("websocket closed: its token no longer verifies", "reason", reason);
  // Output still queued for the client is dropped: the close goes out now, not after it.
  DropQueue();
  Close(static_cast<uint16_t>(websocket::close_code::policy_error), "token expired or revoked");
  ArmAbortTimer();
}

StatusOr<int64_t> WsSession::Renew(const std::string& token) {
  if (auth_.admin) return Status::Error("the admin socket needs no token", EINVAL);
  if (token_ended_ || finished_) return Status::Error("the connection's token has ended", EKEYREJECTED);
  auto verified = core_->Authenticate(token, peer_, "");
  if (!verified.ok()) return Status::Error("unauthorized", EKEYREJECTED);
  if (verified->iss != auth_.iss || verified->sub != auth_.sub) {
    LogWarn(kLog, "websocket token renewal refused: another user",
            {{"connection", std::to_string(id_)}, {"iss", auth_.iss}, {"sub", auth_.sub}});
    return Status::Error("the token names another user than this connection's", EPERM);
  }
  auth_ = std::move(*verified);
  token_ = token;
  LogInfo(kLog, "websocket token renewed",
          {{"connection", std::to_string(id_)}, {"jti", auth_.claims.jti}, {"exp", std::to_string(auth_.claims.exp)}});
  ArmExpiry();
  return auth_.claims.exp;
}

void WsSession::Recheck(const std::function<bool(const AuthContext&)>& which) {
  if (auth_.admin || !opened_ || finished_ || token_ended_ || !which(auth_)) return;
  CheckToken();
}

void WsSession::Shutdown() {
  if (finished_) return;
  if (!opened_) {
    Abort();
    return;
  }
  DropQueue();
  Close(static_cast<uint16_t>(websocket::close_code::going_away), "going away");
  ArmAbortTimer();
}

void WsSession::Finish(const beast::error_code& ec) {
  if (finished_) return;
  finished_ = true;
  abort_timer_.cancel();
  expiry_timer_.cancel();
  read_parked_ = false;
  auto parked = std::move(parked_self_);
  // Beast's own timer would otherwise stay armed (up to the idle timeout) after an error,
  // holding the io_context, for as long as a handler keeps this connection alive.
  ws_.set_option(
      websocket::stream_base::timeout{websocket::stream_base::none(), websocket::stream_base::none(), false});
  Abort();
  queue_.clear();
  queued_bytes_ = 0;
  user_slot_.reset();
  if (opened_) {
    core_->ws_connections->Add(-1);
    const auto& reason = ws_.reason();
    LogInfo(kLog, "websocket closed",
            {{"connection", std::to_string(id_)},
             {"remote", peer_.name},
             {"peer_close_code", std::to_string(reason.code)},
             {"error", ec == websocket::error::closed ? "" : ec.message()}});
    auto self = shared_from_this();
    CallSafely("WsHandler::OnClose", [&] { core_->ws_handler->OnClose(self); });
  }
  on_drain_ = nullptr;  // it may hold a reference to this connection
  more_on_drain_.clear();
  slot_.reset();
}

}  // namespace corral::api::internal
