// An HTTP connection (keep-alive, pipelining allowed), until it closes or becomes a WebSocket.
//
// A request goes through these steps, each with its own deadline:
//   idle     waiting for a request's first byte: api.idle_timeout (the first request: the
//            handshake timeout from the connection's start); never past the end of the token
//            that the connection's previous request carried (a keep-alive connection is bound to
//            its token: when it expires or is revoked, an idle connection closes).
//   header   from its first byte to the end of its headers: api.handshake_timeout.
//   admit    with the headers only: origin, route, token, rate gate, body limit and a share of
//            the bodies' memory budget. A refusal is answered before any of the body is read,
//            and the connection then closes (lingering: what the client still sends is read
//            and dropped, a bounded amount). A stranger makes the daemon hold headers only.
//   body     at least api.body_min_rate bytes a second after a grace of the handshake timeout,
//            and never a handshake timeout without progress (408 otherwise).
//   handler  then the response, written at the same minimum rate.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "api/server_core.h"

namespace corral::api::internal {

class HttpSession : public Session, public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(std::shared_ptr<ServerCore> core, Stream stream, Peer peer, uint64_t id,
              std::unique_ptr<ConnectionSlot> slot);
  ~HttpSession() override;

  void Start();
  // Over the connection limit: 503 at once, then close.
  void Reject();
  // The handler's answer (on the io_context thread).
  void Respond(HttpResponse response);

  // Session
  void Shutdown() override {
    if (!upgraded_) CloseSocket();
  }
  void Recheck(const std::function<bool(const AuthContext&)>& which) override;

 private:
  enum class Phase { kIdle, kHeader, kBody, kHandling, kWriting, kClosing };

  void WaitForRequest();
  void ReadHeader();
  void OnHeader(const beast::error_code& ec);
  // Decides on the headers alone; then reads the body, or answers without reading it.
  void Admit();
  // The steps of Admit; each answers a refusal itself and returns false.
  // A browser's Origin: allowed, or the page's own (then cors_origin_ is set).
  bool AdmitOrigin();
  // Who is asking, from the headers alone: the request's auth (a token, or the admin socket)
  // and the request gate. Sets the largest body the request may have.
  bool AdmitCaller(const RouteEntry& route, size_t& max_body);
  bool AdmitNode(const Request& req);
  // The body's declared size against `max_body`, then a share of the memory budget.
  bool AdmitBody(size_t max_body);
  // Reads the admitted request's body, after a "100 Continue" when the client waits for one.
  void ContinueToBody();
  void ReadBody();
  void OnBody(const beast::error_code& ec);
  void OnReadError(const beast::error_code& ec);
  // A request's own deadline (headers, body): a timer that cancels the read, so the socket stays
  // open for the 408 (Beast's stream timeout closes it).
  void ArmDeadline(std::chrono::steady_clock::time_point deadline);
  // After a read of the request completed: true when it was the deadline that ended it.
  bool DeadlineHit(const beast::error_code& ec);
  void Dispatch();
  void HandlePreflight(const RouteMatch& match);
  void HandleUpgrade(const std::map<std::string, std::string>& query);
  // A refusal made before the body was read: the connection closes after it when a body is
  // still owed, since its bytes would otherwise be taken for the next request.
  void Refuse(HttpResponse response);
  void Send(HttpResponse response, bool close);
  void OnWrite(const beast::error_code& ec, bool close);
  void LingeringClose();
  void DoDrain();
  void CloseSocket();

  std::shared_ptr<ServerCore> core_;
  Stream stream_;
  Peer peer_;
  uint64_t id_;
  std::unique_ptr<ConnectionSlot> slot_;  // null for a rejected connection
  Phase phase_ = Phase::kIdle;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::unique_ptr<http::response<http::string_body>> response_;
  std::array<char, 4096> drain_buffer_;
  size_t drained_bytes_ = 0;
  std::chrono::steady_clock::time_point connected_at_;
  std::chrono::steady_clock::time_point request_start_;
  std::chrono::steady_clock::time_point body_start_;
  net::steady_timer deadline_;
  bool deadline_hit_ = false;
  bool first_request_ = true;
  bool keep_alive_ = false;
  bool body_owed_ = false;  // the admitted request's body has not been read in full
  bool awaiting_response_ = false;
  bool upgraded_ = false;
  bool closed_ = false;
  std::string request_id_;
  std::string cors_origin_;  // an allowed Origin, echoed in Access-Control-Allow-Origin
  // The request being admitted or handled (its body comes last), and the route it goes to.
  HttpRequest pending_;
  const RouteEntry* route_ = nullptr;
  BodyBudget::Hold body_hold_;
  bool chunked_body_ = false;  // no Content-Length: the hold grows as the body arrives
  // The token of the connection's latest authenticated request.
  std::string token_;
  AuthContext token_auth_;
  bool has_token_ = false;
  bool token_ended_ = false;  // revoked while its request was being read
};

}  // namespace corral::api::internal
