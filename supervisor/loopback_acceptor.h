// The accept loop of a loopback service (the model relay, the tool bridge, the egress proxy):
// one listening socket per running sandbox, made by the sandbox's init on its own 127.0.0.1
// (LoopbackServices), accepted on by the daemon on its event loop. Each connection is handed to
// the service with the sandbox it came from: a connection belongs to the sandbox whose listener
// accepted it, whatever it says later.
//
// Accepted sockets have TCP_NODELAY (bytes are relayed as they come: no Nagle delay on a TLS
// handshake's or an event stream's small writes). A failed accept is retried (EMFILE is logged);
// a closed listener ends its loop without calling the handler again. Not thread-safe: every call,
// and the handler, on the event loop.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "common/unique_fd.h"

namespace corral::supervisor {

class LoopbackAcceptor {
 public:
  using Handler = std::function<void(const std::string& sandbox_id, boost::asio::ip::tcp::socket socket)>;

  // `component` names the service in the log ("relay", "tools", "egress").
  LoopbackAcceptor(boost::asio::io_context& io, std::string component, Handler handler);
  // Closes every listener; the handler is not called again.
  ~LoopbackAcceptor();
  LoopbackAcceptor(const LoopbackAcceptor&) = delete;
  LoopbackAcceptor& operator=(const LoopbackAcceptor&) = delete;

  // Accepts on `listener` (an IPv4 listening socket) for the sandbox, in place of any listener it
  // had. False, logged, when the socket cannot be taken (it is closed then). The handler is called
  // for the sandbox's connections from now until its Forget (or Close), never after.
  bool Serve(const std::string& sandbox_id, UniqueFd listener);
  // Closes the sandbox's listener (the connections it accepted are the service's to close).
  void Forget(const std::string& sandbox_id);
  // Closes every listener.
  void Close();

 private:
  struct Listener;
  static void Accept(const std::shared_ptr<Listener>& listener);

  boost::asio::io_context& io_;
  std::string component_;
  std::shared_ptr<Handler> handler_;
  std::map<std::string, std::shared_ptr<Listener>> listeners_;
};

}  // namespace corral::supervisor
