// Webhooks as pure values (supervisor/webhooks/webhook_body.h, webhook_outbox.h) and their
// configuration (supervisor/config_webhooks.h): the body of each event type, the signature
// (against a vector computed by Python's hmac module) and a receiver's check of it, the retry
// schedule, receivers' URLs, the outbox's rows of an event, and [webhooks] with bad inputs.
#include <gtest/gtest.h>

#include <cerrno>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "supervisor/config.h"
#include "supervisor/ids.h"
#include "supervisor/webhooks/webhook_body.h"
#include "supervisor/webhooks/webhook_outbox.h"

namespace corral::supervisor {
namespace {

using nlohmann::json;

constexpr char kSecret[] = "0123456789abcdef0123456789abcdef";

WebhookEvent Stopped(StopReason reason) {
  WebhookEvent event;
  event.type = WebhookEventType::kSandboxStopped;
  event.at = 1700000000;
  event.iss = "corp";
  event.sub = "alice";
  event.sandbox_id = "sb_1";
  event.reason = reason;
  return event;
}

TEST(WebhookSignatureTest, MatchesAnIndependentHmacAndVerifies) {
  // python3 -c "import hmac,hashlib; print(hmac.new(SECRET, b'1700000000.{\"id\":\"wh_x\"}',
  // hashlib.sha256).hexdigest())"
  const std::string body = R"({"id":"wh_x"})";
  EXPECT_EQ(WebhookSignature(kSecret, 1700000000, body),
            "t=1700000000,v1=edd672f8eea00a2e3f67b12baa524da625c798fbb7fdd35204a02298f64a6307");
  const std::string header = WebhookSignature(kSecret, 1700000000, body);
  // The positive control: the same body within the window.
  EXPECT_TRUE(VerifyWebhookSignature(kSecret, header, body, 1700000100, 300).ok());
  // A body changed under the same signature.
  Status changed = VerifyWebhookSignature(kSecret, header, R"({"id":"wh_y"})", 1700000100, 300);
  EXPECT_EQ(changed.error_number(), EPERM) << changed.ToString();
  // Replayed later than the window: the MAC is right, the time is not.
  Status replayed = VerifyWebhookSignature(kSecret, header, body, 1700000000 + 301, 300);
  EXPECT_EQ(replayed.error_number(), ETIME) << replayed.ToString();
  // A timestamp moved forward to pass the window: the MAC covers it.
  Status moved = VerifyWebhookSignature(kSecret, "t=1700000301," + header.substr(header.find("v1=")), body,
                                        1700000301, 300);
  EXPECT_EQ(moved.error_number(), EPERM) << moved.ToString();
  // Another secret.
  EXPECT_EQ(VerifyWebhookSignature("another secret of at least 32 bytes!", header, body, 1700000000, 300)
                .error_number(),
            EPERM);
  for (const char* bad : {"", "t=1700000000", "v1=abc", "t=x,v1=abc"}) {
    EXPECT_EQ(VerifyWebhookSignature(kSecret, bad, body, 1700000000, 300).error_number(), EINVAL) << bad;
  }
  // Several v1 MACs (a secret being rotated): one match is enough.
  EXPECT_TRUE(VerifyWebhookSignature(kSecret, "t=1700000000,v1=00ff," + header.substr(header.find("v1=")), body,
                                     1700000000, 300)
                  .ok());
}

TEST(WebhookRetryTest, DoublesFromTheMinimumUpToTheMaximum) {
  std::vector<int64_t> delays;
  for (int64_t attempts = 1; attempts <= 8; ++attempts) delays.push_back(WebhookRetryDelay(attempts, 10, 300));
  EXPECT_EQ(delays, (std::vector<int64_t>{10, 20, 40, 80, 160, 300, 300, 300}));
  EXPECT_EQ(WebhookRetryDelay(1000, 1, 3600), 3600);  // no overflow after many attempts
  EXPECT_EQ(WebhookRetryDelay(1, 5, 5), 5);
}

TEST(WebhookBodyTest, HasTheDocumentedShapeForEachType) {
  const std::string stopped = WebhookBody(Stopped(StopReason::kIdle), "wh_abc", "node-1");
  EXPECT_EQ(stopped,
            R"({"id":"wh_abc","type":"sandbox.stopped","created_at":1700000000,"node":"node-1","iss":"corp",)"
            R"("sub":"alice","sandbox_id":"sb_1","data":{"reason":"idle"}})");
  std::set<std::string> reasons;
  for (StopReason reason : {StopReason::kRequest, StopReason::kIdle, StopReason::kComputeBudget,
                            StopReason::kShutdown, StopReason::kNodeFailure}) {
    reasons.insert(json::parse(WebhookBody(Stopped(reason), "wh_a", "n"))["data"]["reason"].get<std::string>());
  }
  EXPECT_EQ(reasons, (std::set<std::string>{"request", "idle", "compute_budget", "shutdown", "node_failure"}));

  WebhookEvent ended = Stopped(StopReason::kRequest);
  ended.type = WebhookEventType::kSessionEnded;
  ended.session = SessionEnd{"ses_1", "completed", "completed", 3, 12345, {2, 100, 50, 10, 5}};
  json session = json::parse(WebhookBody(ended, "wh_b", "n"))["data"];
  EXPECT_EQ(session["session_id"], "ses_1");
  EXPECT_EQ(session["outcome"], "completed");
  EXPECT_EQ(session["turns"], 3);
  EXPECT_EQ(session["cost_usd"], "0.012345");
  EXPECT_EQ(session["usage"], (json{{"calls", 2}, {"input_tokens", 100}, {"output_tokens", 50},
                                   {"cache_creation_input_tokens", 10}, {"cache_read_input_tokens", 5}}));

  Budget daily;
  daily.window = BudgetWindow::kDay;
  WebhookEvent spent = BudgetExhaustedEvent("corp", "alice", "sb_1", "ai", daily, 1000000, 1000200, 1700000000);
  json budget = json::parse(WebhookBody(spent, "wh_c", "n"));
  EXPECT_EQ(budget["type"], "budget.exhausted");
  EXPECT_EQ(budget["data"]["kind"], "ai");
  EXPECT_EQ(budget["data"]["window"], "day");
  EXPECT_EQ(budget["data"]["limit_usd"], "1.000000");
  EXPECT_EQ(budget["data"]["spent_usd"], "1.000200");
  EXPECT_LE(budget["data"]["window_start"].get<int64_t>(), 1700000000);
  EXPECT_GT(budget["data"]["window_end"].get<int64_t>(), 1700000000);
}

TEST(WebhookBodyTest, OneEventPerUserKindAndWindowHasOneId) {
  Budget daily;
  const WebhookEvent first = BudgetExhaustedEvent("corp", "alice", "sb_1", "ai", daily, 10, 11, 1700000000);
  const WebhookEvent later = BudgetExhaustedEvent("corp", "alice", "sb_2", "ai", daily, 10, 12, 1700000100);
  const WebhookEvent compute = BudgetExhaustedEvent("corp", "alice", "sb_1", "compute", daily, 10, 11, 1700000000);
  const WebhookEvent bob = BudgetExhaustedEvent("corp", "bob", "sb_1", "ai", daily, 10, 11, 1700000000);
  const WebhookEvent next_day = BudgetExhaustedEvent("corp", "alice", "sb_1", "ai", daily, 10, 11, 1700000000 + 86400);
  EXPECT_EQ(WebhookEventId(first), WebhookEventId(later));
  EXPECT_TRUE(IsWellFormedId(WebhookEventId(first), "wh"))
      << WebhookEventId(first);
  std::set<std::string> ids = {WebhookEventId(first), WebhookEventId(compute), WebhookEventId(bob),
                               WebhookEventId(next_day)};
  EXPECT_EQ(ids.size(), 4u);
  // Events that happen once get a new id each time.
  EXPECT_NE(WebhookEventId(Stopped(StopReason::kIdle)), WebhookEventId(Stopped(StopReason::kIdle)));
}

TEST(WebhookUrlTest, ParsesReceiversAndRefusesTheRest) {
  auto plain = ParseWebhookUrl("http://127.0.0.1:8080/hooks?x=1");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE(plain->tls);
  EXPECT_EQ(plain->host, "127.0.0.1");
  EXPECT_EQ(plain->port, "8080");
  EXPECT_EQ(plain->target, "/hooks?x=1");
  auto tls = ParseWebhookUrl("https://billing.example.com");
  ASSERT_TRUE(tls.ok());
  EXPECT_TRUE(tls->tls);
  EXPECT_EQ(tls->port, "443");
  EXPECT_EQ(tls->target, "/");
  auto v6 = ParseWebhookUrl("https://[::1]:8443/h");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, "8443");
  for (const char* bad : {"ftp://x/", "https://", "http://user:pw@host/", "https://host:0/", "https://host:99999/",
                          "https://host/a b", "https://host/#frag", "https://[::1/", "host/path"}) {
    EXPECT_FALSE(ParseWebhookUrl(bad).ok()) << bad;
  }
}

TEST(WebhookOutboxTest, OneRowPerUrlForTheEventsAsked) {
  WebhooksConfig config;
  config.urls = {"http://127.0.0.1:1/a", "https://example.com/b"};
  WebhookOutbox outbox(config, "node-1");
  std::vector<OutboxRow> rows = outbox.RowsOf(Stopped(StopReason::kIdle));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].id, rows[1].id);      // one event, one id
  EXPECT_EQ(rows[0].body, rows[1].body);  // and the same bytes
  EXPECT_EQ(rows[0].url, "http://127.0.0.1:1/a");
  EXPECT_EQ(rows[1].url, "https://example.com/b");
  EXPECT_EQ(rows[0].type, "sandbox.stopped");
  EXPECT_EQ(json::parse(rows[0].body)["id"], rows[0].id);
  EXPECT_EQ(json::parse(rows[0].body)["node"], "node-1");
  EXPECT_GT(rows[0].next_attempt_ms, 0);

  // Only the events asked (a reload): sandbox.stopped is not one of them now.
  config.events = {WebhookEventType::kSessionEnded};
  outbox.Reload(config);
  EXPECT_TRUE(outbox.RowsOf(Stopped(StopReason::kIdle)).empty());
  WebhookEvent ended = Stopped(StopReason::kIdle);
  ended.type = WebhookEventType::kSessionEnded;
  EXPECT_EQ(outbox.RowsOf(ended).size(), 2u);  // the control
  config.urls.clear();
  outbox.Reload(config);
  EXPECT_TRUE(outbox.RowsOf(ended).empty());
}

