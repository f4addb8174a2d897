// What a webhook delivery is made of, as pure functions (no I/O): the JSON body of an event, its
// signature, the retry schedule and the receiver's URL. docs/PROTOCOL.md "Webhooks" is the
// contract these implement.
//
//   body       {"id", "type", "created_at", "node", "iss", "sub", "sandbox_id", "data": {...}}:
//              compact JSON, keys in this order; its bytes are kept in the outbox and sent
//              unchanged on every attempt
//   signature  Corral-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>, t
//              the attempt's time (Stripe's scheme): a receiver checks the MAC and that t is
//              recent, so a body changed or a delivery replayed later fails its check
//   retries    attempt n (n >= 1) failed: the next one after min(retry_max, retry_min * 2^(n-1))
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "supervisor/webhooks/webhook_event.h"

namespace corral::supervisor {

// The body of `event` with id `id`, recorded by node `node`.
std::string WebhookBody(const WebhookEvent& event, const std::string& id, const std::string& node);

// The event's id: a new "wh_..." for an event that happens once; for one with a once_key,
// "wh_" and 20 characters (ids.h's shape) of a SHA-256 of it (the same key, the same id, on every node).
std::string WebhookEventId(const WebhookEvent& event);

// "t=<timestamp>,v1=<hex>" over "<timestamp>.<body>".
std::string WebhookSignature(std::string_view secret, int64_t timestamp, std::string_view body);

// A receiver's check (the SDK's verifyWebhook does the same): the header parses, one of its v1
// MACs matches, and |now - t| <= tolerance_s. EPERM when the MAC does not match, ETIME when the
// timestamp is out of the window, EINVAL when the header does not parse.
Status VerifyWebhookSignature(std::string_view secret, std::string_view header, std::string_view body, int64_t now,
                              int64_t tolerance_s);

// Seconds from a failed attempt (the `attempts`-th, >= 1) to the next.
int64_t WebhookRetryDelay(int64_t attempts, int64_t retry_min_s, int64_t retry_max_s);

// A receiver's URL: http://host[:port][/path] or https://...; no user info, no fragment.
struct WebhookUrl {
  bool tls = false;
  std::string host;    // a name, an IPv4 address or an IPv6 one (without brackets)
  std::string port;    // "80"/"443" when not given
  std::string target;  // the path and query; "/" when not given
};
StatusOr<WebhookUrl> ParseWebhookUrl(std::string_view url);

}  // namespace corral::supervisor
