#include "supervisor/config_webhooks.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "supervisor/webhooks/webhook_body.h"

namespace corral::supervisor {

namespace {

std::optional<std::vector<std::string>> Strings(const toml::node& node) {
  const auto* array = node.as_array();
  if (array == nullptr) return std::nullopt;
  std::vector<std::string> out;
  for (const toml::node& element : *array) {
    const auto* s = element.as_string();
    if (s == nullptr) return std::nullopt;
    out.push_back(s->get());
  }
  return out;
}

std::string Seconds(const toml::node& node, uint64_t& out) {
  const auto* integer = node.as_integer();
  if (integer == nullptr || integer->get() < 0) return "expected a duration in seconds (an integer >= 0)";
  out = static_cast<uint64_t>(integer->get());
  return "";
}

std::string AbsolutePath(const toml::node& node, std::string& out) {
  const auto* s = node.as_string();
  if (s == nullptr || (!s->get().empty() && s->get()[0] != '/') || s->get().find('\0') != std::string::npos) {
    return "expected an absolute path";
  }
  out = s->get();
  return "";
}

std::string Urls(const toml::node& node, std::vector<std::string>& out) {
  const char* expected = "expected an array of http:// or https:// URLs";
  auto urls = Strings(node);
  if (!urls) return expected;
  for (size_t i = 0; i < urls->size(); ++i) {
    const std::string& url = (*urls)[i];
    auto parsed = ParseWebhookUrl(url);
    if (!parsed.ok()) return std::string(expected) + ": \"" + url + "\": " + parsed.status().message();
    if (std::find(urls->begin(), urls->begin() + static_cast<std::ptrdiff_t>(i), url) !=
        urls->begin() + static_cast<std::ptrdiff_t>(i)) {
      return "\"" + url + "\" is named twice";
    }
  }
  out = std::move(*urls);
  return "";
}

std::string Events(const toml::node& node, std::vector<WebhookEventType>& out) {
  std::string known;
  for (WebhookEventType type : kAllWebhookEventTypes) {
    known += (known.empty() ? "" : ", ") + std::string(WebhookEventName(type));
  }
  const std::string expected = "expected an array of event types (" + known + ")";
  auto names = Strings(node);
  if (!names) return expected;
  std::vector<WebhookEventType> events;
  for (const std::string& name : *names) {
    auto type = WebhookEventOfName(name);
    if (!type) return "\"" + name + "\" is no event type; " + expected;
    if (std::find(events.begin(), events.end(), *type) == events.end()) events.push_back(*type);
  }
  out = std::move(events);
  return "";
}

}  // namespace

std::string ParseWebhooksKey(std::string_view key, const toml::node& node, WebhooksConfig& config) {
  if (key == "urls") return Urls(node, config.urls);
  if (key == "secret_file") return AbsolutePath(node, config.secret_file);
  if (key == "events") return Events(node, config.events);
  if (key == "ca_file") return AbsolutePath(node, config.ca_file);
  if (key == "timeout") return Seconds(node, config.timeout_s);
  if (key == "retry_min") return Seconds(node, config.retry_min_s);
  if (key == "retry_max") return Seconds(node, config.retry_max_s);
  if (key == "max_age") return Seconds(node, config.max_age_s);
  if (key == "keep") return Seconds(node, config.keep_s);
  return "unknown key";
}

Status ValidateWebhooks(const WebhooksConfig& c, const std::function<std::string(std::string_view)>& where) {
  if (!c.urls.empty() && c.secret_file.empty()) {
    return Status::Error(where("webhooks.urls") + "webhooks.urls needs webhooks.secret_file (the key that signs)");
  }
  for (const auto& [key, value] : {std::pair<std::string_view, uint64_t>{"webhooks.timeout", c.timeout_s},
                                   {"webhooks.retry_min", c.retry_min_s},
                                   {"webhooks.max_age", c.max_age_s}}) {
    if (value == 0) return Status::Error(where(key) + std::string(key) + ": must be positive");
  }
  if (c.retry_max_s < c.retry_min_s) {
    return Status::Error(where("webhooks.retry_max") + "webhooks.retry_max (" + std::to_string(c.retry_max_s) +
                         ") is below webhooks.retry_min (" + std::to_string(c.retry_min_s) + ")");
  }
  return Status();
}

bool WebhooksNeedRestart(const WebhooksConfig& live, const WebhooksConfig& fresh) {
  return live.secret_file != fresh.secret_file || live.ca_file != fresh.ca_file || live.timeout_s != fresh.timeout_s ||
         live.retry_min_s != fresh.retry_min_s || live.retry_max_s != fresh.retry_max_s ||
         live.max_age_s != fresh.max_age_s || live.keep_s != fresh.keep_s ||
         live.urls.empty() != fresh.urls.empty();
}

}  // namespace corral::supervisor
