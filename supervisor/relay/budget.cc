#include "supervisor/relay/budget.h"

#include <time.h>

#include <cerrno>
#include <iterator>

#include <nlohmann/json.hpp>

#include "common/enum_names.h"

namespace corral::supervisor {
namespace {

constexpr int64_t kHour = 3600;
constexpr int64_t kDay = 24 * kHour;
constexpr int64_t kWeek = 7 * kDay;

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0); }

int DaysInMonth(int year, int month /* 0-11 */) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  return month == 1 && leap ? 29 : kDays[month];
}

struct tm Utc(int64_t t) {
  struct tm out = {};
  const time_t tt = static_cast<time_t>(t);
  gmtime_r(&tt, &out);
  return out;
}

// `base` moved by `months` calendar months, its day clamped to the target month's length.
int64_t AddMonths(int64_t base, int64_t months) {
  struct tm tm = Utc(base);
  int64_t month_index = static_cast<int64_t>(tm.tm_year) * 12 + tm.tm_mon + months;
  tm.tm_year = static_cast<int>(FloorDiv(month_index, 12));
  tm.tm_mon = static_cast<int>(month_index - static_cast<int64_t>(tm.tm_year) * 12);
  const int days = DaysInMonth(tm.tm_year + 1900, tm.tm_mon);
  if (tm.tm_mday > days) tm.tm_mday = days;
  return static_cast<int64_t>(timegm(&tm));
}

int64_t MonthIndex(int64_t t) {
  struct tm tm = Utc(t);
  return static_cast<int64_t>(tm.tm_year) * 12 + tm.tm_mon;
}

}  // namespace

std::string_view WindowName(BudgetWindow window) {
  static constexpr std::string_view kNames[] = {"hour", "day", "week", "month"};
  static_assert(std::size(kNames) == static_cast<size_t>(BudgetWindow::kMonth) + 1);
  return EnumName(window, kNames, "day");
}

StatusOr<BudgetWindow> ParseWindow(std::string_view name) {
  if (name == "hour") return BudgetWindow::kHour;
  if (name == "day") return BudgetWindow::kDay;
  if (name == "week") return BudgetWindow::kWeek;
  if (name == "month") return BudgetWindow::kMonth;
  return Status::Error("budget window: expected hour, day, week or month, not \"" + std::string(name) + "\"",
                       EINVAL);
}

WindowRange CurrentWindow(const Budget& budget, int64_t now) {
  if (budget.window == BudgetWindow::kMonth) {
    // The month that starts at the anchor's day and time of day (the 1st, 00:00 UTC without one).
    int64_t anchor = budget.window_start.value_or(0);
    int64_t months = MonthIndex(now) - MonthIndex(anchor);
    int64_t start = AddMonths(anchor, months);
    if (start > now) start = AddMonths(anchor, --months);
    return {start, AddMonths(anchor, months + 1)};
  }
  const int64_t length = budget.window == BudgetWindow::kHour ? kHour : budget.window == BudgetWindow::kDay ? kDay : kWeek;
  // Calendar weeks start on Monday: 1970-01-05 was one.
  const int64_t anchor = budget.window_start.value_or(budget.window == BudgetWindow::kWeek ? 4 * kDay : 0);
  const int64_t start = anchor + FloorDiv(now - anchor, length) * length;
  return {start, start + length};
}

StatusOr<int64_t> ParseMicroUsd(std::string_view usd) {
  auto bad = [&] {
    return Status::Error("expected an amount in USD like \"3.75\" (at most 6 decimals), not \"" + std::string(usd) + "\"",
                         EINVAL);
  };
  if (usd.empty()) return bad();
  int64_t whole = 0, fraction = 0;
  int decimals = -1;  // -1: before the point
  for (char c : usd) {
    if (c == '.') {
      if (decimals >= 0) return bad();
      decimals = 0;
      continue;
    }
    if (c < '0' || c > '9') return bad();
    if (decimals < 0) {
      if (whole > (INT64_MAX / 1000000 - 9) / 10) return bad();
      whole = whole * 10 + (c - '0');
    } else {
      if (++decimals > 6) return bad();
      fraction = fraction * 10 + (c - '0');
    }
  }
  if (decimals == 0 || usd.front() == '.') return bad();
  for (int i = decimals < 0 ? 0 : decimals; i < 6; ++i) fraction *= 10;
  return whole * 1000000 + fraction;
}

