// Connections bound to their tokens (server.h): a WebSocket or an idle keep-alive connection
// ends when its token expires or stops verifying; a WebSocket renews its token in place. Each
// denial beside its control: another user's connection, or a token that still verifies.
#include <cerrno>

#include "tests/unit/server_test_util.h"

namespace corral::api {
namespace {

using namespace corral::api::testing_util;
using Clock = std::chrono::steady_clock;

// Seconds until the token "exp<t>-..." stops verifying (the start of second t + 1).
double SecondsUntilEnd(int64_t expires_at) {
  auto end = std::chrono::system_clock::time_point(std::chrono::seconds(expires_at + 1));
  return std::chrono::duration<double>(end - std::chrono::system_clock::now()).count();
}

// True when the peer closes the socket (EOF or reset) within `limit`; false when it stays open.
bool ClosedWithin(tcp::socket& socket, std::chrono::milliseconds limit) {
  socket.non_blocking(true);
  auto until = Clock::now() + limit;
  char byte;
  while (Clock::now() < until) {
    boost::system::error_code ec;
    size_t n = socket.read_some(net::buffer(&byte, 1), ec);
    if (ec == net::error::would_block) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (ec) return true;
    if (n > 0) ADD_FAILURE() << "unexpected data from the server";
  }
  socket.non_blocking(false);
  return false;
}

class ServerAuthTest : public ServerTest {};

TEST_F(ServerAuthTest, IdleWebSocketClosesWith1008WhenItsTokenExpires) {
  Start();
  const int64_t expires_at = time(nullptr) + 2;
  const std::string token = "exp" + std::to_string(expires_at) + "-alice";
  auto alice = Ws("/v1/ws", {{"Authorization", "Bearer " + token}});
  ASSERT_FALSE(alice->ec) << alice->ec.message();
  auto bob = Ws("/v1/ws", {{"Authorization", "Bearer good-bob"}});  // the control
  ASSERT_FALSE(bob->ec);
  alice->ws.write(net::buffer(std::string("whoami")));
  EXPECT_EQ(ReadText(*alice), "test/alice/user");

  // Alice sends nothing more: the close comes from the server's timer, not from a message.
  const double left = SecondsUntilEnd(expires_at);
  auto started = Clock::now();
  EXPECT_EQ(ReadUntilClosed(*alice), 1008);
  const double took = std::chrono::duration<double>(Clock::now() - started).count();
  EXPECT_GE(took, left - 0.05) << "closed before the token expired";
  EXPECT_LE(took, left + 1.0) << "closed more than 1 s after the token expired";
  EXPECT_EQ(alice->ws.reason().reason, "token expired or revoked");
  EXPECT_EQ(Metric("corral_auth_ended_connections_total"), "1");

  bob->ws.write(net::buffer(std::string("whoami")));
  EXPECT_EQ(ReadText(*bob), "test/bob/user");
  bob->ws.close(websocket::close_code::normal);
}

TEST_F(ServerAuthTest, ReauthenticateClosesTheWebSocketsWhoseTokenNoLongerVerifies) {
  Start();
  const std::string token = "good-carol-revoked";
  auto carol = Ws("/v1/ws", {{"Authorization", "Bearer " + token}});
  ASSERT_FALSE(carol->ec);
  auto dave = Ws("/v1/ws", {{"Authorization", "Bearer good-dave"}});
  ASSERT_FALSE(dave->ec);
  carol->ws.write(net::buffer(std::string("whoami")));
  EXPECT_EQ(ReadText(*carol), "test/carol-revoked/user");

  RefuseToken(token);
  // A recheck that selects nobody leaves even a refused token's connection alone.
  server_->Reauthenticate([](const AuthContext&) { return false; });
  carol->ws.write(net::buffer(std::string("whoami")));
  EXPECT_EQ(ReadText(*carol), "test/carol-revoked/user");

  auto started = Clock::now();
  server_->Reauthenticate([](const AuthContext& auth) { return auth.iss == "test"; });
  EXPECT_EQ(ReadUntilClosed(*carol), 1008);
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(1));

