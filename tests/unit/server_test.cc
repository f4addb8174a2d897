// A real Server on 127.0.0.1 (port 0) with its io_context on a background thread, driven by
// Beast's synchronous client (server_test_util.h).
#include "tests/unit/server_test_util.h"
#include "tests/testing/temp_dir.h"

namespace corral::api {
namespace {

using namespace corral::api::testing_util;

// --- HTTP -----------------------------------------------------------------------------------

TEST_F(ServerTest, UnauthorizedReplyIsTheSameForMissingAndBadTokens) {
  Start();
  HttpResult missing = Http(http::verb::get, "/v1/whoami");
  HttpResult bad = Http(http::verb::get, "/v1/whoami", {{"Authorization", "Bearer nope"}});
  HttpResult basic = Http(http::verb::get, "/v1/whoami", {{"Authorization", "Basic Z29vZC11Og=="}});
  // A token in the URL is for WebSocket handshakes only.
  HttpResult in_url = Http(http::verb::get, "/v1/whoami?token=good-alice");
  for (const HttpResult* r : {&missing, &bad, &basic, &in_url}) {
    EXPECT_EQ(r->result_int(), 401);
    EXPECT_EQ(r->body(), kUnauthorizedBody);
    EXPECT_EQ(S((*r)[http::field::www_authenticate]), "Bearer");
    EXPECT_EQ(S((*r)[http::field::content_type]), "application/json");
  }
  // Positive control: a good token, with any case of the scheme.
  HttpResult good = Http(http::verb::get, "/v1/whoami", {{"Authorization", "bearer good-alice"}});
  EXPECT_EQ(good.result_int(), 200);
  EXPECT_EQ(good.body(), "test/alice");
  EXPECT_EQ(Metric("corral_auth_failures_total"), "4");
  EXPECT_EQ(Metric("corral_http_requests_total{code=\"401\"}"), "4");
  EXPECT_EQ(Metric("corral_http_requests_total{code=\"200\"}"), "1");
}

TEST_F(ServerTest, NoAuthRouteNeedsNoToken) {
  Start();
  HttpResult r = Http(http::verb::get, "/healthz");
  EXPECT_EQ(r.result_int(), 200);
  EXPECT_EQ(r.body(), "ok");
  EXPECT_EQ(S(r[http::field::content_type]), "text/plain");
  EXPECT_EQ(Metric("corral_auth_failures_total"), "0");
}

TEST_F(ServerTest, RequestIdIsSixteenHexDigitsAndKeepAliveServesSeveralRequests) {
  Start();
  tcp::socket socket = Connect();
  HttpResult first = RoundTrip(socket, MakeRequest(http::verb::get, "/healthz", {}, ""));
  HttpResult second = RoundTrip(socket, MakeRequest(http::verb::get, "/healthz", {}, ""));
  EXPECT_EQ(first.result_int(), 200);
  EXPECT_EQ(second.result_int(), 200);
  std::regex hex16("[0-9a-f]{16}");
  EXPECT_TRUE(std::regex_match(S(first["X-Request-Id"]), hex16)) << S(first["X-Request-Id"]);
  EXPECT_TRUE(std::regex_match(S(second["X-Request-Id"]), hex16));
  EXPECT_NE(S(first["X-Request-Id"]), S(second["X-Request-Id"]));
  EXPECT_TRUE(first.keep_alive());
  EXPECT_EQ(server_->connection_count(), 1u);
}

TEST_F(ServerTest, RouteParamsAndQueryArePercentDecoded) {
  Start();
  HttpResult r = Http(http::verb::get, "/v1/items/a%20b/files/x%2Fy?q=1%2B1&s=caf%C3%A9&flag&plus=a+b");
  ASSERT_EQ(r.result_int(), 200);
  EXPECT_EQ(r.body(),
            "path=/v1/items/a b/files/x/y\nid=a b\nname=x/y\n"
            "q:flag=\nq:plus=a b\nq:q=1+1\nq:s=caf\xC3\xA9\n");
  EXPECT_EQ(Http(http::verb::get, "/v1/items/%zz/files/x").result_int(), 400);
  EXPECT_EQ(Http(http::verb::get, "/v1/items/a/files/x?bad=%4").result_int(), 400);
  EXPECT_EQ(Http(http::verb::get, "/v1/items/a%00b/files/x").result_int(), 400);
}

TEST_F(ServerTest, LiteralSegmentsWinOverCaptures) {
  Start();
  EXPECT_EQ(Http(http::verb::get, "/v1/things/special").body(), "special");
  EXPECT_EQ(Http(http::verb::get, "/v1/things/other").body(), "thing other");
}

TEST_F(ServerTest, RestCapturesTakeTheRestOfThePath) {
  Start();
  EXPECT_EQ(Http(http::verb::get, "/v1/paths/a").body(), "path a");
  EXPECT_EQ(Http(http::verb::get, "/v1/paths/acme/agent:1").body(), "path acme/agent:1");
  EXPECT_EQ(Http(http::verb::get, "/v1/paths/acme%2Fagent%3A1").body(), "path acme/agent:1");
  // A literal after the capture: the longer match, with the capture before it.
  EXPECT_EQ(Http(http::verb::get, "/v1/paths/acme/agent:1/tag").body(), "tag acme/agent:1");
  EXPECT_EQ(Http(http::verb::get, "/v1/paths/a/tag").body(), "tag a");
  // The capture needs at least one segment: /v1/paths/tag is a path named "tag".
  EXPECT_EQ(Http(http::verb::get, "/v1/paths/tag").body(), "path tag");
  EXPECT_EQ(Http(http::verb::get, "/v1/paths").result_int(), 404);
}

TEST_F(ServerTest, NotFoundAndMethodNotAllowed) {
  Start();
  HttpResult missing = Http(http::verb::get, "/nope", {{"Authorization", "Bearer good-a"}});
  EXPECT_EQ(missing.result_int(), 404);
  EXPECT_EQ(missing.body(), R"({"error":{"code":"not_found","message":"no such endpoint"}})");
  EXPECT_EQ(Http(http::verb::get, "/v1/whoami/extra").result_int(), 404);
  HttpResult wrong_method = Http(http::verb::delete_, "/v1/whoami", {{"Authorization", "Bearer good-a"}});
  EXPECT_EQ(wrong_method.result_int(), 405);
  EXPECT_EQ(S(wrong_method[http::field::allow]), "GET");
  // Positive control: the right method on the same path.
  EXPECT_EQ(Http(http::verb::get, "/v1/whoami", {{"Authorization", "Bearer good-a"}}).result_int(), 200);
}

TEST_F(ServerTest, HeaderTooLargeIs431) {
  limits_.max_header_bytes = 1024;
  Start();
  HttpResult big = Http(http::verb::get, "/healthz", {{"X-Big", std::string(2000, 'x')}});
  EXPECT_EQ(big.result_int(), 431);
  EXPECT_NE(big.body().find("\"code\":\"bad_request\""), std::string::npos) << big.body();
  EXPECT_FALSE(big.keep_alive());
  EXPECT_EQ(Http(http::verb::get, "/healthz", {{"X-Small", std::string(100, 'x')}}).result_int(), 200);
}

TEST_F(ServerTest, BodyTooLargeIs413) {
  limits_.max_body_bytes = 1000;
  Start();
  HttpResult big = Http(http::verb::post, "/v1/echo", {{"Authorization", "Bearer good-u"}}, std::string(1001, 'b'));
  EXPECT_EQ(big.result_int(), 413);
  EXPECT_EQ(big.body(), R"({"error":{"code":"payload_too_large","message":"request body too large"}})");
  EXPECT_FALSE(big.keep_alive());
  // Chunked, so that the limit is found while reading rather than from Content-Length.
  {
    tcp::socket socket = Connect();
    std::string head =
        "POST /v1/echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer good-u\r\nTransfer-Encoding: chunked\r\n\r\n";
    std::string chunk = "258\r\n" + std::string(600, 'c') + "\r\n";
    net::write(socket, net::buffer(head + chunk + chunk + "0\r\n\r\n"));
    beast::flat_buffer buffer;
    HttpResult res;
    http::read(socket, buffer, res);
    EXPECT_EQ(res.result_int(), 413);
  }
  HttpResult fits =
      Http(http::verb::post, "/v1/echo", {{"X-Custom", "hi"}, {"Authorization", "Bearer good-u"}}, std::string(1000, 'b'));
  EXPECT_EQ(fits.result_int(), 200);
  EXPECT_EQ(fits.body(), std::string(1000, 'b'));
  EXPECT_EQ(S(fits["X-Echo-Header"]), "hi");  // handlers see lower-case header names
}

TEST_F(ServerTest, ExpectContinueIsAnswered) {
  Start();
  tcp::socket socket = Connect();
  net::write(socket, net::buffer(std::string("POST /v1/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                                             "Authorization: Bearer good-u\r\nExpect: 100-continue\r\n\r\n")));
  beast::flat_buffer buffer;
  http::response<http::empty_body> interim;
  http::read(socket, buffer, interim);
  EXPECT_EQ(interim.result_int(), 100);
  net::write(socket, net::buffer(std::string("hello")));
  HttpResult res;
  http::read(socket, buffer, res);
  EXPECT_EQ(res.result_int(), 200);
  EXPECT_EQ(res.body(), "hello");
}

TEST_F(ServerTest, AsyncResponder) {
  MakeServer().Route("GET", "/slow", Auth::kNone, [this](HttpRequest, Responder respond) {
    auto timer = std::make_shared<net::steady_timer>(io_, std::chrono::milliseconds(100));
    timer->async_wait([timer, respond](const boost::system::error_code&) {
      respond(HttpResponse{202, "text/plain", "later", {}});
    });
  });
  Start();
  auto started = std::chrono::steady_clock::now();
  HttpResult r = Http(http::verb::get, "/slow");
  EXPECT_GE(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(90));
  EXPECT_EQ(r.result_int(), 202);
  EXPECT_EQ(r.body(), "later");
}

TEST_F(ServerTest, DroppedResponderAnswers500) {
  Server& server = MakeServer();
  server.Route("GET", "/drop", Auth::kNone, [](HttpRequest, Responder) {});
  server.Route("GET", "/throw", Auth::kNone,
               [](HttpRequest, Responder) { throw std::runtime_error("boom"); });
  server.Route("GET", "/twice", Auth::kNone, [](HttpRequest, Responder respond) {
    respond(HttpResponse{200, "text/plain", "first", {}});
    respond(HttpResponse{201, "text/plain", "second", {}});
  });
  Start();
  HttpResult dropped = Http(http::verb::get, "/drop");
  EXPECT_EQ(dropped.result_int(), 500);
  EXPECT_EQ(dropped.body(), R"({"error":{"code":"internal","message":"the handler did not answer"}})");
  EXPECT_EQ(Http(http::verb::get, "/throw").result_int(), 500);
  // Positive control, and the second answer is ignored: the connection carries one response.
  tcp::socket socket = Connect();
  HttpResult twice = RoundTrip(socket, MakeRequest(http::verb::get, "/twice", {}, ""));
  EXPECT_EQ(twice.result_int(), 200);
  EXPECT_EQ(twice.body(), "first");
  EXPECT_EQ(RoundTrip(socket, MakeRequest(http::verb::get, "/healthz", {}, "")).body(), "ok");
}

TEST_F(ServerTest, OriginCheckAndCors) {
  Start();
  HttpResult evil = Http(http::verb::get, "/v1/whoami",
                         {{"Origin", "https://evil.example"}, {"Authorization", "Bearer good-a"}});
  EXPECT_EQ(evil.result_int(), 403);
  EXPECT_EQ(S(evil[http::field::access_control_allow_origin]), "");
  HttpResult allowed = Http(http::verb::get, "/v1/whoami",
                            {{"Origin", "https://app.example"}, {"Authorization", "Bearer good-a"}});
  EXPECT_EQ(allowed.result_int(), 200);
  EXPECT_EQ(S(allowed[http::field::access_control_allow_origin]), "https://app.example");
  EXPECT_EQ(S(allowed[http::field::vary]), "Origin");
  // No Origin: not a browser, no CORS headers.
  HttpResult cli = Http(http::verb::get, "/v1/whoami", {{"Authorization", "Bearer good-a"}});
  EXPECT_EQ(cli.result_int(), 200);
  EXPECT_EQ(S(cli[http::field::access_control_allow_origin]), "");

  Headers preflight = {{"Origin", "https://app.example"},
                       {"Access-Control-Request-Method", "GET"},
                       {"Access-Control-Request-Headers", "authorization"}};
  HttpResult ok = Http(http::verb::options, "/v1/whoami", preflight);
  EXPECT_EQ(ok.result_int(), 204);
  EXPECT_EQ(S(ok[http::field::access_control_allow_origin]), "https://app.example");
  EXPECT_EQ(S(ok[http::field::access_control_allow_methods]), "GET");
  EXPECT_NE(S(ok[http::field::access_control_allow_headers]).find("Authorization"), std::string::npos);
  preflight[0].second = "https://evil.example";
  EXPECT_EQ(Http(http::verb::options, "/v1/whoami", preflight).result_int(), 403);
  EXPECT_EQ(Metric("corral_auth_failures_total"), "0");  // the origin is checked before the token
}

// A page the server serves itself calls it from its own origin (scheme://Host): allowed without
// being listed; any other origin is still refused, also when only the scheme or port differs.
TEST_F(ServerTest, SameOriginIsAllowed) {
  Start();
  auto with = [&](const std::string& host, const std::string& origin, const std::string& token = "good-a") {
    return Http(http::verb::get, "/v1/whoami",
                {{"Host", host}, {"Origin", origin}, {"Authorization", "Bearer " + token}}).result_int();
  };
  EXPECT_EQ(with("127.0.0.1:7878", "http://127.0.0.1:7878"), 200);
  EXPECT_EQ(with("corral.example", "https://corral.example"), 200);  // behind a TLS proxy
  EXPECT_EQ(with("127.0.0.1:7878", "http://127.0.0.1:7879"), 403);
  EXPECT_EQ(with("127.0.0.1:7878", "http://127.0.0.1"), 403);
  EXPECT_EQ(with("127.0.0.1:7878", "https://evil.example"), 403);
  EXPECT_EQ(with("127.0.0.1:7878", "http://127.0.0.1:7878.evil.example"), 403);
  EXPECT_EQ(with("", "http://"), 403);
  // A name that resolves here (DNS rebinding) is its own origin, but a token is still needed.
  EXPECT_EQ(with("evil.example:7878", "http://evil.example:7878", "bad"), 401);
  // WebSocket handshakes likewise.
  auto same = Ws("/v1/ws", {{"Host", "127.0.0.1:9"}, {"Origin", "http://127.0.0.1:9"}, {"Authorization", "Bearer good-b"}});
  ASSERT_FALSE(same->ec) << same->ec.message();
  same->ws.close(websocket::close_code::normal);
  auto other = Ws("/v1/ws", {{"Host", "127.0.0.1:9"}, {"Origin", "http://127.0.0.1:10"}, {"Authorization", "Bearer good-b"}});
  EXPECT_EQ(other->ec, websocket::error::upgrade_declined);
}

TEST_F(ServerTest, ConnectionLimitAnswers503) {
  limits_.max_connections = 2;
  Start();
  tcp::socket a = Connect();
  tcp::socket b = Connect();
  ASSERT_TRUE(Eventually([&] { return server_->connection_count() == 2; }));
  HttpResult refused = Http(http::verb::get, "/healthz");
  EXPECT_EQ(refused.result_int(), 503);
  EXPECT_NE(refused.body().find("\"code\":\"unavailable\""), std::string::npos);
  a.close();
  ASSERT_TRUE(Eventually([&] { return server_->connection_count() == 1; }));
  EXPECT_EQ(Http(http::verb::get, "/healthz").result_int(), 200);
  EXPECT_TRUE(Eventually([&] { return Metric("corral_connections") == "1"; }))
      << Metric("corral_connections");
}

TEST_F(ServerTest, SilentClientIsDroppedAfterHandshakeTimeout) {
  limits_.handshake_timeout_s = 1;
  Start();
  tcp::socket silent = Connect();
  auto started = std::chrono::steady_clock::now();
  char byte;
  boost::system::error_code ec;
  silent.read_some(net::buffer(&byte, 1), ec);
  EXPECT_EQ(ec, net::error::eof);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  EXPECT_EQ(Http(http::verb::get, "/healthz").result_int(), 200);
}

// --- WebSocket ------------------------------------------------------------------------------

TEST_F(ServerTest, WebSocketWithBearerHeaderEchoesTextAndBinary) {
  Start();
  auto c = Ws("/v1/ws", {{"Authorization", "Bearer good-alice"}});
  ASSERT_FALSE(c->ec) << c->ec.message();
  EXPECT_EQ(c->response.result_int(), 101);
  EXPECT_EQ(S(c->response[http::field::sec_websocket_protocol]), "");  // none offered, none selected
  c->ws.write(net::buffer(std::string("whoami")));
  EXPECT_EQ(ReadText(*c), "test/alice/user");
  c->ws.text(true);
  c->ws.write(net::buffer(std::string("hello")));
  beast::flat_buffer buffer;
  c->ws.read(buffer);
  EXPECT_TRUE(c->ws.got_text());
  EXPECT_EQ(beast::buffers_to_string(buffer.data()), "hello");
  c->ws.binary(true);
  std::string blob("\x00\x01\xff\xfe", 4);
  c->ws.write(net::buffer(blob));
  buffer.consume(buffer.size());
  c->ws.read(buffer);
  EXPECT_TRUE(c->ws.got_binary());
  EXPECT_EQ(beast::buffers_to_string(buffer.data()), blob);
  EXPECT_EQ(Metric("corral_websocket_connections"), "1");
  EXPECT_EQ(Metric("corral_websocket_messages_total{direction=\"in\"}"), "3");
  EXPECT_EQ(Metric("corral_websocket_bytes_total{direction=\"in\"}"), std::to_string(6 + 5 + 4));
  c->ws.close(websocket::close_code::normal);
  ASSERT_TRUE(Eventually([&] { return ws_handler_->closes() == 1; }));
  EXPECT_EQ(Metric("corral_websocket_connections"), "0");
}

TEST_F(ServerTest, WebSocketTokenInSubprotocolIsNotEchoed) {
  Start();
  auto c = Ws("/v1/ws", {{"Sec-WebSocket-Protocol", "corral.v1, bearer.good-u"}});
  ASSERT_FALSE(c->ec) << c->ec.message();
  EXPECT_EQ(S(c->response[http::field::sec_websocket_protocol]), "corral.v1");
  for (const auto& field : c->response) {
    EXPECT_EQ(S(field.value()).find("good-u"), std::string::npos) << S(field.name_string());
  }
  c->ws.write(net::buffer(std::string("whoami")));
  EXPECT_EQ(ReadText(*c), "test/u/user");
  c->ws.close(websocket::close_code::normal);
}

TEST_F(ServerTest, WebSocketTokenInQuery) {
  Start();
  auto c = Ws("/v1/ws?token=good-q");
  ASSERT_FALSE(c->ec) << c->ec.message();
  c->ws.write(net::buffer(std::string("whoami")));
  EXPECT_EQ(ReadText(*c), "test/q/user");
  c->ws.close(websocket::close_code::normal);
}

TEST_F(ServerTest, WebSocketBadTokenIs401BeforeUpgrade) {
  Start();
  for (const Headers& headers : {Headers{}, Headers{{"Authorization", "Bearer bad"}},
                                 Headers{{"Sec-WebSocket-Protocol", "corral.v1, bearer.bad"}}}) {
    auto c = Ws("/v1/ws?token=also-bad", headers);
    EXPECT_EQ(c->ec, websocket::error::upgrade_declined);
    HttpResult r = RawUpgrade("/v1/ws?token=also-bad", headers);
    EXPECT_EQ(r.result_int(), 401);
    EXPECT_EQ(r.body(), kUnauthorizedBody);
    EXPECT_EQ(S(r[http::field::www_authenticate]), "Bearer");
  }
  EXPECT_EQ(ws_handler_->opens(), 0u);
  EXPECT_EQ(Metric("corral_auth_failures_total"), "6");
  // Positive control: the same raw request with a good token is upgraded.
  EXPECT_EQ(RawUpgrade("/v1/ws?token=good-x", {}).result_int(), 101);
}

TEST_F(ServerTest, WebSocketOriginCheck) {
  Start();
  auto evil = Ws("/v1/ws", {{"Origin", "https://evil.example"}, {"Authorization", "Bearer bad"}});
  EXPECT_EQ(evil->ec, websocket::error::upgrade_declined);
  EXPECT_EQ(RawUpgrade("/v1/ws", {{"Origin", "https://evil.example"}, {"Authorization", "Bearer bad"}})
                .result_int(),
            403);
  EXPECT_EQ(Metric("corral_auth_failures_total"), "0");  // refused before the token was looked at
  auto good = Ws("/v1/ws", {{"Origin", "https://app.example"}, {"Authorization", "Bearer good-b"}});
  ASSERT_FALSE(good->ec) << good->ec.message();
  good->ws.write(net::buffer(std::string("ping")));
  EXPECT_EQ(ReadText(*good), "ping");
  good->ws.close(websocket::close_code::normal);
}

TEST_F(ServerTest, PerUserWebSocketLimitIs429) {
  limits_.max_ws_connections_per_user = 2;
  Start();
  auto a1 = Ws("/v1/ws", {{"Authorization", "Bearer good-a"}});
  auto a2 = Ws("/v1/ws", {{"Authorization", "Bearer good-a"}});
  ASSERT_FALSE(a1->ec);
  ASSERT_FALSE(a2->ec);
  auto a3 = Ws("/v1/ws", {{"Authorization", "Bearer good-a"}});
  EXPECT_EQ(a3->ec, websocket::error::upgrade_declined);
  HttpResult refused = RawUpgrade("/v1/ws", {{"Authorization", "Bearer good-a"}});
  EXPECT_EQ(refused.result_int(), 429);
  EXPECT_NE(refused.body().find("limit_exceeded"), std::string::npos);
  // Another user still gets in.
  auto b1 = Ws("/v1/ws", {{"Authorization", "Bearer good-b"}});
  ASSERT_FALSE(b1->ec) << b1->ec.message();
  // Once one of a's connections is gone, a may connect again.
  a1->ws.close(websocket::close_code::normal);
  ASSERT_TRUE(Eventually([&] { return ws_handler_->closes() == 1; }));
  auto a4 = Ws("/v1/ws", {{"Authorization", "Bearer good-a"}});
  EXPECT_FALSE(a4->ec) << a4->ec.message();
  for (auto* c : {a2.get(), b1.get(), a4.get()}) c->ws.close(websocket::close_code::normal);
}

TEST_F(ServerTest, MessageTooBigClosesWith1009AndTheServerStaysUp) {
  limits_.max_ws_message_bytes = 1024;
  Start();
  auto c = Ws("/v1/ws", {{"Authorization", "Bearer good-a"}});
  ASSERT_FALSE(c->ec);
  c->ws.write(net::buffer(std::string(1024, 'x')));  // at the limit: fine
  EXPECT_EQ(ReadText(*c).size(), 1024u);
  c->ws.write(net::buffer(std::string(1025, 'x')));
  EXPECT_EQ(ReadUntilClosed(*c), 1009);
  auto next = Ws("/v1/ws", {{"Authorization", "Bearer good-a"}});
  ASSERT_FALSE(next->ec);
  next->ws.write(net::buffer(std::string("still here")));
  EXPECT_EQ(ReadText(*next), "still here");
  next->ws.close(websocket::close_code::normal);
}

TEST_F(ServerTest, InvalidUtf8TextClosesWith1007) {
  Start();
  auto c = Ws("/v1/ws", {{"Authorization", "Bearer good-a"}});
  ASSERT_FALSE(c->ec);
  c->ws.text(true);
  c->ws.write(net::buffer(std::string("caf\xC3\xA9")));  // valid: echoed
  EXPECT_EQ(ReadText(*c), "caf\xC3\xA9");
  c->ws.write(net::buffer(std::string("\xff\xfe")));
  EXPECT_EQ(ReadUntilClosed(*c), 1007);
}

TEST_F(ServerTest, MalformedFrameClosesWith1002) {
  Start();
  auto c = Ws("/v1/ws", {{"Authorization", "Bearer good-a"}});
  ASSERT_FALSE(c->ec);
  c->ws.write(net::buffer(std::string("fine")));
  EXPECT_EQ(ReadText(*c), "fine");
  // A client's frames must be masked: an unmasked text frame "hi" is a protocol error.
  net::write(c->ws.next_layer(), net::buffer(std::string("\x81\x02hi", 4)));
  EXPECT_EQ(ReadUntilClosed(*c), 1002);
}

TEST_F(ServerTest, IdleTimeoutPingsLiveClientsAndDropsDeadOnes) {
  limits_.idle_timeout_s = 2;
  Start();
  auto live = Ws("/v1/ws", {{"Authorization", "Bearer good-a"}});
  auto dead = Ws("/v1/ws", {{"Authorization", "Bearer good-b"}});
  ASSERT_FALSE(live->ec);
  ASSERT_FALSE(dead->ec);
  // The live client sits in a read (which answers pings) for twice the idle timeout; the dead
  // one reads nothing, so it never answers.
  beast::flat_buffer buffer;
  bool got_message = false;
  beast::error_code read_ec;
  live->ws.async_read(buffer, [&](const beast::error_code& ec, size_t) {
    got_message = true;
    read_ec = ec;
  });
  live->io.run_for(std::chrono::seconds(4));
  EXPECT_FALSE(got_message) << read_ec.message();
  EXPECT_EQ(ws_handler_->closes(), 1u);  // the dead one
  EXPECT_EQ(Metric("corral_websocket_connections"), "1");
  // The live one still works.
  live->ws.write(net::buffer(std::string("still alive")));
  live->io.restart();
  while (!got_message && live->io.run_one_for(std::chrono::seconds(5))) {
  }
  ASSERT_TRUE(got_message);
  EXPECT_FALSE(read_ec) << read_ec.message();
  EXPECT_EQ(beast::buffers_to_string(buffer.data()), "still alive");
  live->ws.close(websocket::close_code::normal);
}

TEST_F(ServerTest, HandlerCloseSendsQueuedMessagesFirst) {
  Start();
  auto c = Ws("/v1/ws", {{"Authorization", "Bearer good-a"}});
  ASSERT_FALSE(c->ec);
  c->ws.write(net::buffer(std::string("one")));
  c->ws.write(net::buffer(std::string("close 4000")));
  EXPECT_EQ(ReadText(*c), "one");
  EXPECT_EQ(ReadUntilClosed(*c), 4000);
  EXPECT_EQ(c->ws.reason().reason, "bye");
}

TEST_F(ServerTest, BackpressureFullThenDrain) {
  limits_.ws_queue_high_water = 1 << 20;
  Start();
  auto c = Ws("/v1/ws", {{"Authorization", "Bearer good-a"}});
  ASSERT_FALSE(c->ec);
  // 21 MB in messages a little under high water, so that the "drained" reply sent from the drain
  // callback does not lift the queue above high water again.
  c->ws.write(net::buffer(std::string("flood 21 1000000")));
  // Read nothing until the handler has looked at its queue again, 300 ms after the flood.
  ASSERT_TRUE(Eventually([&] { return ws_handler_->checked_later.load(); }));
  EXPECT_TRUE(ws_handler_->full_after_send);
  EXPECT_TRUE(ws_handler_->full_later) << "queued " << ws_handler_->queued_later;
  EXPECT_GT(ws_handler_->queued_later.load(), size_t{1} << 20);
  EXPECT_EQ(ws_handler_->drains, 0);
  size_t binary_bytes = 0;
  int binary_messages = 0;
  for (;;) {
    beast::flat_buffer buffer;
    c->ws.read(buffer);
    if (c->ws.got_text()) {
      EXPECT_EQ(beast::buffers_to_string(buffer.data()), "drained");
      break;
    }
    ++binary_messages;
    binary_bytes += buffer.size();
  }
  // Nothing was lost; the drain callback ran once, when the queue fell to high water.
  EXPECT_EQ(binary_bytes, 21000000u);
  EXPECT_EQ(binary_messages, 21);
  EXPECT_EQ(ws_handler_->drains, 1);
  EXPECT_LE(ws_handler_->queued_at_drain.load(), size_t{1} << 20);
  c->ws.close(websocket::close_code::normal);
}

TEST_F(ServerTest, QueueAboveHardLimitClosesWith1008) {
  limits_.ws_queue_high_water = 64 << 10;
  limits_.ws_queue_hard_limit = 256 << 10;
  Start();
  auto slow = Ws("/v1/ws", {{"Authorization", "Bearer good-a"}});
  ASSERT_FALSE(slow->ec);
  slow->ws.write(net::buffer(std::string("flood 8 65536")));  // 512 KiB in one go
  size_t messages = 0;
  EXPECT_EQ(ReadUntilClosed(*slow, &messages), 1008);
  EXPECT_EQ(slow->ws.reason().reason, "too slow");
  EXPECT_LT(messages, 8u);  // the queue was dropped
  // Positive control: under the hard limit everything arrives.
  auto ok = Ws("/v1/ws", {{"Authorization", "Bearer good-b"}});
  ASSERT_FALSE(ok->ec);
  ok->ws.write(net::buffer(std::string("flood 3 65536")));
  for (int i = 0; i < 3; ++i) {
    beast::flat_buffer buffer;
    ok->ws.read(buffer);
    EXPECT_EQ(buffer.size(), 65536u);
  }
  ok->ws.close(websocket::close_code::normal);
}

TEST_F(ServerTest, StopClosesWebSocketsWith1001) {
  Start();
  auto c = Ws("/v1/ws", {{"Authorization", "Bearer good-a"}});
  ASSERT_FALSE(c->ec);
  c->ws.write(net::buffer(std::string("ping")));
  EXPECT_EQ(ReadText(*c), "ping");
  tcp::socket idle_http = Connect();
  ASSERT_TRUE(Eventually([&] { return server_->connection_count() == 2; }));
  server_->Stop();
  EXPECT_EQ(ReadUntilClosed(*c), 1001);
  char byte;
  boost::system::error_code ec;
  idle_http.read_some(net::buffer(&byte, 1), ec);
  EXPECT_EQ(ec, net::error::eof);
  // No new connections.
  tcp::socket late(client_io_);
  late.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), server_->tcp_port()), ec);
  EXPECT_EQ(ec, net::error::connection_refused);
  ASSERT_TRUE(Eventually([&] { return server_->connection_count() == 0; }));
}

TEST_F(ServerTest, ConnectionIdsAreSequential) {
  Start();
  auto a = Ws("/v1/ws", {{"Authorization", "Bearer good-a"}});
  ASSERT_FALSE(a->ec);
  a->ws.write(net::buffer(std::string("x")));
  ReadText(*a);
  uint64_t first = ws_handler_->last_id();
  auto b = Ws("/v1/ws", {{"Authorization", "Bearer good-a"}});
  ASSERT_FALSE(b->ec);
  b->ws.write(net::buffer(std::string("x")));
  ReadText(*b);
  EXPECT_EQ(ws_handler_->last_id(), first + 1);
  a->ws.close(websocket::close_code::normal);
  b->ws.close(websocket::close_code::normal);
}

// --- the admin socket -----------------------------------------------------------------------

class AdminSocketTest : public ServerTest {
 protected:
  void SetUp() override {
    ServerTest::SetUp();
    if (geteuid() != 0) GTEST_SKIP() << "the admin socket admits uid 0 only; run as root";
    ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
    path_ = dir_ + "/admin.sock";
  }

