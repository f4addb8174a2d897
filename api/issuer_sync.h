// Issuers and revocations across a fleet: every node verifies tokens against its own copy in
// memory (supervisor/issuers.h), and another node may add or remove an issuer, replace its
// secret or revoke a token. Every `every` (node.heartbeat), on the event loop, the copy is read
// again from the shared store; a removed issuer, a replaced secret or a new revocation ends the
// open connections whose token no longer verifies (Server::Reauthenticate), as on the node where
// the change was made. A store that cannot be read is tried again at the next turn (the copy in
// memory goes on being used).
#pragma once

#include <chrono>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "api/server.h"
#include "supervisor/issuers.h"

namespace corral::api {

class IssuerSync {
 public:
  IssuerSync(boost::asio::io_context& io, Server& server, supervisor::Issuers& issuers, std::chrono::seconds every)
      : timer_(io), server_(server), issuers_(issuers), every_(every) {}

  void Start() { Arm(); }
  void Stop() {
    stopped_ = true;
    timer_.cancel();
  }
  // One turn, now (also what the timer does).
  void SyncOnce();

 private:
  void Arm();

  boost::asio::steady_timer timer_;
  Server& server_;
  supervisor::Issuers& issuers_;
  std::chrono::seconds every_;
  bool stopped_ = false;
  bool failing_ = false;
};

}  // namespace corral::api