std::string FormatMicroUsd(int64_t micro_usd) {
  const bool negative = micro_usd < 0;
  const uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(micro_usd) : static_cast<uint64_t>(micro_usd);
  std::string fraction = std::to_string(magnitude % 1000000);
  fraction.insert(0, 6 - fraction.size(), '0');
  return (negative ? "-" : "") + std::to_string(magnitude / 1000000) + "." + fraction;
}

std::optional<std::string> PriceTable::KeyFor(std::string_view model) const {
  if (auto it = prices_.find(model); it != prices_.end()) return it->first;
  // The longest key that the id extends at a '-'.
  const std::string* best = nullptr;
  for (const auto& [key, price] : prices_) {
    if (key.size() < model.size() && key.size() > (best ? best->size() : 0) && model.compare(0, key.size(), key) == 0 &&
        model[key.size()] == '-') {
      best = &key;
    }
  }
  if (best) return *best;
  if (prices_.count("default")) return std::string("default");
  return std::nullopt;
}

std::optional<ModelPrice> PriceTable::Find(std::string_view model) const {
  std::optional<std::string> key = KeyFor(model);
  if (!key) return std::nullopt;
  return prices_.find(*key)->second;
}

std::string_view BudgetRefusalName(BudgetRefusal kind) {
  static constexpr std::string_view kNames[] = {"ai", "ai_in_flight", "rate", "compute", "compute_stop"};
  static_assert(std::size(kNames) == static_cast<size_t>(BudgetRefusal::kComputeStop) + 1);
  return EnumName(kind, kNames);
}

HoldVerdict DecideHold(const BudgetState& state, int64_t estimate_micro_usd, int64_t limit_micro_usd) {
  if (state.spent >= limit_micro_usd) return HoldVerdict::kSpent;
  if (state.held_calls > 0 && state.spent + state.held_micro_usd + estimate_micro_usd > limit_micro_usd) {
    return HoldVerdict::kInFlight;
  }
  return HoldVerdict::kAdmit;
}

int64_t CostMicroUsd(const ModelPrice& price, const ModelUsage& usage) {
  // Tokens are at most a few million and prices at most a few hundred million: the products fit
  // easily; the sum is kept in 128 bits regardless.
  __int128 total = static_cast<__int128>(usage.input_tokens) * price.input +
                   static_cast<__int128>(usage.output_tokens) * price.output +
                   static_cast<__int128>(usage.cache_creation_input_tokens) * price.cache_write +
                   static_cast<__int128>(usage.cache_read_input_tokens) * price.cache_read;
  return static_cast<int64_t>((total + 500000) / 1000000);
}

// ---- server-sent events ----

void SseUsageReader::Feed(std::string_view bytes) {
  while (!bytes.empty()) {
    size_t newline = bytes.find('\n');
    std::string_view piece = bytes.substr(0, newline);
    if (!line_too_long_) {
      if (line_.size() + piece.size() > kMaxEventBytes) {
        line_too_long_ = true;
        line_.clear();
      } else {
        line_.append(piece);
      }
    }
    if (newline == std::string_view::npos) return;
    bytes.remove_prefix(newline + 1);
    std::string_view line = line_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_too_long_) {
      data_too_long_ = true;  // the event lost a line: skip it whole
    } else {
      OnLine(line);
    }
    line_.clear();
    line_too_long_ = false;
  }
}