std::string ErrorOf(const std::string& text) {
  auto parsed = ParseConfig(text, "corrald.toml");
  EXPECT_FALSE(parsed.ok()) << "parsed:\n" << text;
  return parsed.ok() ? "" : parsed.status().message();
}

TEST(WebhooksConfigTest, ParsesEveryKey) {
  auto none = ParseConfig("");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->webhooks.urls.empty());  // off by default
  auto parsed = ParseConfig(
      "[webhooks]\nurls = [\"https://billing.example.com/corral\", \"http://10.0.0.5:8080/h\"]\n"
      "secret_file = \"/etc/corral/webhook-secret\"\nevents = [\"sandbox.stopped\", \"session.ended\"]\n"
      "ca_file = \"/etc/corral/ca.pem\"\ntimeout = 5\nretry_min = 2\nretry_max = 60\nmax_age = 3600\nkeep = 86400\n",
      "corrald.toml");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const WebhooksConfig& w = parsed->webhooks;
  EXPECT_EQ(w.urls, (std::vector<std::string>{"https://billing.example.com/corral", "http://10.0.0.5:8080/h"}));
  EXPECT_EQ(w.secret_file, "/etc/corral/webhook-secret");
  EXPECT_EQ(w.events,
            (std::vector<WebhookEventType>{WebhookEventType::kSandboxStopped, WebhookEventType::kSessionEnded}));
  EXPECT_EQ(w.ca_file, "/etc/corral/ca.pem");
  EXPECT_EQ(w.timeout_s, 5u);
  EXPECT_EQ(w.retry_min_s, 2u);
  EXPECT_EQ(w.retry_max_s, 60u);
  EXPECT_EQ(w.max_age_s, 3600u);
  EXPECT_EQ(w.keep_s, 86400u);
}

