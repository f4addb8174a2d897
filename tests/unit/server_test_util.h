// The fixture of the server's tests: a real Server on 127.0.0.1 (port 0) with its io_context on
// a background thread, driven by Beast's synchronous client. Tokens are "good-<user>" (user
// <user> of issuer "test"); "exp<unix>-<user>" verifies until that second (expires_at), and
// tokens listed in `refused` stop verifying (what a revocation does).
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include "api/server.h"
#include "common/file_util.h"

namespace corral::api::testing_util {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Headers = std::vector<std::pair<std::string, std::string>>;
using HttpResult = http::response<http::string_body>;

inline const std::string kUnauthorizedBody = R"({"error":{"code":"unauthorized","message":"unauthorized"}})";

inline std::string S(beast::string_view s) { return std::string(s.data(), s.size()); }

// Tokens the fake authenticator refuses from now on (a revocation), on any thread.
inline std::mutex& RefusedMutex() {
  static std::mutex mu;
  return mu;
}
inline std::set<std::string>& RefusedTokens() {
  static std::set<std::string> refused;
  return refused;
}
inline void RefuseToken(const std::string& token) {
  std::lock_guard lock(RefusedMutex());
  RefusedTokens().insert(token);
}

// Accepts "good-<user>" as user <user> of issuer "test", and "exp<unix>-<user>" until that
// second; anything else, and anything refused, is refused.
inline StatusOr<AuthContext> FakeAuthenticate(std::string_view token) {
  {
    std::lock_guard lock(RefusedMutex());
    if (RefusedTokens().count(std::string(token)) != 0) return Status::Error("revoked");
  }
  AuthContext auth;
  auth.iss = "test";
  if (token.substr(0, 5) == "good-") {
    auth.sub = std::string(token.substr(5));
    return auth;
  }
  if (token.substr(0, 3) == "exp") {
    size_t dash = token.find('-');
    if (dash == std::string_view::npos) return Status::Error("bad token");
    auth.expires_at = std::stoll(std::string(token.substr(3, dash - 3)));
    if (time(nullptr) > auth.expires_at) return Status::Error("expired");
    auth.sub = std::string(token.substr(dash + 1));
    return auth;
  }
  return Status::Error("bad token");
}

// Polls `condition` for up to 5 seconds.
inline bool Eventually(const std::function<bool()>& condition) {
  for (int i = 0; i < 500; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

// A test that hangs (a client waiting for a reply that never comes) fails instead of blocking
// the suite: after 60 s the process exits with a message.
class Watchdog {
 public:
  Watchdog() {
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(60), [this] { return done_; })) {
        fprintf(stderr, "watchdog: test hung for 60 s\n");
        _exit(3);
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// The WebSocket handler of the tests. Text commands:
//   "whoami"            -> "<iss>/<sub>/<admin>"
//   "flood <n> <bytes>" -> n binary messages; records full() and waits for the drain callback
//   "close <code>"      -> Close(code, "bye")
//   "renew <token>"     -> Renew(token): "renewed" or "refused <errno>"
//   anything else       -> echoed; binary messages are echoed too.
class TestWsHandler : public WsHandler {
 public:
  explicit TestWsHandler(net::io_context& io) : io_(io) {}

  void OnOpen(const std::shared_ptr<WsConnection>& connection) override {
    std::lock_guard<std::mutex> lock(mu_);
    opens_[connection->id()]++;
    last_id_ = connection->id();
  }
  void OnText(const std::shared_ptr<WsConnection>& c, std::string message) override {
    if (message == "whoami") {
      c->SendText(c->auth().iss + "/" + c->auth().sub + "/" + (c->auth().admin ? "admin" : "user"));
    } else if (message.rfind("flood ", 0) == 0) {
      Flood(c, message);
    } else if (message.rfind("renew ", 0) == 0) {
      auto renewed = c->Renew(message.substr(6));
      c->SendText(renewed.ok() ? "renewed" : "refused " + std::to_string(renewed.status().error_number()));
    } else if (message.rfind("close ", 0) == 0) {
      c->Close(static_cast<uint16_t>(std::stoi(message.substr(6))), "bye");
    } else {
      c->SendText(std::move(message));
    }
  }
  void OnBinary(const std::shared_ptr<WsConnection>& c, std::string message) override {
    c->SendBinary(std::move(message));
  }
  void OnClose(const std::shared_ptr<WsConnection>& connection) override {
    std::lock_guard<std::mutex> lock(mu_);
    closes_[connection->id()]++;
    if (connection->closed()) closed_flag_seen_++;
  }

  size_t opens() {
    std::lock_guard<std::mutex> lock(mu_);
    return opens_.size();
  }
  size_t closes() {
    std::lock_guard<std::mutex> lock(mu_);
    return closes_.size();
  }
  // Every opened connection was closed exactly once, and nothing else was.
  bool EachClosedOnce() {
    std::lock_guard<std::mutex> lock(mu_);
    if (closes_.size() != opens_.size()) return false;
    for (const auto& [id, n] : closes_) {
      if (n != 1 || opens_.count(id) == 0) return false;
    }
    return closed_flag_seen_ == closes_.size();
  }
  uint64_t last_id() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_id_;
  }

  std::atomic<bool> full_after_send{false};
  std::atomic<bool> full_later{false};
  std::atomic<size_t> queued_later{0};
  std::atomic<bool> checked_later{false};
  std::atomic<int> drains{0};
  std::atomic<size_t> queued_at_drain{SIZE_MAX};

 private:
  void Flood(const std::shared_ptr<WsConnection>& c, const std::string& command) {
    int n = 0;
    size_t bytes = 0;
    sscanf(command.c_str(), "flood %d %zu", &n, &bytes);
    for (int i = 0; i < n; ++i) c->SendBinary(std::string(bytes, static_cast<char>('a' + i % 26)));
    full_after_send = c->full();
    std::weak_ptr<WsConnection> weak = c;
    c->SetOnDrain([this, weak] {
      auto connection = weak.lock();
      if (!connection) return;
      queued_at_drain = connection->queued_bytes();
      drains++;
      connection->SendText("drained");
    });
    // Later, while the client still reads nothing, the queue is still above high water.
    auto timer = std::make_shared<net::steady_timer>(io_, std::chrono::milliseconds(300));
    timer->async_wait([this, timer, weak](const boost::system::error_code&) {
      if (auto connection = weak.lock()) {
        full_later = connection->full();
        queued_later = connection->queued_bytes();
      }
      checked_later = true;
    });
  }

  net::io_context& io_;
  std::mutex mu_;
  std::map<uint64_t, int> opens_;
  std::map<uint64_t, int> closes_;
  size_t closed_flag_seen_ = 0;
  uint64_t last_id_ = 0;
};

struct WsClient {
  net::io_context io;
  websocket::stream<tcp::socket> ws{io};
  websocket::response_type response;
  beast::error_code ec;  // of the handshake
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { limits_.allowed_origins = {"https://app.example"}; }

  void TearDown() override {
    if (thread_.joinable()) {
      server_->Stop();
      // After Stop the io_context runs out of work: every connection and timer is gone.
      auto finished = std::async(std::launch::async, [this] { thread_.join(); });
      if (finished.wait_for(std::chrono::seconds(15)) != std::future_status::ready) {
        ADD_FAILURE() << "the io_context still had work 15 s after Stop()";
        io_.stop();
      }
      finished.wait();
    }
    if (ws_handler_) {
      EXPECT_TRUE(ws_handler_->EachClosedOnce()) << "OnClose must be called once per connection";
    }
    server_.reset();
  }

  // Creates the server with limits_ and the routes every test uses.
  Server& MakeServer() {
    server_ = std::make_unique<Server>(io_, limits_, FakeAuthenticate, metrics_);
    server_->Route("GET", "/healthz", Auth::kNone, [](HttpRequest, Responder respond) {
      respond(HttpResponse{200, "text/plain", "ok", {}});
    });
    server_->Route("GET", "/v1/whoami", Auth::kRequired, [](HttpRequest r, Responder respond) {
      respond(HttpResponse{
          200, "text/plain", r.auth.iss + "/" + r.auth.sub + (r.auth.admin ? "/admin" : ""), {}});
    });
    server_->Route("POST", "/v1/echo", Auth::kRequired, [](HttpRequest r, Responder respond) {
      respond(
          HttpResponse{200, "application/octet-stream", r.body, {{"X-Echo-Header", r.headers["x-custom"]}}});
    });
    server_->Route("GET", "/v1/items/{id}/files/{name}", Auth::kNone, [](HttpRequest r, Responder respond) {
      std::string body = "path=" + r.path + "\nid=" + r.params["id"] + "\nname=" + r.params["name"] + "\n";
      for (const auto& [k, v] : r.query) body += "q:" + k + "=" + v + "\n";
      respond(HttpResponse{200, "text/plain", body, {}});
    });
    server_->Route("GET", "/v1/things/{id}", Auth::kNone, [](HttpRequest r, Responder respond) {
      respond(HttpResponse{200, "text/plain", "thing " + r.params["id"], {}});
    });
    server_->Route("GET", "/v1/paths/{path...}/tag", Auth::kNone, [](HttpRequest r, Responder respond) {
      respond(HttpResponse{200, "text/plain", "tag " + r.params["path"], {}});
    });
    server_->Route("GET", "/v1/paths/{path...}", Auth::kNone, [](HttpRequest r, Responder respond) {
      respond(HttpResponse{200, "text/plain", "path " + r.params["path"], {}});
    });
    server_->Route("GET", "/v1/things/special", Auth::kNone, [](HttpRequest, Responder respond) {
      respond(HttpResponse{200, "text/plain", "special", {}});
    });
    server_->Route("GET", "/v1/admin/ping", Auth::kAdminOnly, [](HttpRequest r, Responder respond) {
      respond(HttpResponse{200, "text/plain", r.auth.admin ? "pong admin" : "pong ?", {}});
    });
    ws_handler_ = std::make_shared<TestWsHandler>(io_);
    server_->WebSocket("/v1/ws", ws_handler_);
    return *server_;
  }

  void Start() {
    if (!server_) MakeServer();
    Status listening = server_->ListenTcp("127.0.0.1", 0);
    ASSERT_TRUE(listening.ok()) << listening.ToString();
    ASSERT_NE(server_->tcp_port(), 0);
    thread_ = std::thread([this] { io_.run(); });
  }

  tcp::socket Connect() {
    tcp::socket socket(client_io_);
    socket.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), server_->tcp_port()));
    return socket;
  }

