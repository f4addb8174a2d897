#include "supervisor/sandboxes/port_urls.h"

#include <gtest/gtest.h>

#include "supervisor/loopback_ports.h"

namespace corral::supervisor {
namespace {

const std::string kKey(32, 'k');
const PortGrant kGrant{"sb_aaaaaaaaaaaaaaaaaaaaaaaaaa", 3000, 2000000000, "acme", "alice"};

TEST(PortUrlsTest, ASignatureVerifiesUntilItsExpiryAndNoLonger) {
  const std::string sig = SignPortGrant(kKey, kGrant);
  EXPECT_EQ(sig.size(), 43u);
  EXPECT_TRUE(VerifyPortGrant(kKey, kGrant, sig, kGrant.exp));
  EXPECT_FALSE(VerifyPortGrant(kKey, kGrant, sig, kGrant.exp + 1));
}

TEST(PortUrlsTest, EveryFieldIsSigned) {
  const std::string sig = SignPortGrant(kKey, kGrant);
  ASSERT_TRUE(VerifyPortGrant(kKey, kGrant, sig, 0));  // control
  for (int field = 0; field < 5; ++field) {
    PortGrant changed = kGrant;
    if (field == 0) changed.sandbox_id = "sb_baaaaaaaaaaaaaaaaaaaaaaaaa";
    if (field == 1) changed.port = 3001;
    if (field == 2) changed.exp += 1;
    if (field == 3) changed.iss = "other";
    if (field == 4) changed.sub = "bob";
    EXPECT_FALSE(VerifyPortGrant(kKey, changed, sig, 0)) << field;
  }
  EXPECT_FALSE(VerifyPortGrant(std::string(32, 'x'), kGrant, sig, 0));
  EXPECT_FALSE(VerifyPortGrant(kKey, kGrant, sig.substr(1), 0));
  EXPECT_FALSE(VerifyPortGrant("", kGrant, sig, 0));
}

TEST(PortUrlsTest, CorralsOwnServicesAreNotShowable) {
  EXPECT_TRUE(IsShowablePort(3000, kModelRelayPort, kEgressProxyPort));
  EXPECT_TRUE(IsShowablePort(65535, kModelRelayPort, kEgressProxyPort));
  for (int64_t port : {int64_t{0}, int64_t{65536}, int64_t{-1}, int64_t{kModelRelayPort}, int64_t{kToolBridgePort},
                       int64_t{kEgressProxyPort}}) {
    EXPECT_FALSE(IsShowablePort(port, kModelRelayPort, kEgressProxyPort)) << port;
  }
}

}  // namespace
}  // namespace corral::supervisor
