// Placeholder keys: issued per session, found by the relay, gone with their session.
#include "supervisor/relay/relay_keys.h"

#include <gtest/gtest.h>

#include <set>

namespace corral::supervisor {
namespace {

RelayClient Client(const std::string& session, const std::string& sandbox = "sb_1") {
  RelayClient client;
  client.session_id = session;
  client.sandbox_id = sandbox;
  client.iss = "corp";
  client.sub = "alice";
  client.budget.ai_micro_usd = 5000000;
  return client;
}

TEST(RelayKeysTest, AnIssuedKeyFindsItsSessionAndNothingElseDoes) {
  RelayKeys keys;
  const std::string key = keys.Issue(Client("ses_a"));
  EXPECT_EQ(key.rfind("sk-corral-", 0), 0u);
  EXPECT_EQ(key.size(), 10u + 43u);
  auto found = keys.FindKey(key);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->session_id, "ses_a");
  EXPECT_EQ(found->sandbox_id, "sb_1");
  EXPECT_EQ(*found->budget.ai_micro_usd, 5000000);
  // A near miss, a prefix, an empty key: nothing.
  std::string near = key;
  near.back() = near.back() == 'A' ? 'B' : 'A';
  EXPECT_FALSE(keys.FindKey(near).has_value());
  EXPECT_FALSE(keys.FindKey(key.substr(0, key.size() - 1)).has_value());
  EXPECT_FALSE(keys.FindKey("").has_value());
}

TEST(RelayKeysTest, KeysAreUniqueAndRevokedWithTheirSession) {
  RelayKeys keys;
  std::set<std::string> issued;
  for (int i = 0; i < 100; ++i) issued.insert(keys.Issue(Client("ses_" + std::to_string(i))));
  EXPECT_EQ(issued.size(), 100u);
  EXPECT_EQ(keys.size(), 100u);
  const std::string first = keys.Issue(Client("ses_x"));
  // A second key for the same session replaces the first.
  const std::string second = keys.Issue(Client("ses_x"));
  EXPECT_FALSE(keys.FindKey(first).has_value());
  EXPECT_TRUE(keys.FindKey(second).has_value());
  keys.Revoke("ses_x");
  EXPECT_FALSE(keys.FindKey(second).has_value());
  EXPECT_EQ(keys.size(), 100u);
}

TEST(RelayKeysTest, BudgetUpdatesAndReportsReachTheSession) {
  RelayKeys keys;
  const std::string key = keys.Issue(Client("ses_a"));
  Budget newer;
  newer.ai_micro_usd = 1;
  newer.window = BudgetWindow::kHour;
  keys.UpdateBudget("ses_a", newer);
  EXPECT_EQ(*keys.FindKey(key)->budget.ai_micro_usd, 1);
  EXPECT_EQ(keys.FindKey(key)->budget.window, BudgetWindow::kHour);
  int64_t reported = 0;
  std::string exhausted;
  keys.OnUsageCall([&](const RelayClient&, const ModelUsage&, int64_t cost) { reported += cost; });
  keys.OnExhaustedCall([&](const RelayClient& client) { exhausted = client.session_id; });
  keys.OnUsage(*keys.FindKey(key), ModelUsage{}, 42);
  keys.OnBudgetExhausted(*keys.FindKey(key));
  EXPECT_EQ(reported, 42);
  EXPECT_EQ(exhausted, "ses_a");
}

}  // namespace
}  // namespace corral::supervisor
