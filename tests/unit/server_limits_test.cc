// What a client may make the server hold and for how long (http_session.h): a request is judged
// on its headers before its body is read; bodies share one memory budget; every request has a
// deadline for its headers and a minimum rate for its body, apart from the idle keep-alive wait.
#include "api/body_budget.h"
#include "tests/unit/server_test_util.h"

namespace corral::api {
namespace {

using namespace corral::api::testing_util;
using Clock = std::chrono::steady_clock;

// Reads a response from a socket that has sent only part of its request.
HttpResult ReadResponse(tcp::socket& socket) {
  beast::flat_buffer buffer;
  HttpResult res;
  http::read(socket, buffer, res);
  return res;
}

bool ReadsEof(tcp::socket& socket) {
  char byte;
  boost::system::error_code ec;
  socket.read_some(net::buffer(&byte, 1), ec);
  return ec == net::error::eof || ec == net::error::connection_reset;
}

std::string PostHead(const std::string& token, size_t length, const std::string& target = "/v1/echo") {
  std::string head = "POST " + target + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(length) + "\r\n";
  if (!token.empty()) head += "Authorization: Bearer " + token + "\r\n";
  return head + "\r\n";
}

class ServerLimitsTest : public ServerTest {};

TEST(BodyBudgetTest, HoldsGrowWithinTheLimitAndReturnWhenDropped) {
  BodyBudget budget(100);
  BodyBudget::Hold a = budget.Reserve(60);
  ASSERT_TRUE(a);
  EXPECT_EQ(budget.in_use(), 60u);
  BodyBudget::Hold refused = budget.Reserve(41);
  EXPECT_FALSE(refused);
  EXPECT_EQ(budget.in_use(), 60u) << "a refused reservation takes nothing";
  BodyBudget::Hold b = budget.Reserve(40);
  ASSERT_TRUE(b);
  EXPECT_FALSE(b.GrowTo(41));
  EXPECT_EQ(b.bytes(), 40u);
  a.Reset();
  EXPECT_EQ(budget.in_use(), 40u);
  EXPECT_TRUE(b.GrowTo(100));
  {
    BodyBudget::Hold moved = std::move(b);
    EXPECT_EQ(budget.in_use(), 100u);
  }
  EXPECT_EQ(budget.in_use(), 0u);
}

TEST_F(ServerLimitsTest, TokenIsCheckedBeforeAnyOfTheBodyIsRead) {
  Start();
  // A stranger declares 60 MB and sends none of it: the answer comes at once, then the close.
  for (const std::string& token : {std::string(), std::string("forged")}) {
    tcp::socket socket = Connect();
    net::write(socket, net::buffer(PostHead(token, 60'000'000)));
    HttpResult res = ReadResponse(socket);
    EXPECT_EQ(res.result_int(), 401);
    EXPECT_EQ(res.body(), kUnauthorizedBody);
    EXPECT_FALSE(res.keep_alive());
    EXPECT_TRUE(ReadsEof(socket));
  }
  // The same with a token: the body is read and echoed.
  tcp::socket socket = Connect();
  net::write(socket, net::buffer(PostHead("good-u", 5) + "hello"));
  HttpResult res = ReadResponse(socket);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res.body(), "hello");
}

TEST_F(ServerLimitsTest, StrangersWithHugeBodiesDoNotMakeTheServerHoldThem) {
  Start();
  // 50 connections, each declaring 60 MB and sending 1 MB of it without a token.
  std::vector<tcp::socket> sockets;
  const std::string chunk(1 << 20, 'x');
  for (int i = 0; i < 50; ++i) {
    sockets.push_back(Connect());
    net::write(sockets.back(), net::buffer(PostHead("", 60'000'000)));
    boost::system::error_code ec;
    net::write(sockets.back(), net::buffer(chunk), ec);  // may fail once the server has closed
  }
  for (auto& socket : sockets) {
    boost::system::error_code ec;
    beast::flat_buffer buffer;
    HttpResult res;
    http::read(socket, buffer, res, ec);
    if (!ec) {
      EXPECT_EQ(res.result_int(), 401);
    }
  }
  EXPECT_EQ(Http(http::verb::get, "/healthz").result_int(), 200);
}

TEST_F(ServerLimitsTest, RoutesWithoutATokenTakeNoBody) {
  MakeServer().Route("POST", "/v1/open", Auth::kNone, [](HttpRequest r, Responder respond) {
    respond(HttpResponse{200, "text/plain", "got " + std::to_string(r.body.size()), {}});
  });
  Start();
  HttpResult with_body = Http(http::verb::post, "/v1/open", {}, "payload");
  EXPECT_EQ(with_body.result_int(), 413);
  HttpResult without = Http(http::verb::post, "/v1/open", {}, "");
  EXPECT_EQ(without.result_int(), 200);
  EXPECT_EQ(without.body(), "got 0");
  // Unknown paths are answered without reading the body either.
  tcp::socket socket = Connect();
  net::write(socket, net::buffer(PostHead("", 1'000'000, "/v1/nowhere")));
  EXPECT_EQ(ReadResponse(socket).result_int(), 404);
}

TEST_F(ServerLimitsTest, ARouteMayTakeALargerBodyThanTheDefault) {
  limits_.max_body_bytes = 1000;
  RouteOptions options;
  options.max_body_bytes = 5000;
  MakeServer().Route("PUT", "/v1/upload", Auth::kRequired, options, [](HttpRequest r, Responder respond) {
    respond(HttpResponse{200, "text/plain", std::to_string(r.body.size()), {}});
  });
  Start();
  const Headers auth = {{"Authorization", "Bearer good-u"}};
  EXPECT_EQ(Http(http::verb::put, "/v1/upload", auth, std::string(5000, 'u')).body(), "5000");
  EXPECT_EQ(Http(http::verb::put, "/v1/upload", auth, std::string(5001, 'u')).result_int(), 413);
  EXPECT_EQ(Http(http::verb::post, "/v1/echo", auth, std::string(1001, 'e')).result_int(), 413);
}

TEST_F(ServerLimitsTest, BodiesBeingReadShareOneMemoryBudget) {
  limits_.max_body_bytes = 20000;
  limits_.max_body_memory = 10000;
  Start();
  // A holds 8000 of the 10000 while its body trickles in.
  tcp::socket a = Connect();
  net::write(a, net::buffer(PostHead("good-a", 8000) + std::string(100, 'a')));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // B does not fit: 503 with Retry-After, and the connection closes.
  tcp::socket b = Connect();
  net::write(b, net::buffer(PostHead("good-b", 5000)));
  HttpResult refused = ReadResponse(b);
  EXPECT_EQ(refused.result_int(), 503);
  EXPECT_EQ(S(refused[http::field::retry_after]), "1");
  EXPECT_FALSE(refused.keep_alive());
  // A chunked body that grows past what is left is refused too, once it does.
  {
    tcp::socket chunked = Connect();
    std::string head = "POST /v1/echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good-c\r\nTransfer-Encoding: chunked\r\n\r\n";
    std::string chunk = "bb8\r\n" + std::string(3000, 'c') + "\r\n";  // 0xbb8 = 3000
    boost::system::error_code ec;
    net::write(chunked, net::buffer(head + chunk), ec);
    HttpResult res = ReadResponse(chunked);
    EXPECT_EQ(res.result_int(), 503);
  }
  // C fits beside A.
  HttpResult small = Http(http::verb::post, "/v1/echo", {{"Authorization", "Bearer good-c"}}, std::string(1000, 'c'));
  EXPECT_EQ(small.result_int(), 200);
  // A finishes; then B's body fits.
  net::write(a, net::buffer(std::string(7900, 'a')));
  EXPECT_EQ(ReadResponse(a).body(), std::string(100, 'a') + std::string(7900, 'a'));
  HttpResult retried = Http(http::verb::post, "/v1/echo", {{"Authorization", "Bearer good-b"}}, std::string(5000, 'b'));
  EXPECT_EQ(retried.result_int(), 200);
}

TEST_F(ServerLimitsTest, ASecondRequestThatStallsIsClosedAfterTheHeaderDeadline) {
  limits_.handshake_timeout_s = 1;
  limits_.idle_timeout_s = 60;
  Start();
  const auto whoami = MakeRequest(http::verb::get, "/v1/whoami", {{"Authorization", "Bearer good-u"}}, "");
  tcp::socket stalled = Connect();
  ASSERT_EQ(RoundTrip(stalled, whoami).result_int(), 200);
  tcp::socket idle = Connect();  // the control: idle between requests, not in one
  ASSERT_EQ(RoundTrip(idle, whoami).result_int(), 200);

  net::write(stalled, net::buffer(std::string("G")));
  auto started = Clock::now();
  EXPECT_EQ(ReadResponse(stalled).result_int(), 408);
  EXPECT_LT(Clock::now() - started, std::chrono::milliseconds(2500));
  EXPECT_TRUE(ReadsEof(stalled));

  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // past the header deadline
  EXPECT_EQ(RoundTrip(idle, whoami).body(), "test/u") << "an idle keep-alive connection waits idle_timeout";
}

TEST_F(ServerLimitsTest, BodiesBelowTheMinimumRateAreClosed) {
  limits_.handshake_timeout_s = 1;
  limits_.idle_timeout_s = 60;
  limits_.body_min_rate = 1000;
  Start();
  // Stalls after 10 bytes of 100000.
  tcp::socket stalled = Connect();
  net::write(stalled, net::buffer(PostHead("good-u", 100000) + "0123456789"));
  auto started = Clock::now();
  EXPECT_EQ(ReadResponse(stalled).result_int(), 408);
  EXPECT_LT(Clock::now() - started, std::chrono::milliseconds(2500));
  // Drips a byte every 300 ms: never silent for the handshake timeout, but far below the rate.
  tcp::socket dripping = Connect();
  net::write(dripping, net::buffer(PostHead("good-u", 100000)));
  started = Clock::now();
  int status = 0;
  std::thread reader([&] {
    beast::flat_buffer buffer;
    HttpResult res;
    boost::system::error_code ec;
    http::read(dripping, buffer, res, ec);
    if (!ec) status = res.result_int();
  });
  for (int i = 0; i < 20 && status == 0; ++i) {
    boost::system::error_code ec;
    net::write(dripping, net::buffer(std::string("d")), ec);
    if (ec) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  reader.join();
  EXPECT_EQ(status, 408);
  EXPECT_LT(Clock::now() - started, std::chrono::milliseconds(3000));
  // The control: a body that keeps the rate (3000 bytes in 3 × 1000 at 0.5 s each) is read.
  tcp::socket steady = Connect();
  net::write(steady, net::buffer(PostHead("good-u", 3000)));
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    net::write(steady, net::buffer(std::string(1000, 's')));
  }
  EXPECT_EQ(ReadResponse(steady).body(), std::string(3000, 's'));
}

// Hundreds of connections stalled in each way at once; a legitimate client is served in under
// a second meanwhile, and every stalled one is gone after its deadline.
TEST_F(ServerLimitsTest, HundredsOfStalledConnectionsDoNotStarveALegitimateClient) {
  limits_.handshake_timeout_s = 2;
  limits_.idle_timeout_s = 60;
  Start();
  const auto whoami = MakeRequest(http::verb::get, "/v1/whoami", {{"Authorization", "Bearer good-u"}}, "");
  std::vector<tcp::socket> stalled;
  for (int i = 0; i < 100; ++i) {  // headers begun, never ended
    stalled.push_back(Connect());
    net::write(stalled.back(), net::buffer(std::string("GET /v1/whoami HTTP/1.1\r\nHost: x\r\n")));
  }
  for (int i = 0; i < 100; ++i) {  // a body begun, never ended
    stalled.push_back(Connect());
    net::write(stalled.back(), net::buffer(PostHead("good-s" + std::to_string(i), 50000) + "x"));
  }
  for (int i = 0; i < 100; ++i) {  // a second request that stalls after one byte
    stalled.push_back(Connect());
    ASSERT_EQ(RoundTrip(stalled.back(), whoami).result_int(), 200);
    net::write(stalled.back(), net::buffer(std::string("G")));
  }
  ASSERT_TRUE(Eventually([&] { return server_->connection_count() >= 300; }));
  for (int i = 0; i < 5; ++i) {
    auto started = Clock::now();
    HttpResult res = Http(http::verb::get, "/v1/whoami", {{"Authorization", "Bearer good-legit"}});
    EXPECT_EQ(res.body(), "test/legit");
    EXPECT_LT(Clock::now() - started, std::chrono::seconds(1));
  }
  // Every stalled connection is answered (408) or closed by its deadline; none is left.
  // (the header deadline, then at most the 2 s a refused connection may linger)
  auto deadline = Clock::now() + std::chrono::seconds(8);
  while (server_->connection_count() != 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(server_->connection_count(), 0u) << "stalled connections still open";
}

}  // namespace
}  // namespace corral::api
