// The claims a verified token carries beside who it is: its scope, its limits (the user's caps)
// and its budget, and how a claim of the wrong form is refused, naming it.
#include "api/jwt.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/unit/jwt_test_util.h"

namespace corral::api {
namespace {

using ::testing::HasSubstr;
using namespace jwt_test;  // NOLINT: the shared tokens and helpers

// ---- scope ----

TEST(JwtTest, AbsentScopeMeansTheUserScopesButNeverAdmin) {
  StatusOr<Claims> claims = VerifyToken(Mint(ValidPayload()), Lookup, Policy());
  ASSERT_TRUE(claims.ok());
  EXPECT_EQ(claims->scopes,
            (std::vector<std::string>{kScopeSandboxes, kScopeExec, kScopeTerminal, kScopeFiles, kScopeSessions,
                                      kScopeSecrets}));
  EXPECT_FALSE(claims->HasScope("admin"));
}

std::vector<std::string> ScopesOf(const json& scope) {
  StatusOr<Claims> claims = VerifyToken(Mint(With("scope", scope)), Lookup, Policy());
  EXPECT_TRUE(claims.ok()) << claims.status().ToString();
  return claims.ok() ? claims->scopes : std::vector<std::string>{"<error>"};
}

TEST(JwtTest, ScopeStringIsSplitOnSpaces) {
  using V = std::vector<std::string>;
  EXPECT_EQ(ScopesOf("exec"), V{"exec"});
  EXPECT_EQ(ScopesOf("exec files"), (V{"exec", "files"}));
  EXPECT_EQ(ScopesOf("  exec   files "), (V{"exec", "files"}));
  EXPECT_EQ(ScopesOf("exec future:thing"), (V{"exec", "future:thing"}));
  EXPECT_EQ(ScopesOf(""), V{});  // explicitly nothing, not the defaults
}

TEST(JwtTest, ScopeArrayIsTakenAsIs) {
  using V = std::vector<std::string>;
  EXPECT_EQ(ScopesOf(json::array({"sandboxes", "files"})), (V{"sandboxes", "files"}));
  EXPECT_EQ(ScopesOf(json::array({"unknown-scope"})), V{"unknown-scope"});
  EXPECT_EQ(ScopesOf(json::array()), V{});
}

TEST(JwtTest, ScopeOfAnyOtherFormIsRejected) {
  EXPECT_EQ(OutcomeOf(With("scope", "exec")), "OK");
  EXPECT_EQ(OutcomeOf(With("scope", 1)), "scope not a string or array");
  EXPECT_EQ(OutcomeOf(With("scope", nullptr)), "scope not a string or array");
  EXPECT_EQ(OutcomeOf(With("scope", {{"exec", true}})), "scope not a string or array");
  EXPECT_EQ(OutcomeOf(With("scope", json::array({"exec", 1}))),
            "scope entry not a non-empty string");
  EXPECT_EQ(OutcomeOf(With("scope", json::array({"exec", ""}))),
            "scope entry not a non-empty string");
}

// ---- limits ----

TEST(JwtTest, CpusBecomeMillicores) {
  auto millicores = [](const json& cpus) -> std::optional<uint64_t> {
    StatusOr<Claims> claims =
        VerifyToken(Mint(With("limits", {{"cpus", cpus}})), Lookup, Policy());
    EXPECT_TRUE(claims.ok()) << claims.status().ToString();
    return claims.ok() ? claims->limits.resources.cpu_millicores : std::nullopt;
  };
  EXPECT_EQ(millicores(1.5), 1500u);
  EXPECT_EQ(millicores(2), 2000u);
  EXPECT_EQ(millicores(0.25), 250u);
  EXPECT_EQ(millicores(0.1), 100u);
  EXPECT_EQ(millicores(0.0016), 2u);  // rounded, not truncated
}

TEST(JwtTest, LimitsWithWrongTypesNameTheField) {
  EXPECT_EQ(OutcomeOf(With("limits", {{"memory_bytes", 1}, {"future_limit", "x"}})), "OK");
  EXPECT_EQ(OutcomeOf(With("limits", json::object())), "OK");
  EXPECT_THAT(OutcomeOf(With("limits", {{"memory_bytes", -1}})), HasSubstr("limits.memory_bytes"));
  EXPECT_THAT(OutcomeOf(With("limits", {{"pids", "10"}})), HasSubstr("limits.pids"));
  EXPECT_THAT(OutcomeOf(With("limits", {{"disk_bytes", 1.5}})), HasSubstr("limits.disk_bytes"));
  EXPECT_THAT(OutcomeOf(With("limits", {{"sandboxes", nullptr}})), HasSubstr("limits.sandboxes"));
  EXPECT_THAT(OutcomeOf(With("limits", {{"idle_timeout_s", true}})),
              HasSubstr("limits.idle_timeout_s"));
  EXPECT_THAT(OutcomeOf(With("limits", {{"commands", json::array()}})),
              HasSubstr("limits.commands"));
  for (const json& cpus : {json(0), json(-1.5), json("2"), json(nullptr), json(1e7)}) {
    EXPECT_THAT(OutcomeOf(With("limits", {{"cpus", cpus}})), HasSubstr("limits.cpus")) << cpus;
  }
  EXPECT_EQ(OutcomeOf(With("limits", {{"cpus", 0.0001}})), "limits.cpus below one millicore");
  EXPECT_EQ(OutcomeOf(With("limits", "none")), "limits not an object");
  EXPECT_EQ(OutcomeOf(With("limits", json::array())), "limits not an object");
}

TEST(JwtTest, InfiniteCpusAreRejected) {
  std::string payload = R"({"iss":"acme","sub":"u","exp":1700000060,"limits":{"cpus":1e400}})";
  EXPECT_NE(Outcome(SignRaw(kHs256Header, payload)), "OK");
  std::string fine = R"({"iss":"acme","sub":"u","exp":1700000060,"limits":{"cpus":1e2}})";
  EXPECT_EQ(Outcome(SignRaw(kHs256Header, fine)), "OK");
}

TEST(JwtTest, LargestLimitsSurvive) {
  StatusOr<Claims> claims =
      VerifyToken(Mint(With("limits", {{"disk_bytes", UINT64_MAX}})), Lookup, Policy());
  ASSERT_TRUE(claims.ok()) << claims.status().ToString();
  EXPECT_EQ(claims->limits.resources.disk_bytes, UINT64_MAX);
}

TEST(JwtTest, ImageLimitsAreKeptAsGiven) {
  StatusOr<Claims> none = VerifyToken(Mint(ValidPayload()), Lookup, Policy());
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->limits.images.has_value());  // unset: any image