  dave->ws.write(net::buffer(std::string("whoami")));
  EXPECT_EQ(ReadText(*dave), "test/dave/user");
  dave->ws.close(websocket::close_code::normal);
}

TEST_F(ServerAuthTest, RenewKeepsTheWebSocketOpenPastTheOldExpiry) {
  Start();
  const int64_t expires_at = time(nullptr) + 2;
  auto erin = Ws("/v1/ws", {{"Authorization", "Bearer exp" + std::to_string(expires_at) + "-erin"}});
  ASSERT_FALSE(erin->ec);
  // Refused renewals keep the old token: another user's, and one that does not verify.
  erin->ws.write(net::buffer(std::string("renew good-mallory")));
  EXPECT_EQ(ReadText(*erin), "refused " + std::to_string(EPERM));
  erin->ws.write(net::buffer(std::string("renew forged")));
  EXPECT_EQ(ReadText(*erin), "refused " + std::to_string(EKEYREJECTED));
  erin->ws.write(net::buffer(std::string("whoami")));
  EXPECT_EQ(ReadText(*erin), "test/erin/user");

  const int64_t later = time(nullptr) + 6;
  erin->ws.write(net::buffer("renew exp" + std::to_string(later) + "-erin"));
  EXPECT_EQ(ReadText(*erin), "renewed");
  std::this_thread::sleep_for(std::chrono::duration<double>(SecondsUntilEnd(expires_at) + 0.5));
  erin->ws.write(net::buffer(std::string("whoami")));
  EXPECT_EQ(ReadText(*erin), "test/erin/user") << "the renewed connection outlived its first token";
  // The new token ends it in turn.
  EXPECT_EQ(ReadUntilClosed(*erin), 1008);
}

TEST_F(ServerAuthTest, RefusedRenewalsLeaveTheOldExpiryInForce) {
  Start();
  const int64_t expires_at = time(nullptr) + 1;
  auto frank = Ws("/v1/ws", {{"Authorization", "Bearer exp" + std::to_string(expires_at) + "-frank"}});
  ASSERT_FALSE(frank->ec);
  frank->ws.write(net::buffer("renew exp" + std::to_string(expires_at + 100) + "-grace"));
  EXPECT_EQ(ReadText(*frank), "refused " + std::to_string(EPERM));
  EXPECT_EQ(ReadUntilClosed(*frank), 1008);
}

TEST_F(ServerAuthTest, IdleKeepAliveConnectionClosesWhenItsTokenExpires) {
  Start();
  const int64_t expires_at = time(nullptr) + 2;
  tcp::socket expiring = Connect();
  HttpResult first = RoundTrip(expiring, MakeRequest(http::verb::get, "/v1/whoami",
                                                     {{"Authorization", "Bearer exp" + std::to_string(expires_at) + "-hal"}}, ""));
  ASSERT_EQ(first.result_int(), 200);
  EXPECT_TRUE(first.keep_alive());
  tcp::socket lasting = Connect();  // the control: a token that does not expire
  ASSERT_EQ(RoundTrip(lasting, MakeRequest(http::verb::get, "/v1/whoami", {{"Authorization", "Bearer good-ivy"}}, ""))
                .result_int(),
            200);

  const double left = SecondsUntilEnd(expires_at);
  auto started = Clock::now();
  EXPECT_TRUE(ClosedWithin(expiring, std::chrono::milliseconds(static_cast<int>(left * 1000) + 1000)));
  EXPECT_GE(std::chrono::duration<double>(Clock::now() - started).count(), left - 0.05);
  EXPECT_FALSE(ClosedWithin(lasting, std::chrono::milliseconds(300)));
  HttpResult again =
      RoundTrip(lasting, MakeRequest(http::verb::get, "/v1/whoami", {{"Authorization", "Bearer good-ivy"}}, ""));
  EXPECT_EQ(again.body(), "test/ivy");
}

TEST_F(ServerAuthTest, RevokedTokenClosesIdleKeepAliveAndRefusesTheBodyBeingRead) {
  Start();
  const std::string token = "good-judy-revoked";
  tcp::socket idle = Connect();
  ASSERT_EQ(RoundTrip(idle, MakeRequest(http::verb::get, "/v1/whoami", {{"Authorization", "Bearer " + token}}, ""))
                .result_int(),
            200);
  // The same token, a request whose body is on its way.
  tcp::socket uploading = Connect();
  net::write(uploading, net::buffer("POST /v1/echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token +
                                    "\r\nContent-Length: 100\r\n\r\nfirst part"));
  tcp::socket other = Connect();  // the control: another token
  ASSERT_EQ(RoundTrip(other, MakeRequest(http::verb::get, "/v1/whoami", {{"Authorization", "Bearer good-ken"}}, ""))
                .result_int(),
            200);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));

  RefuseToken(token);
  server_->Reauthenticate([](const AuthContext&) { return true; });
  EXPECT_TRUE(ClosedWithin(idle, std::chrono::seconds(1)));
  beast::flat_buffer buffer;
  HttpResult refused;
  http::read(uploading, buffer, refused);
  EXPECT_EQ(refused.result_int(), 401);
  EXPECT_FALSE(refused.keep_alive());
  EXPECT_FALSE(ClosedWithin(other, std::chrono::milliseconds(300)));
  EXPECT_EQ(RoundTrip(other, MakeRequest(http::verb::get, "/v1/whoami", {{"Authorization", "Bearer good-ken"}}, ""))
                .body(),
            "test/ken");
}

// A request another node forwarded (X-Corral-Hop, api/hop.h): taken only when the verifier
// takes its mark, then handed over with the forwarding node and not counted by the request gate
// (the node the client asked counted it); any other mark is refused as a bad token is.
class ServerHopTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    MakeServer();
    server_->Route("GET", "/v1/from", Auth::kRequired, [](HttpRequest r, Responder respond) {
      respond(HttpResponse{200, "text/plain", "from=" + r.forwarded_by + " user=" + r.auth.sub, {}});
    });
    server_->SetRequestGate([this](const AuthContext&) -> std::optional<HttpResponse> {
      ++gated_;
      return std::nullopt;
    });
  }

  std::atomic<int> gated_{0};
};