TEST(WebhooksConfigTest, BadValuesNameTheKey) {
  const std::string secret = "secret_file = \"/etc/corral/s\"\n";
  EXPECT_EQ(ErrorOf("[webhooks]\nurls = [\"ftp://x/\"]\n"),
            "corrald.toml:2: webhooks.urls: expected an array of http:// or https:// URLs: \"ftp://x/\": expected an "
            "http:// or https:// URL");
  EXPECT_EQ(ErrorOf("[webhooks]\nurls = \"https://x/\"\n"),
            "corrald.toml:2: webhooks.urls: expected an array of http:// or https:// URLs");
  EXPECT_EQ(ErrorOf("[webhooks]\nurls = [\"https://x/\", \"https://x/\"]\n" + secret),
            "corrald.toml:2: webhooks.urls: \"https://x/\" is named twice");
  EXPECT_EQ(ErrorOf("[webhooks]\nurls = [\"https://x/\"]\n"),
            "corrald.toml:2: webhooks.urls needs webhooks.secret_file (the key that signs)");
  EXPECT_NE(ErrorOf("[webhooks]\nevents = [\"sandbox.exploded\"]\n")
                .find("corrald.toml:2: webhooks.events: \"sandbox.exploded\" is no event type; expected an array of "
                      "event types (sandbox.created, sandbox.started"),
            std::string::npos);
  EXPECT_EQ(ErrorOf("[webhooks]\nsecret_file = \"relative\"\n"),
            "corrald.toml:2: webhooks.secret_file: expected an absolute path");
  EXPECT_EQ(ErrorOf("[webhooks]\ntimeout = -1\n"),
            "corrald.toml:2: webhooks.timeout: expected a duration in seconds (an integer >= 0)");
  EXPECT_EQ(ErrorOf("[webhooks]\ntimeout = 0\n"), "corrald.toml:2: webhooks.timeout: must be positive");
  EXPECT_EQ(ErrorOf("[webhooks]\nretry_min = 0\n"), "corrald.toml:2: webhooks.retry_min: must be positive");
  EXPECT_EQ(ErrorOf("[webhooks]\nmax_age = 0\n"), "corrald.toml:2: webhooks.max_age: must be positive");
  EXPECT_EQ(ErrorOf("[webhooks]\nretry_min = 60\nretry_max = 10\n"),
            "corrald.toml:3: webhooks.retry_max (10) is below webhooks.retry_min (60)");
  EXPECT_EQ(ErrorOf("[webhooks]\nurl = \"https://x/\"\n"), "corrald.toml:2: webhooks.url: unknown key");
}

