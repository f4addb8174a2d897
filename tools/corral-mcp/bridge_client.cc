#include "tools/corral-mcp/bridge_client.h"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>

#include <cerrno>
#include <charconv>
#include <utility>

namespace corral::mcp {

using nlohmann::json;

namespace {

int64_t NowMs() {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}

// Waits for `events` on `fd` until `deadline_ms` (CLOCK_MONOTONIC). False on timeout.
StatusOr<bool> WaitFor(int fd, short events, int64_t deadline_ms) {
  for (;;) {
    const int64_t left = deadline_ms - NowMs();
    if (left <= 0) return false;
    struct pollfd p = {fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("poll");
    if (n > 0) return true;
  }
}

}  // namespace

StatusOr<sockaddr_in> ParseBridgeAddress(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return Status::Error("expected 127.0.0.1:PORT, not \"" + std::string(text) + "\"");
  }
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  const std::string host(text.substr(0, colon));
  if (inet_pton(AF_INET, host.c_str(), &address.sin_addr) != 1) {
    return Status::Error("expected an IPv4 address before the port, not \"" + host + "\"");
  }
  const std::string_view port = text.substr(colon + 1);
  unsigned value = 0;
  auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || error != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535) {
    return Status::Error("expected a port from 1 to 65535, not \"" + std::string(port) + "\"");
  }
  address.sin_port = htons(static_cast<uint16_t>(value));
  return address;
}

BridgeClient::BridgeClient(sockaddr_in address, std::string key) : address_(address), key_(std::move(key)) {}

std::string BridgeClient::Where() const {
  char host[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &address_.sin_addr, host, sizeof(host));
  return std::string(host) + ":" + std::to_string(ntohs(address_.sin_port));
}

void BridgeClient::Close() {
  fd_.reset();
  input_.Clear();
  output_.clear();
}

Status BridgeClient::Open(int timeout_ms) {
  Close();
  const int64_t deadline = NowMs() + timeout_ms;
  const std::string where = "the tool bridge at " + Where();
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return ErrnoError("socket");
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&address_), sizeof(address_)) != 0) {
    if (errno != EINPROGRESS) return ErrnoError("connect to " + where);
    ASSIGN_OR_RETURN(bool connected, WaitFor(fd.get(), POLLOUT, deadline));
    if (!connected) return Status::Error("connect to " + where + ": timed out", ETIMEDOUT);
    int error = 0;
    socklen_t length = sizeof(error);
    if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) return ErrnoError("getsockopt");
    if (error != 0) return ErrnoError("connect to " + where, error);
  }
  // Calls go out as they come: no Nagle delay for a call sent while another is unacknowledged.
  const int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fd_ = std::move(fd);

  auto fail = [this](Status status) {
    Close();
    return status;
  };
  Send({{"op", "hello"}, {"key", key_}});
  for (;;) {
    Status flushed = Flush();
    if (!flushed.ok()) return fail(flushed.WithContext("hello"));
    if (!wants_write()) break;
    StatusOr<bool> writable = WaitFor(fd_.get(), POLLOUT, deadline);
    if (!writable.ok()) return fail(writable.status());
    if (!*writable) return fail(Status::Error("hello to " + where + ": timed out", ETIMEDOUT));
  }
  std::vector<json> answers;
  while (answers.empty()) {
    StatusOr<bool> readable = WaitFor(fd_.get(), POLLIN, deadline);
    if (!readable.ok()) return fail(readable.status());
    if (!*readable) return fail(Status::Error("no answer to the hello from " + where, ETIMEDOUT));
    Status received = Receive(&answers);
    if (!received.ok() && answers.empty()) return fail(received.WithContext("hello"));
  }
  const json& answer = answers.front();
  if (!answer.is_object() || answer.value("ok", json()) != true) {
    std::string why = "no reason given";
    if (answer.is_object() && answer.contains("error") && answer["error"].is_string()) {
      why = answer["error"].get<std::string>();
    }
    return fail(Status::Error(where + " refused this session: " + why, EACCES));
  }
  tools_ = answer.contains("tools") && answer["tools"].is_array() ? answer["tools"] : json::array();
  if (!connected()) return Status::Error(where + " closed the connection after the hello", ECONNRESET);
  return Status();
}

void BridgeClient::Send(const json& message) {
  output_ += message.dump(-1, ' ', false, json::error_handler_t::replace);
  output_ += '\n';
}

Status BridgeClient::Flush() {
  while (!output_.empty()) {
    if (!connected()) return Status::Error("not connected", ENOTCONN);
    const ssize_t n = send(fd_.get(), output_.data(), output_.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status();
    if (n < 0) {
      Status error = ErrnoError("send to the tool bridge");
      Close();
      return error;
    }
    output_.erase(0, static_cast<size_t>(n));
  }
  return Status();
}

Status BridgeClient::Receive(std::vector<json>* messages) {
  char buffer[64 * 1024];
  for (;;) {
    if (!connected()) return Status::Error("not connected", ENOTCONN);
    const ssize_t n = recv(fd_.get(), buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Status();
    Status lost;
    if (n < 0) lost = ErrnoError("receive from the tool bridge");
    if (n == 0) lost = Status::Error("the tool bridge closed the connection", ECONNRESET);
    if (n > 0) input_.Feed(std::string_view(buffer, static_cast<size_t>(n)));
    std::string line;
    for (LineReader::Next next; (next = input_.Take(&line)) != LineReader::Next::kNone;) {
      if (next == LineReader::Next::kTooLong) {
        lost = Status::Error("a line from the tool bridge is longer than 8 MiB", EMSGSIZE);
        break;
      }
      json message = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (message.is_discarded()) {
        lost = Status::Error("a line from the tool bridge is not JSON", EPROTO);
        break;
      }
      messages->push_back(std::move(message));
    }
    if (!lost.ok()) {
      Close();
      return lost;
    }
  }
}

}  // namespace corral::mcp