TEST_F(ServerHopTest, AMarkIsRefusedWithoutAVerifier) {
  Start();
  auto marked = Http(http::verb::get, "/v1/from", {{"Authorization", "Bearer good-amy"}, {"X-Corral-Hop", "v1 a 1 00"}});
  EXPECT_EQ(marked.result_int(), 401);
  EXPECT_EQ(marked.body(), kUnauthorizedBody);
  auto plain = Http(http::verb::get, "/v1/from", {{"Authorization", "Bearer good-amy"}});
  EXPECT_EQ(plain.body(), "from= user=amy");  // control
}

TEST_F(ServerHopTest, AVerifiedMarkNamesTheNodeAndSkipsTheGate) {
  std::string seen_target, seen_authorization;
  server_->SetHopVerifier([&](std::string_view mark, std::string_view method, std::string_view target,
                              std::string_view authorization) -> StatusOr<std::string> {
    seen_target = std::string(target);
    seen_authorization = std::string(authorization);
    if (mark == "good-mark" && method == "GET") return std::string("node-b");
    return Status::Error("hop mark: no", EKEYREJECTED);
  });
  Start();
  auto marked = Http(http::verb::get, "/v1/from?x=1", {{"Authorization", "Bearer good-amy"}, {"X-Corral-Hop", "good-mark"}});
  EXPECT_EQ(marked.result_int(), 200);
  EXPECT_EQ(marked.body(), "from=node-b user=amy");
  EXPECT_EQ(seen_target, "/v1/from?x=1");
  EXPECT_EQ(seen_authorization, "Bearer good-amy");
  EXPECT_EQ(gated_.load(), 0);
  auto forged = Http(http::verb::get, "/v1/from", {{"Authorization", "Bearer good-amy"}, {"X-Corral-Hop", "bad-mark"}});
  EXPECT_EQ(forged.result_int(), 401);
  // A mark never stands in for the token: the token is still verified.
  auto no_token = Http(http::verb::get, "/v1/from", {{"Authorization", "Bearer nope"}, {"X-Corral-Hop", "good-mark"}});
  EXPECT_EQ(no_token.result_int(), 401);
  auto plain = Http(http::verb::get, "/v1/from", {{"Authorization", "Bearer good-amy"}});
  EXPECT_EQ(plain.body(), "from= user=amy");
  EXPECT_EQ(gated_.load(), 1);  // the unmarked one
  // And a WebSocket upgrade with a forged mark is refused before the upgrade.
  auto upgrade = RawUpgrade("/v1/ws", {{"Authorization", "Bearer good-amy"}, {"X-Corral-Hop", "bad-mark"}});
  EXPECT_EQ(upgrade.result_int(), 401);
  auto ws = Ws("/v1/ws", {{"Authorization", "Bearer good-amy"}, {"X-Corral-Hop", "good-mark"}});
  EXPECT_FALSE(ws->ec) << ws->ec.message();
}

// The fleet's own routes (Auth::kNode, a sandbox moving: api/sandbox_mover.h): a verified mark
// and nothing else; no mark, a forged one, a user's token alone or beside a good mark are
// refused before the body is read.
TEST_F(ServerHopTest, ANodesRouteTakesAVerifiedMarkAloneWithItsBody) {
  server_->Route("PUT", "/v1/internal/x", Auth::kNode, [](HttpRequest r, Responder respond) {
    respond(HttpResponse{200, "text/plain", "from=" + r.forwarded_by + " body=" + r.body, {}});
  });
  server_->SetHopVerifier([](std::string_view mark, std::string_view, std::string_view,
                             std::string_view authorization) -> StatusOr<std::string> {
    if (mark == "good-mark" && authorization.empty()) return std::string("node-b");
    return Status::Error("hop mark: no", EKEYREJECTED);
  });
  Start();
  auto marked = Http(http::verb::put, "/v1/internal/x", {{"X-Corral-Hop", "good-mark"}}, "part");
  EXPECT_EQ(marked.result_int(), 200);
  EXPECT_EQ(marked.body(), "from=node-b body=part");
  EXPECT_EQ(gated_.load(), 0);
  for (const Headers& headers : std::vector<Headers>{
           {},
           {{"X-Corral-Hop", "bad-mark"}},
           {{"Authorization", "Bearer good-amy"}},
           {{"Authorization", "Bearer good-amy"}, {"X-Corral-Hop", "good-mark"}}}) {
    auto refused = Http(http::verb::put, "/v1/internal/x", headers, "part");
    EXPECT_EQ(refused.result_int(), 401) << (headers.empty() ? "no headers" : headers.back().first);
    EXPECT_EQ(refused.body(), kUnauthorizedBody);
  }
}

}  // namespace
}  // namespace corral::api