TEST(WebhooksConfigTest, AReloadTakesUrlsAndEventsAndTheRestAtTheNextStart) {
  auto live = ParseConfig("[webhooks]\nurls = [\"https://a/\"]\nsecret_file = \"/s\"\n");
  auto fresh = ParseConfig("[webhooks]\nurls = [\"https://b/\"]\nsecret_file = \"/s\"\nevents = [\"session.ended\"]\n");
  ASSERT_TRUE(live.ok() && fresh.ok());
  std::vector<std::string> later = ApplyReload(*live, *fresh);
  EXPECT_EQ(live->webhooks.urls, (std::vector<std::string>{"https://b/"}));
  EXPECT_EQ(live->webhooks.events, (std::vector<WebhookEventType>{WebhookEventType::kSessionEnded}));
  EXPECT_TRUE(later.empty()) << later.front();
  // A new secret file waits for the next start, and so do the URLs changed with it.
  auto rotated = ParseConfig("[webhooks]\nurls = [\"https://c/\"]\nsecret_file = \"/t\"\n");
  ASSERT_TRUE(rotated.ok());
  later = ApplyReload(*live, *rotated);
  EXPECT_EQ(live->webhooks.urls, (std::vector<std::string>{"https://b/"}));
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].rfind("webhooks", 0), 0u);
}

}  // namespace
}  // namespace corral::supervisor
