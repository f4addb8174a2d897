// A WebSocket connection (server.h's WsConnection), from the accepted upgrade to the end.
//
// Bound to its token: a timer ends the connection (close 1008) once the token's `exp` plus the
// allowed skew has passed, and Server::Reauthenticate ends it at once when its token no longer
// verifies (issuer removed, secret replaced, token revoked). Renew swaps in a fresh token of
// the same user. Messages that arrive once the token has ended are not handed to the handler.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/beast/websocket.hpp>

#include "api/server_core.h"

namespace corral::api::internal {

class WsSession : public Session, public WsConnection, public std::enable_shared_from_this<WsSession> {
 public:
  WsSession(std::shared_ptr<ServerCore> core, Stream stream, Peer peer, uint64_t id,
            std::unique_ptr<ConnectionSlot> slot, std::unique_ptr<UserSlot> user_slot, AuthContext auth,
            std::string token, std::string forwarded_by);
  ~WsSession() override;

  void Start(Request request, bool select_subprotocol, const std::string& request_id);

  // WsConnection
  uint64_t id() const override { return id_; }
  const AuthContext& auth() const override { return auth_; }
  void SendText(std::string message) override { Enqueue(true, std::move(message)); }
  void SendBinary(std::string message) override { Enqueue(false, std::move(message)); }
  size_t queued_bytes() const override { return queued_bytes_; }
  bool full() const override { return queued_bytes_ > core_->limits.ws_queue_high_water; }
  void SetOnDrain(std::function<void()> on_drain) override { on_drain_ = std::move(on_drain); }
  void AddOnDrain(std::function<void()> on_drain) override { more_on_drain_.push_back(std::move(on_drain)); }
  void PauseReading() override { read_paused_ = true; }
  void ResumeReading() override;
  void Close(uint16_t code, std::string reason) override;
  bool closed() const override { return finished_ || close_requested_; }
  StatusOr<int64_t> Renew(const std::string& token) override;
  const std::string& token() const override { return token_; }
  const std::string& forwarded_by() const override { return forwarded_by_; }

  // Session
  void Shutdown() override;
  void Recheck(const std::function<bool(const AuthContext&)>& which) override;

 private:
  void OnAccept(const beast::error_code& ec);
  void DoRead();
  void OnRead(const beast::error_code& ec);
  void Enqueue(bool text, std::string payload);
  void DoWrite();
  void OnWrite(const beast::error_code& ec);
  void DoClose();
  // Drops what is queued but not yet being written.
  void DropQueue();
  // Logs `message` (info) with who is connected (connection, remote, iss, sub, jti) and one more
  // field.
  void LogWho(std::string_view message, std::string_view key, std::string_view value) const;
  // Closes the socket: every pending operation completes with an error, the read last.
  void Abort();
  // Bounds a close that cannot complete (a client that reads nothing): Abort after the
  // handshake timeout.
  void ArmAbortTimer();
  // The token's end: a timer at its deadline (none for the admin socket).
  void ArmExpiry();
  // Verifies the token again; ends the connection when it no longer verifies.
  void CheckToken();
  // The connection's token is no longer good: close 1008 now, with what is queued dropped.
  void EndForToken(const std::string& reason);
  // The end of the connection, once: releases the limits' slots and calls OnClose.
  void Finish(const beast::error_code& ec);

  struct Outgoing {
    bool text;
    std::string payload;
  };

  std::shared_ptr<ServerCore> core_;
  boost::beast::websocket::stream<Stream> ws_;
  Peer peer_;
  uint64_t id_;
  std::unique_ptr<ConnectionSlot> slot_;
  std::unique_ptr<UserSlot> user_slot_;
  AuthContext auth_;
  std::string token_;  // "" on the admin socket
  std::string forwarded_by_;
  bool token_ended_ = false;
  std::optional<Request> upgrade_request_;
  beast::flat_buffer read_buffer_;
  std::deque<Outgoing> queue_;  // front() is being written while writing_
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool above_high_water_ = false;
  bool opened_ = false;
  bool close_requested_ = false;
  bool close_started_ = false;
  bool finished_ = false;
  bool read_paused_ = false;  // PauseReading: no read is started
  bool read_parked_ = false;  // a read is owed once reading resumes
  // While parked no operation holds the session: it holds itself (until it reads again).
  std::shared_ptr<WsSession> parked_self_;
  boost::beast::websocket::close_reason close_reason_;
  std::function<void()> on_drain_;
  std::vector<std::function<void()>> more_on_drain_;
  net::steady_timer abort_timer_;
  net::steady_timer expiry_timer_;
};

}  // namespace corral::api::internal