  using V = std::vector<std::string>;
  StatusOr<Claims> some =
      VerifyToken(Mint(With("limits", {{"images", {"python:*", "host", "acme/agent:1"}}})), Lookup, Policy());
  ASSERT_TRUE(some.ok()) << some.status().ToString();
  EXPECT_EQ(some->limits.images, (V{"python:*", "host", "acme/agent:1"}));

  StatusOr<Claims> empty = VerifyToken(Mint(With("limits", {{"images", json::array()}})), Lookup, Policy());
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty->limits.images, V{});  // set and empty: no image at all
}

TEST(JwtTest, BadImageLimitsAreRejectedNamingTheField) {
  EXPECT_EQ(OutcomeOf(With("limits", {{"images", {"python:3.12"}}})), "OK");
  EXPECT_EQ(OutcomeOf(With("limits", {{"images", "python:3.12"}})), "limits.images not an array of strings");
  EXPECT_EQ(OutcomeOf(With("limits", {{"images", nullptr}})), "limits.images not an array of strings");
  EXPECT_EQ(OutcomeOf(With("limits", {{"images", {"python:*", ""}}})), "limits.images entry not a non-empty string");
  EXPECT_EQ(OutcomeOf(With("limits", {{"images", {"python:*", 3}}})), "limits.images entry not a non-empty string");

  json at_most(json::array());
  for (int i = 0; i < 64; ++i) at_most.push_back("image" + std::to_string(i));
  EXPECT_EQ(OutcomeOf(With("limits", {{"images", at_most}})), "OK");
  at_most.push_back("one-more");
  EXPECT_EQ(OutcomeOf(With("limits", {{"images", at_most}})), "limits.images has more than 64 entries");

  EXPECT_EQ(OutcomeOf(With("limits", {{"images", {std::string(255, 'a')}}})), "OK");
  EXPECT_EQ(OutcomeOf(With("limits", {{"images", {std::string(256, 'a')}}})),
            "limits.images entry longer than 255 characters");
}

// ---- budget ----

TEST(JwtTest, BudgetWindowsAreParsed) {
  for (const char* window : {"hour", "day", "week", "month"}) {
    StatusOr<Claims> claims =
        VerifyToken(Mint(With("budget", {{"window", window}})), Lookup, Policy());
    ASSERT_TRUE(claims.ok()) << claims.status().ToString();
    EXPECT_EQ(supervisor::WindowName(claims->budget.window), window);
  }
  StatusOr<Claims> zero =
      VerifyToken(Mint(With("budget", {{"ai_usd", 0}, {"compute_s", 0}})), Lookup, Policy());
  ASSERT_TRUE(zero.ok()) << zero.status().ToString();
  EXPECT_EQ(zero->budget.ai_micro_usd, 0);
  EXPECT_EQ(zero->budget.compute_ms, 0);
}

TEST(JwtTest, BadBudgetsAreRejectedNamingTheField) {
  EXPECT_EQ(OutcomeOf(With("budget", {{"ai_usd", 1}, {"window", "week"}})), "OK");
  EXPECT_THAT(OutcomeOf(With("budget", {{"ai_usd", -0.01}})), HasSubstr("budget.ai_usd"));
  EXPECT_THAT(OutcomeOf(With("budget", {{"ai_usd", "5"}})), HasSubstr("budget.ai_usd"));
  EXPECT_THAT(OutcomeOf(With("budget", {{"compute_s", -1}})), HasSubstr("budget.compute_s"));
  EXPECT_THAT(OutcomeOf(With("budget", {{"compute_s", nullptr}})), HasSubstr("budget.compute_s"));
  EXPECT_THAT(OutcomeOf(With("budget", {{"window", "year"}})), HasSubstr("budget.window"));
  EXPECT_THAT(OutcomeOf(With("budget", {{"window", "Day"}})), HasSubstr("budget.window"));
  EXPECT_THAT(OutcomeOf(With("budget", {{"window", 1}})), HasSubstr("budget.window"));
  EXPECT_THAT(OutcomeOf(With("budget", {{"window_start", 1.5}})),
              HasSubstr("budget.window_start"));
  EXPECT_THAT(OutcomeOf(With("budget", {{"window_start", "0"}})),
              HasSubstr("budget.window_start"));
  EXPECT_EQ(OutcomeOf(With("budget", 5)), "budget not an object");
}

}  // namespace
}  // namespace corral::api