  static http::request<http::string_body> MakeRequest(http::verb method, const std::string& target,
                                                      const Headers& headers, std::string body) {
    http::request<http::string_body> req(method, target, 11);
    req.set(http::field::host, "127.0.0.1");
    for (const auto& [name, value] : headers) req.set(name, value);
    req.body() = std::move(body);
    req.prepare_payload();
    return req;
  }

  // One request on a new connection.
  HttpResult Http(http::verb method, const std::string& target, const Headers& headers = {},
                  std::string body = "") {
    tcp::socket socket = Connect();
    return RoundTrip(socket, MakeRequest(method, target, headers, std::move(body)));
  }

  template <typename SyncStream>
  static HttpResult RoundTrip(SyncStream& stream, const http::request<http::string_body>& req) {
    http::write(stream, req);
    beast::flat_buffer buffer;
    HttpResult res;
    http::read(stream, buffer, res);
    return res;
  }

  std::unique_ptr<WsClient> Ws(const std::string& target, const Headers& headers = {}) {
    auto client = std::make_unique<WsClient>();
    client->ws.next_layer().connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), server_->tcp_port()));
    client->ws.set_option(websocket::stream_base::decorator([headers](websocket::request_type& req) {
      for (const auto& [name, value] : headers) req.set(name, value);
    }));
    client->ws.handshake(client->response, "127.0.0.1", target, client->ec);
    return client;
  }

  // A WebSocket upgrade request as plain HTTP, to see the reply of a refused handshake (Beast's
  // client does not hand out the response when it declines).
  HttpResult RawUpgrade(const std::string& target, const Headers& headers) {
    Headers all = {{"Connection", "Upgrade"},
                   {"Upgrade", "websocket"},
                   {"Sec-WebSocket-Version", "13"},
                   {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}};
    all.insert(all.end(), headers.begin(), headers.end());
    return Http(http::verb::get, target, all);
  }

  static std::string ReadText(WsClient& c) {
    beast::flat_buffer buffer;
    c.ws.read(buffer);
    return beast::buffers_to_string(buffer.data());
  }

  // Reads until the server closes; returns the close code (0 if the connection broke instead).
  static int ReadUntilClosed(WsClient& c, size_t* messages = nullptr) {
    for (;;) {
      beast::flat_buffer buffer;
      beast::error_code ec;
      c.ws.read(buffer, ec);
      if (ec == websocket::error::closed) return c.ws.reason().code;
      if (ec) return 0;
      if (messages) ++*messages;
    }
  }

  std::string Metric(const std::string& line_prefix) {
    std::string text = metrics_.Render();
    size_t pos = text.find("\n" + line_prefix + " ");
    if (pos == std::string::npos) return "";
    size_t start = pos + 1 + line_prefix.size() + 1;
    return text.substr(start, text.find('\n', start) - start);
  }

  Watchdog watchdog_;
  ServerLimits limits_;
  Metrics metrics_;
  net::io_context io_;
  net::io_context client_io_;
  std::unique_ptr<Server> server_;
  std::shared_ptr<TestWsHandler> ws_handler_;
  std::thread thread_;
};

}  // namespace corral::api::testing_util
