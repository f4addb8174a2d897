#include "supervisor/loopback_acceptor.h"

#include <utility>

#include "common/log.h"

namespace corral::supervisor {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// Shared by the acceptor's map and its pending accept, so that an accept that completes after
// Forget (or after the LoopbackAcceptor is gone) finds `closed` and stops.
struct LoopbackAcceptor::Listener {
  Listener(asio::io_context& io, std::string id, const std::string& name, std::shared_ptr<Handler> on_accept)
      : acceptor(io), sandbox_id(std::move(id)), component(name), handler(std::move(on_accept)) {}

  tcp::acceptor acceptor;
  const std::string sandbox_id;
  const std::string component;
  const std::shared_ptr<Handler> handler;
  bool closed = false;

  void Close() {
    closed = true;
    boost::system::error_code ignored;
    acceptor.close(ignored);
  }
};

LoopbackAcceptor::LoopbackAcceptor(asio::io_context& io, std::string component, Handler handler)
    : io_(io), component_(std::move(component)), handler_(std::make_shared<Handler>(std::move(handler))) {}

LoopbackAcceptor::~LoopbackAcceptor() { Close(); }

bool LoopbackAcceptor::Serve(const std::string& sandbox_id, UniqueFd listener) {
  Forget(sandbox_id);
  auto entry = std::make_shared<Listener>(io_, sandbox_id, component_, handler_);
  boost::system::error_code ec;
  entry->acceptor.assign(tcp::v4(), listener.get(), ec);
  if (ec) {
    LogError(component_, "cannot take the sandbox's listener", {{"sandbox", sandbox_id}, {"error", ec.message()}});
    return false;
  }
  (void)listener.release();  // the acceptor owns it now
  listeners_[sandbox_id] = entry;
  Accept(entry);
  return true;
}

void LoopbackAcceptor::Forget(const std::string& sandbox_id) {
  auto it = listeners_.find(sandbox_id);
  if (it == listeners_.end()) return;
  it->second->Close();
  listeners_.erase(it);
}

void LoopbackAcceptor::Close() {
  for (auto& [id, listener] : listeners_) listener->Close();
  listeners_.clear();
}

void LoopbackAcceptor::Accept(const std::shared_ptr<Listener>& listener) {
  listener->acceptor.async_accept([listener](boost::system::error_code ec, tcp::socket socket) {
    if (listener->closed || ec == asio::error::operation_aborted) return;
    if (!ec) {
      boost::system::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      (*listener->handler)(listener->sandbox_id, std::move(socket));
    } else if (ec == asio::error::no_descriptors) {
      LogWarn(listener->component, "accept: out of file descriptors", {{"sandbox", listener->sandbox_id}});
    }
    if (!listener->closed) Accept(listener);
  });
}

}  // namespace corral::supervisor
