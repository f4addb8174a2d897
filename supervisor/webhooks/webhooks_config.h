// [webhooks] of corrald.toml (supervisor/config_webhooks.h parses it): where the lifecycle
// events go (webhook_outbox.h records them, webhook_deliverer.h sends them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "supervisor/webhooks/webhook_event.h"

namespace corral::supervisor {

struct WebhooksConfig {
  std::vector<std::string> urls;           // http:// or https://; empty (the default): no webhooks
  std::string secret_file;                 // root's alone, at least 32 bytes; required with urls
  std::vector<WebhookEventType> events;    // which events; empty: all of them
  std::string ca_file;                     // CAs trusted besides the system's (tests, a private CA)
  uint64_t timeout_s = 10;                 // one delivery: connect, send, answer
  uint64_t retry_min_s = 10;               // the first retry's delay; each next one doubles
  uint64_t retry_max_s = 3600;             // up to this
  uint64_t max_age_s = 3 * 24 * 3600;      // not delivered this long after the event: given up
  uint64_t keep_s = 7 * 24 * 3600;         // delivered and given-up rows are pruned after this
  std::string secret;                      // the file's contents (corrald reads it; never parsed here)
};

}  // namespace corral::supervisor