void SseUsageReader::OnLine(std::string_view line) {
  if (line.empty()) {
    OnEvent();
    return;
  }
  if (line.substr(0, 5) != "data:") return;  // event:, id:, retry:, comments: the data says it all
  std::string_view value = line.substr(5);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (data_too_long_ || data_.size() + value.size() + 1 > kMaxEventBytes) {
    data_too_long_ = true;
    data_.clear();
    return;
  }
  if (!data_.empty()) data_.push_back('\n');
  data_.append(value);
}

void SseUsageReader::OnEvent() {
  std::string data = std::move(data_);
  const bool skipped = data_too_long_;
  data_.clear();
  data_too_long_ = false;
  if (skipped || data.empty()) return;
  nlohmann::json event = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (!event.is_object()) return;
  const std::string type = event.value("type", "");
  auto read_usage = [&](const nlohmann::json& usage) {
    if (!usage.is_object()) return;
    auto take = [&](const char* key, int64_t& into) {
      auto it = usage.find(key);
      if (it != usage.end() && it->is_number_integer() && it->get<int64_t>() >= 0) into = it->get<int64_t>();
    };
    take("input_tokens", usage_.input_tokens);
    take("output_tokens", usage_.output_tokens);
    take("cache_creation_input_tokens", usage_.cache_creation_input_tokens);
    take("cache_read_input_tokens", usage_.cache_read_input_tokens);
  };
  if (type == "message_start") {
    saw_start_ = true;
    auto message = event.find("message");
    if (message != event.end() && message->is_object()) {
      if (auto model = message->find("model"); model != message->end() && model->is_string()) {
        usage_.model = model->get<std::string>();
      }
      if (auto usage = message->find("usage"); usage != message->end()) read_usage(*usage);
    }
  } else if (type == "message_delta") {
    // Counts here are cumulative for the message: they replace what came before.
    if (auto usage = event.find("usage"); usage != event.end()) read_usage(*usage);
  } else if (type == "message_stop") {
    saw_stop_ = true;
  } else if (type == "error") {
    auto error = event.find("error");
    error_type_ = error != event.end() && error->is_object() ? error->value("type", "error") : "error";
  }
}

ModelUsage UsageFromMessage(std::string_view body) {
  ModelUsage usage;
  nlohmann::json message = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!message.is_object()) return usage;
  if (auto model = message.find("model"); model != message.end() && model->is_string()) {
    usage.model = model->get<std::string>();
  }
  auto counts = message.find("usage");
  if (counts == message.end() || !counts->is_object()) return usage;
  auto take = [&](const char* key, int64_t& into) {
    auto it = counts->find(key);
    if (it != counts->end() && it->is_number_integer() && it->get<int64_t>() >= 0) into = it->get<int64_t>();
  };
  take("input_tokens", usage.input_tokens);
  take("output_tokens", usage.output_tokens);
  take("cache_creation_input_tokens", usage.cache_creation_input_tokens);
  take("cache_read_input_tokens", usage.cache_read_input_tokens);
  return usage;
}

std::string BudgetToJson(const Budget& budget) {
  nlohmann::json j = {{"window", WindowName(budget.window)}};
  if (budget.ai_micro_usd) j["ai_micro_usd"] = *budget.ai_micro_usd;
  if (budget.compute_ms) j["compute_ms"] = *budget.compute_ms;
  if (budget.window_start) j["window_start"] = *budget.window_start;
  return j.dump();
}

Budget BudgetFromJson(std::string_view text) {
  Budget budget;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return budget;
  auto number = [&](const char* key) -> std::optional<int64_t> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<int64_t>();
  };
  budget.ai_micro_usd = number("ai_micro_usd");
  budget.compute_ms = number("compute_ms");
  budget.window_start = number("window_start");
  if (j.contains("window") && j["window"].is_string()) {
    auto window = ParseWindow(j["window"].get<std::string>());
    if (window.ok()) budget.window = *window;
  }
  return budget;
}

}  // namespace corral::supervisor
