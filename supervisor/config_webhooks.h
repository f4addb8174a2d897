// [webhooks] of corrald.toml (supervisor/config.cc hands each key here): where lifecycle events
// go (supervisor/webhooks/). ParseWebhooksKey returns "" or what was expected, which the caller
// prefixes with the file, the line and the key; ValidateWebhooks checks the keys together.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include <toml++/toml.h>

#include "common/status.h"
#include "supervisor/webhooks/webhooks_config.h"

namespace corral::supervisor {

// The keys of [webhooks]: urls, secret_file, events, ca_file, timeout, retry_min, retry_max,
// max_age, keep.
inline constexpr std::string_view kWebhooksKeys[] = {"urls",      "secret_file", "events",  "ca_file", "timeout",
                                                     "retry_min", "retry_max",   "max_age", "keep"};

// One key's value: urls an array of distinct http(s) URLs; events an array of event names
// ("sandbox.stopped", ...); secret_file and ca_file absolute paths; the rest durations in
// seconds (integers).
std::string ParseWebhooksKey(std::string_view key, const toml::node& node, WebhooksConfig& config);

// urls need a secret_file; timeout, retry_min and max_age positive; retry_max at least
// retry_min. `where(key)` is "file:line: " of a key (or "file: ").
Status ValidateWebhooks(const WebhooksConfig& config, const std::function<std::string(std::string_view)>& where);

// Whether a reload changes what only a restart applies (all but urls and events).
bool WebhooksNeedRestart(const WebhooksConfig& live, const WebhooksConfig& fresh);

}  // namespace corral::supervisor
