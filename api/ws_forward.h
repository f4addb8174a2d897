// Any node answers any WebSocket op: one client connection may act on sandboxes of several
// nodes, so the WebSocket is forwarded op by op, not as a whole (api/forwarding.h does HTTP).
//
// For each client connection, the node it reached keeps one upstream WebSocket per other node
// it has needed, opened on first use to that node's node.address with the client's own token
// (verified again there) and a hop mark (api/hop.h), so that the other node never forwards it
// on. An op goes where what it names is held:
//   exec, sandbox.watch, sandbox.unwatch       {sandbox}: the sandbox's node
//   attach                                      {command}: its sandbox's node
//   stdin, close_stdin, signal, resize, detach  {command}: where it was attached on this connection
//   session.*                                   {session}: its sandbox's node
//   auth                                        here, and to every upstream (the token renewed)
//   anything else (ping, what this node holds)  here (ws_api.h)
// Replies and events come back as the other node sent them, request ids and sequence numbers
// included (a stream's seqs are its node's, so a resume with after_seq works through any node),
// but for channel numbers: channels are a connection's, and a forwarded stream's channel is
// renumbered from kForwardedChannelBase up in text and binary frames both ways.
//
// An upstream that cannot be reached fails the ops sent to it (503 `unavailable`, naming the
// node); one that ends after it was open ends the client's connection (1001), whose client
// reconnects and resumes its streams from their last seqs, as after any lost connection.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "api/peer_http.h"
#include "api/server_types.h"
#include "supervisor/fleet/fleet_router.h"

namespace corral::api {

class WsForwarder : public WsHandler {
 public:
  static constexpr uint32_t kForwardedChannelBase = 1u << 31;

  WsForwarder(boost::asio::io_context& io, std::shared_ptr<WsHandler> local, supervisor::FleetRouter& router,
              const HopSigner& signer);
  ~WsForwarder() override;

  void OnOpen(const std::shared_ptr<WsConnection>& connection) override;
  void OnText(const std::shared_ptr<WsConnection>& connection, std::string message) override;
  void OnBinary(const std::shared_ptr<WsConnection>& connection, std::string message) override;
  void OnClose(const std::shared_ptr<WsConnection>& connection) override;

  class Upstream;  // ws_forward.cc

 private:
  struct Client;

  // The node an op goes to: "" for here.
  StatusOr<std::string> TargetOf(Client& client, const std::string& op, const nlohmann::json& request,
                                 supervisor::FleetTarget& target);
  Upstream& UpstreamTo(Client& client, const supervisor::FleetTarget& target);
  void FromUpstream(uint64_t client_id, const std::string& node, bool text, std::string message);
  void UpstreamFailed(uint64_t client_id, const std::string& node, bool was_open, const std::string& why,
                      std::vector<std::string> unsent);
  // An upstream's queue went down: the client's input may come again.
  void Drained(uint64_t client_id);

  boost::asio::io_context& io_;
  std::shared_ptr<WsHandler> local_;
  supervisor::FleetRouter& router_;
  const HopSigner& signer_;
  std::unordered_map<uint64_t, std::unique_ptr<Client>> clients_;
};

}  // namespace corral::api
