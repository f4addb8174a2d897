#include "api/port_http.h"

#include <gtest/gtest.h>

#include <boost/beast/http/message.hpp>

namespace corral::api::internal {
namespace {

namespace http = boost::beast::http;

const std::string kId = "sb_abcdefghijklmnopqrst";

TEST(PortHttpTest, TheHostFormNamesThePortAndTheSandboxInAnyCase) {
  auto route = MatchPortRoute("GET", "3000-sb-abcdefghijklmnopqrst.preview.example.com", "/a?b=1", "preview.example.com");
  ASSERT_TRUE(route);
  EXPECT_TRUE(route->by_host);
  EXPECT_EQ(route->port, 3000);
  EXPECT_EQ(route->sandbox_id, kId);
  EXPECT_EQ(route->rest, "/a?b=1");
  // '_' instead of '-', a port after the name, capitals (DNS names are case-blind).
  route = MatchPortRoute("GET", "3000-SB_ABCDEFGHIJKLMNOPQRST.Preview.Example.COM:443", "/", "preview.example.com");
  ASSERT_TRUE(route);
  EXPECT_EQ(route->sandbox_id, kId);
}

TEST(PortHttpTest, OtherHostsAreTheApis) {
  for (const char* host : {"preview.example.com", "api.example.com", "3000-sb-x.preview.example.com.evil.test",
                           "3000-sb-abc.otherpreview.example.com", "x3000-sb-abc.preview.example.com",
                           "123456-sb-abc.preview.example.com", "3000-sx-abc.preview.example.com", "-sb-abc.preview.example.com",
                           "3000-sb-.preview.example.com", ""}) {
    EXPECT_FALSE(MatchPortRoute("GET", host, "/v1/sandboxes", "preview.example.com")) << host;
  }
  // Without a domain, no host routing at all.
  EXPECT_FALSE(MatchPortRoute("GET", "3000-sb-abcdefghijklmnopqrst.preview.example.com", "/", ""));
}

TEST(PortHttpTest, ThePathFormTakesWhatIsBelowThePortsSlash) {
  auto route = MatchPortRoute("GET", "127.0.0.1:7878", "/v1/sandboxes/" + kId + "/ports/8000/app/x?y=1", "");
  ASSERT_TRUE(route);
  EXPECT_FALSE(route->by_host);
  EXPECT_EQ(route->port, 8000);
  EXPECT_EQ(route->sandbox_id, kId);
  EXPECT_EQ(route->prefix, "/v1/sandboxes/" + kId + "/ports/8000");
  EXPECT_EQ(route->rest, "/app/x?y=1");
  // The API's own: the list, a port without the slash (DELETE), the signed-url route.
  EXPECT_FALSE(MatchPortRoute("GET", "h", "/v1/sandboxes/" + kId + "/ports", ""));
  EXPECT_FALSE(MatchPortRoute("DELETE", "h", "/v1/sandboxes/" + kId + "/ports/8000", ""));
  EXPECT_FALSE(MatchPortRoute("POST", "h", "/v1/sandboxes/" + kId + "/ports/8000/signed-url", ""));
  EXPECT_FALSE(MatchPortRoute("GET", "h", "/v1/sandboxes/" + kId + "/ports/80a/", ""));
  EXPECT_FALSE(MatchPortRoute("GET", "h", "/v1/sandboxes/" + kId + "/files/x", ""));
  // The app's own signed-url page, by GET, is the app's.
  EXPECT_TRUE(MatchPortRoute("GET", "h", "/v1/sandboxes/" + kId + "/ports/8000/signed-url", ""));
}

TEST(PortHttpTest, CorralsParametersAreTakenOutAndTheRestKeptAsSent) {
  std::map<std::string, std::string> found;
  EXPECT_EQ(StripCorralParams("/a?x=1&token=t%2Bk&y=%20&corral_sig=s&corral_exp=9", found), "/a?x=1&y=%20");
  EXPECT_EQ(found["token"], "t+k");
  EXPECT_EQ(found["corral_sig"], "s");
  EXPECT_EQ(found["corral_exp"], "9");
  found.clear();
  // An encoded name is still corral's: the app never gets it.
  EXPECT_EQ(StripCorralParams("/a?%74oken=secret", found), "/a");
  EXPECT_EQ(found["token"], "secret");
  found.clear();
  EXPECT_EQ(StripCorralParams("/a?tokens=1", found), "/a?tokens=1");
  EXPECT_TRUE(found.empty());
  EXPECT_EQ(StripCorralParams("/a", found), "/a");
}

TEST(PortHttpTest, CorralsCookieIsTakenOutAndTheAppsKept) {
  std::string value;
  EXPECT_EQ(StripCookie("a=1; corral_port=9.sig; b=2", "corral_port", value), "a=1; b=2");
  EXPECT_EQ(value, "9.sig");
  value.clear();
  EXPECT_EQ(StripCookie(" corral_port = x ;corral_port=y", "corral_port", value), "");
  EXPECT_EQ(value, "y");
  value.clear();
  EXPECT_EQ(StripCookie("corral_portx=1", "corral_port", value), "corral_portx=1");
  EXPECT_EQ(value, "");
}

TEST(PortHttpTest, AnAppsCookieStaysWithItsPort) {
  // Host form: no Domain (the preview domain would reach every sandbox's port), the rest kept.
  EXPECT_EQ(ConfineSetCookie("sid=1; Domain=preview.example.com; Path=/; HttpOnly", ""), "sid=1; Path=/; HttpOnly");
  EXPECT_EQ(ConfineSetCookie("sid=1;domain=.example.com", ""), "sid=1");
  // Path form (corral's own origin): the port's prefix, whatever the app asked.
  EXPECT_EQ(ConfineSetCookie("sid=1; Path=/; Secure", "/v1/sandboxes/x/ports/1/"), "sid=1; Secure; Path=/v1/sandboxes/x/ports/1/");
  EXPECT_EQ(ConfineSetCookie("sid=1", "/p/"), "sid=1; Path=/p/");
}

TEST(PortHttpTest, CorralsTokensAreTakenOutOfTheSubprotocols) {
  auto is_token = [](const std::string& t) { return t == "good"; };
  EXPECT_EQ(StripTokenSubprotocols("corral.v1, bearer.good, chat", is_token), "corral.v1, chat");
  EXPECT_EQ(StripTokenSubprotocols("bearer.apps-own", is_token), "bearer.apps-own");
  EXPECT_EQ(StripTokenSubprotocols("bearer.good", is_token), "");
}

TEST(PortHttpTest, TheClientGetsAHeadOfCorralsMaking) {
  http::response_header<> head;
  head.version(11);
  head.result(http::status::ok);
  head.reason("OK");
  head.insert("Content-Type", "text/html");
  head.insert("Set-Cookie", "a=1; Domain=example.com");
  head.insert("Connection", "keep-alive");
  head.insert("Keep-Alive", "timeout=5");
  const std::string text = ClientResponseHead(head, "X-Added: 1\r\n", "/p/");
  EXPECT_EQ(text,
            "HTTP/1.1 200 OK\r\nX-Added: 1\r\nConnection: close\r\nContent-Type: text/html\r\n"
            "Set-Cookie: a=1; Path=/p/\r\n\r\n");
  // A 101 keeps its Connection: Upgrade; a 100 says nothing of the connection.
  http::response_header<> upgrade;
  upgrade.version(11);
  upgrade.result(http::status::switching_protocols);
  upgrade.insert("Connection", "Upgrade");
  upgrade.insert("Upgrade", "websocket");
  const std::string switching = ClientResponseHead(upgrade, "", "");
  EXPECT_NE(switching.find("Connection: Upgrade\r\n"), std::string::npos);
  EXPECT_EQ(switching.find("Connection: close"), std::string::npos);
}

}  // namespace
}  // namespace corral::api::internal