  HttpResult UnixHttp(const std::string& target) {
    net::local::stream_protocol::socket socket(client_io_);
    socket.connect(net::local::stream_protocol::endpoint(path_));
    return RoundTrip(socket, MakeRequest(http::verb::get, target, {}, ""));
  }

  test::TempDir tmp_{"server-test"};
  const std::string dir_ = tmp_.path();
  std::string path_;
};

TEST_F(AdminSocketTest, AdminRouteWorksOnTheUnixSocketOnly) {
  MakeServer();
  Status listening = server_->ListenUnix(path_);
  ASSERT_TRUE(listening.ok()) << listening.ToString();
  Start();
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  HttpResult admin = UnixHttp("/v1/admin/ping");
  EXPECT_EQ(admin.result_int(), 200);
  EXPECT_EQ(admin.body(), "pong admin");
  // Token routes need no token there, and their handlers see an admin.
  HttpResult whoami = UnixHttp("/v1/whoami");
  EXPECT_EQ(whoami.result_int(), 200);
  EXPECT_EQ(whoami.body(), "//admin");
  // Over TCP the admin route does not exist, whatever the token.
  HttpResult tcp_admin = Http(http::verb::get, "/v1/admin/ping", {{"Authorization", "Bearer good-root"}});
  EXPECT_EQ(tcp_admin.result_int(), 404);
  EXPECT_EQ(tcp_admin.body(), R"({"error":{"code":"not_found","message":"no such endpoint"}})");
}

TEST_F(AdminSocketTest, WebSocketOnTheUnixSocketIsAdminAndExemptFromTheUserLimit) {
  limits_.max_ws_connections_per_user = 1;
  MakeServer();
  ASSERT_TRUE(server_->ListenUnix(path_).ok());
  Start();
  std::vector<std::unique_ptr<websocket::stream<net::local::stream_protocol::socket>>> clients;
  for (int i = 0; i < 2; ++i) {
    auto ws = std::make_unique<websocket::stream<net::local::stream_protocol::socket>>(client_io_);
    ws->next_layer().connect(net::local::stream_protocol::endpoint(path_));
    ws->handshake("localhost", "/v1/ws");
    ws->write(net::buffer(std::string("whoami")));
    beast::flat_buffer buffer;
    ws->read(buffer);
    EXPECT_EQ(beast::buffers_to_string(buffer.data()), "//admin");
    clients.push_back(std::move(ws));
  }
  for (auto& ws : clients) ws->close(websocket::close_code::normal);
}

TEST_F(AdminSocketTest, NonRootPeerIsClosedWithoutAnAnswer) {
  MakeServer();
  ASSERT_TRUE(server_->ListenUnix(path_, 0666).ok());  // reachable, so that only SO_PEERCRED refuses
  Start();
  // The child becomes nobody and asks; it exits 0 when the server closed without a byte of answer.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) _exit(10);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) _exit(11);
    const char request[] = "GET /v1/admin/ping HTTP/1.1\r\nHost: x\r\n\r\n";
    (void)!send(fd, request, sizeof(request) - 1, MSG_NOSIGNAL);  // the server may have closed already
    char buf[64];
    ssize_t n = read(fd, buf, sizeof(buf));
    _exit(n <= 0 ? 0 : 12);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  // Positive control: root is answered on the same socket.
  EXPECT_EQ(UnixHttp("/v1/admin/ping").result_int(), 200);
}

TEST_F(AdminSocketTest, StaleSocketIsReplacedButALiveOneIsNot) {
  {
    // What a crashed daemon leaves: a socket file nobody listens on.
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    close(fd);
  }
  MakeServer();
  Status listening = server_->ListenUnix(path_);
  ASSERT_TRUE(listening.ok()) << listening.ToString();
  // A second server on the same path while the first listens: refused.
  Metrics other_metrics;
  net::io_context other_io;
  Server other(other_io, limits_, FakeAuthenticate, other_metrics);
  Status second = other.ListenUnix(path_);
  EXPECT_FALSE(second.ok());
  EXPECT_NE(second.message().find("in use"), std::string::npos) << second.ToString();
  Start();
  EXPECT_EQ(UnixHttp("/v1/admin/ping").result_int(), 200);
}

}  // namespace
}  // namespace corral::api
