// The hop mark of a request one node forwards to another (api/hop.h): it verifies for the node,
// method, target and Authorization it was made for, within the allowed clock skew, under the
// fleet's secret, and for nothing else.
#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "api/hop.h"

namespace corral::api {
namespace {

constexpr int64_t kNow = 1'800'000'000'000;
const std::string kSecret(40, 's');
const std::string kAuth = "Bearer eyJ.token.here";

HopSigner Signer(const std::string& node, const std::string& secret = kSecret) {
  auto signer = HopSigner::Create(node, secret);
  EXPECT_TRUE(signer.ok()) << signer.status().ToString();
  return std::move(*signer);
}

TEST(Hop, AMarkVerifiesForWhatItWasMadeFor) {
  const HopSigner a = Signer("node-a");
  const HopSigner b = Signer("node-b");
  const std::string mark = a.Sign("GET", "/v1/sandboxes/sb_1?x=1", kAuth, kNow);
  auto from = b.Verify(mark, "GET", "/v1/sandboxes/sb_1?x=1", kAuth, kNow + 500);
  ASSERT_TRUE(from.ok()) << from.status().ToString();
  EXPECT_EQ(*from, "node-a");
}

TEST(Hop, AMarkForAnythingElseIsRejected) {
  const HopSigner a = Signer("node-a");
  const HopSigner b = Signer("node-b");
  const std::string mark = a.Sign("GET", "/v1/sandboxes/sb_1", kAuth, kNow);
  ASSERT_TRUE(b.Verify(mark, "GET", "/v1/sandboxes/sb_1", kAuth, kNow).ok());  // control
  struct Case {
    const char* what;
    std::string method, target, auth;
    int64_t now;
  } cases[] = {
      {"other method", "DELETE", "/v1/sandboxes/sb_1", kAuth, kNow},
      {"other target", "GET", "/v1/sandboxes/sb_2", kAuth, kNow},
      {"other query", "GET", "/v1/sandboxes/sb_1?x=1", kAuth, kNow},
      {"other token", "GET", "/v1/sandboxes/sb_1", "Bearer another", kNow},
      {"no token", "GET", "/v1/sandboxes/sb_1", "", kNow},
      {"too old", "GET", "/v1/sandboxes/sb_1", kAuth, kNow + HopSigner::kMaxSkewMs + 1},
      {"from the future", "GET", "/v1/sandboxes/sb_1", kAuth, kNow - HopSigner::kMaxSkewMs - 1},
  };
  for (const Case& c : cases) {
    auto from = b.Verify(mark, c.method, c.target, c.auth, c.now);
    EXPECT_EQ(from.status().error_number(), EKEYREJECTED) << c.what;
  }
}

TEST(Hop, AMarkUnderAnotherSecretOrTamperedIsRejected) {
  const HopSigner ours = Signer("node-b");
  const std::string theirs = Signer("node-a", std::string(40, 't')).Sign("GET", "/v1/x", kAuth, kNow);
  EXPECT_EQ(ours.Verify(theirs, "GET", "/v1/x", kAuth, kNow).status().error_number(), EKEYREJECTED);
  std::string mark = Signer("node-a").Sign("GET", "/v1/x", kAuth, kNow);
  ASSERT_TRUE(ours.Verify(mark, "GET", "/v1/x", kAuth, kNow).ok());  // control
  // Another node's name on the same MAC.
  std::string renamed = mark;
  renamed.replace(renamed.find("node-a"), 6, "node-c");
  EXPECT_FALSE(ours.Verify(renamed, "GET", "/v1/x", kAuth, kNow).ok());
  // Another time on the same MAC.
  std::string retimed = mark;
  const size_t time_at = retimed.find(std::to_string(kNow));
  retimed.replace(time_at, std::to_string(kNow).size(), std::to_string(kNow + 1));
  EXPECT_FALSE(ours.Verify(retimed, "GET", "/v1/x", kAuth, kNow).ok());
  // One hex digit of the MAC changed.
  std::string flipped = mark;
  flipped.back() = flipped.back() == '0' ? '1' : '0';
  EXPECT_FALSE(ours.Verify(flipped, "GET", "/v1/x", kAuth, kNow).ok());
}

TEST(Hop, MalformedMarksAreRejected) {
  const HopSigner b = Signer("node-b");
  const std::string good = Signer("node-a").Sign("GET", "/v1/x", kAuth, kNow);
  for (const std::string& mark : {std::string(), std::string("v1"), std::string("v1 node-a"),
                                  std::string("v2") + good.substr(2), good + " extra", good.substr(0, good.size() - 1),
                                  std::string("v1  ") + std::to_string(kNow) + " 00",
                                  std::string("v1 node-a -5 00"), std::string("v1 node-a 99999999999999999999999 00")}) {
    EXPECT_EQ(b.Verify(mark, "GET", "/v1/x", kAuth, kNow).status().error_number(), EKEYREJECTED) << mark;
  }
}

TEST(Hop, AShortSecretOrABadNodeIdIsRefused) {
  EXPECT_EQ(HopSigner::Create("node-a", std::string(31, 's')).status().error_number(), EINVAL);
  EXPECT_EQ(HopSigner::Create("", kSecret).status().error_number(), EINVAL);
  EXPECT_EQ(HopSigner::Create("node a", kSecret).status().error_number(), EINVAL);
  EXPECT_TRUE(HopSigner::Create("node-a", std::string(32, 's')).ok());  // control
}

}  // namespace
}  // namespace corral::api
