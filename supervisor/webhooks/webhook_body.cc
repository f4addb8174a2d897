#include "supervisor/webhooks/webhook_body.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/hex.h"
#include "supervisor/ids.h"
#include "supervisor/relay/budget.h"

namespace corral::supervisor {

namespace {

using Json = nlohmann::ordered_json;

constexpr std::pair<WebhookEventType, std::string_view> kEventNames[] = {
    {WebhookEventType::kSandboxCreated, "sandbox.created"},
    {WebhookEventType::kSandboxStarted, "sandbox.started"},
    {WebhookEventType::kSandboxStopped, "sandbox.stopped"},
    {WebhookEventType::kSandboxDestroyed, "sandbox.destroyed"},
    {WebhookEventType::kSessionEnded, "session.ended"},
    {WebhookEventType::kExecutionFinished, "execution.finished"},
    {WebhookEventType::kBudgetExhausted, "budget.exhausted"},
};

std::string HmacHex(std::string_view secret, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  // A NULL key means "keep the previous key" to OpenSSL; an empty secret is never configured,
  // but a valid pointer is passed in any case.
  static const unsigned char kEmpty = 0;
  const unsigned char* key = secret.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(secret.data());
  if (HMAC(EVP_sha256(), key, static_cast<int>(secret.size()), reinterpret_cast<const unsigned char*>(data.data()),
           data.size(), mac, &size) == nullptr) {
    return "";
  }
  return HexLower(std::span<const uint8_t>(mac, size));
}

Json UsageJson(const WebhookUsage& usage) {
  return Json{{"calls", usage.calls},
              {"input_tokens", usage.input_tokens},
              {"output_tokens", usage.output_tokens},
              {"cache_creation_input_tokens", usage.cache_creation_input_tokens},
              {"cache_read_input_tokens", usage.cache_read_input_tokens}};
}

Json DataOf(const WebhookEvent& event) {
  switch (event.type) {
    case WebhookEventType::kSandboxCreated:
      return Json{{"source", event.source}};
    case WebhookEventType::kSandboxStopped:
      return Json{{"reason", std::string(StopReasonName(event.reason))}};
    case WebhookEventType::kSessionEnded: {
      const SessionEnd end = event.session.value_or(SessionEnd{});
      return Json{{"session_id", end.session_id}, {"state", end.state},     {"outcome", end.outcome},
                  {"turns", end.turns},           {"cost_usd", FormatMicroUsd(end.cost_micro_usd)},
                  {"usage", UsageJson(end.usage)}};
    }
    case WebhookEventType::kExecutionFinished: {
      const ExecutionEnd end = event.execution.value_or(ExecutionEnd{});
      return Json{{"execution_id", end.execution_id}, {"state", end.state},
                  {"outcome", end.outcome},           {"session_id", end.session_id},
                  {"error", end.error},               {"base_commit", end.base_commit},
                  {"head_commit", end.head_commit},   {"files_changed", end.files_changed},
                  {"cost_usd", FormatMicroUsd(end.cost_micro_usd)}};
    }
    case WebhookEventType::kBudgetExhausted: {
      const BudgetSpent spent = event.budget.value_or(BudgetSpent{});
      Json data{{"kind", spent.kind},
                {"window", spent.window},
                {"window_start", spent.window_start},
                {"window_end", spent.window_end}};
      if (spent.kind == "ai") {
        data["limit_usd"] = FormatMicroUsd(spent.limit);
        data["spent_usd"] = FormatMicroUsd(spent.spent);
      } else {
        data["limit_cpu_ms"] = spent.limit;
        data["spent_cpu_ms"] = spent.spent;
      }
      return data;
    }
    case WebhookEventType::kSandboxStarted:
    case WebhookEventType::kSandboxDestroyed:
      break;
  }
  return Json::object();
}

}  // namespace

std::string_view WebhookEventName(WebhookEventType type) {
  for (const auto& [known, name] : kEventNames) {
    if (known == type) return name;
  }
  return "unknown";
}

std::optional<WebhookEventType> WebhookEventOfName(std::string_view name) {
  for (const auto& [type, known] : kEventNames) {
    if (known == name) return type;
  }
  return std::nullopt;
}

std::string_view StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kRequest: return "request";
    case StopReason::kIdle: return "idle";
    case StopReason::kComputeBudget: return "compute_budget";
    case StopReason::kShutdown: return "shutdown";
    case StopReason::kNodeFailure: return "node_failure";
  }
  return "request";
}

std::string WebhookBody(const WebhookEvent& event, const std::string& id, const std::string& node) {
  Json body{{"id", id},
            {"type", std::string(WebhookEventName(event.type))},
            {"created_at", event.at},
            {"node", node},
            {"iss", event.iss},
            {"sub", event.sub},
            {"sandbox_id", event.sandbox_id},
            {"data", DataOf(event)}};
  // Invalid UTF-8 (none is expected: ids and names are checked at the API) is replaced, not thrown.
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

WebhookEvent BudgetExhaustedEvent(const std::string& iss, const std::string& sub, const std::string& sandbox_id,
                                  const std::string& kind, const Budget& budget, int64_t limit, int64_t spent,
                                  int64_t now) {
  const WindowRange window = CurrentWindow(budget, now);
  WebhookEvent event;
  event.type = WebhookEventType::kBudgetExhausted;
  event.at = now;
  event.iss = iss;
  event.sub = sub;
  event.sandbox_id = sandbox_id;
  event.budget = BudgetSpent{kind, std::string(WindowName(budget.window)), window.start, window.end, limit, spent};
  // NUL never appears in an issuer's name or a subject: the parts cannot run into each other.
  event.once_key = "budget.exhausted" + std::string(1, '\0') + kind + std::string(1, '\0') + iss +
                   std::string(1, '\0') + sub + std::string(1, '\0') + std::to_string(window.start);
  return event;
}

std::string WebhookEventId(const WebhookEvent& event) {
  if (event.once_key.empty()) return NewId("wh");
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(event.once_key.data()), event.once_key.size(), digest);
  // The ids' alphabet (ids.h): base32, 5 bits a character.
  static const char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz234567";
  std::string id = "wh_";
  for (int i = 0; i < 20; ++i) {
    const int bit = i * 5;
    const unsigned value = ((digest[bit / 8] << 8) | digest[bit / 8 + 1]) >> (11 - bit % 8);
    id.push_back(kAlphabet[value & 31]);
  }
  return id;
}

std::string WebhookSignature(std::string_view secret, int64_t timestamp, std::string_view body) {
  const std::string t = std::to_string(timestamp);
  std::string signed_text = t + ".";
  signed_text.append(body);
  return "t=" + t + ",v1=" + HmacHex(secret, signed_text);
}

Status VerifyWebhookSignature(std::string_view secret, std::string_view header, std::string_view body, int64_t now,
                              int64_t tolerance_s) {
  std::optional<int64_t> t;
  std::vector<std::string_view> macs;
  size_t at = 0;
  while (at <= header.size()) {
    size_t comma = header.find(',', at);
    if (comma == std::string_view::npos) comma = header.size();
    std::string_view part = header.substr(at, comma - at);
    at = comma + 1;
    if (part.rfind("t=", 0) == 0) {
      const std::string digits(part.substr(2));
      char* end = nullptr;
      errno = 0;
      const long long value = strtoll(digits.c_str(), &end, 10);
      if (digits.empty() || *end != '\0' || errno != 0) return Status::Error("signature: bad t", EINVAL);
      t = value;
    } else if (part.rfind("v1=", 0) == 0) {
      macs.push_back(part.substr(3));
    }
  }
  if (!t || macs.empty()) return Status::Error("signature: no t= or no v1=", EINVAL);
  const std::string expected = WebhookSignature(secret, *t, body).substr(("t=" + std::to_string(*t) + ",v1=").size());
  bool matched = false;
  for (std::string_view mac : macs) {
    matched = matched || (mac.size() == expected.size() && CRYPTO_memcmp(mac.data(), expected.data(), mac.size()) == 0);
  }
  if (!matched) return Status::Error("signature: no v1 MAC matches the body", EPERM);
  if (std::llabs(now - *t) > tolerance_s) return Status::Error("signature: the timestamp is out of the window", ETIME);
  return Status();
}

int64_t WebhookRetryDelay(int64_t attempts, int64_t retry_min_s, int64_t retry_max_s) {
  int64_t delay = retry_min_s;
  for (int64_t i = 1; i < attempts && delay < retry_max_s; ++i) delay *= 2;
  return std::min(delay, retry_max_s);
}

StatusOr<WebhookUrl> ParseWebhookUrl(std::string_view url) {
  WebhookUrl out;
  std::string_view rest;
  if (url.rfind("https://", 0) == 0) {
    out.tls = true;
    rest = url.substr(8);
  } else if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else {
    return Status::Error("expected an http:// or https:// URL", EINVAL);
  }
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return Status::Error("a URL holds no spaces or control characters", EINVAL);
    }
  }
  if (url.find('#') != std::string_view::npos) return Status::Error("a webhook URL has no #fragment", EINVAL);
  const size_t slash = rest.find_first_of("/?");
  std::string_view authority = rest.substr(0, slash);
  out.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (!out.target.empty() && out.target[0] == '?') out.target = "/" + out.target;
  if (authority.find('@') != std::string_view::npos) {
    return Status::Error("a webhook URL has no user:password@", EINVAL);
  }
  std::string_view port;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) return Status::Error("an IPv6 address needs its ]", EINVAL);
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return Status::Error("expected :port after the ]", EINVAL);
      port = after.substr(1);
    }
  } else {
    const size_t colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (out.host.empty()) return Status::Error("a webhook URL needs a host", EINVAL);
  if (port.empty()) {
    out.port = out.tls ? "443" : "80";
  } else {
    if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos ||
        std::stoul(std::string(port)) == 0 || std::stoul(std::string(port)) > 65535) {
      return Status::Error("expected a port, 1 to 65535", EINVAL);
    }
    out.port = std::string(port);
  }
  return out;
}

}  // namespace corral::supervisor
