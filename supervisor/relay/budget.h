// A user's budget and its windows, and the model relay's metering: usage read from the Messages
// API's answers (streamed as server-sent events, or whole) and priced in micro-dollars.
//
// Money is integer micro-dollars (1 USD = 1,000,000) everywhere: the ledger sums exactly. Prices
// are micro-dollars per million tokens (USD 3.75 per MTok = 3,750,000), so a request's cost is
//   (input * in + output * out + cache_write * cw + cache_read * cr) / 1,000,000
// rounded half up, once per request.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace corral::supervisor {

enum class BudgetWindow { kHour, kDay, kWeek, kMonth };

std::string_view WindowName(BudgetWindow window);
StatusOr<BudgetWindow> ParseWindow(std::string_view name);

struct Budget {
  std::optional<int64_t> ai_micro_usd;  // absent: the token allows no model use
  std::optional<int64_t> compute_ms;    // CPU time; absent: not limited
  BudgetWindow window = BudgetWindow::kDay;
  // Windows start here and follow each other; absent: calendar windows in UTC (the hour, the
  // day from 00:00, the week from Monday 00:00, the month from the 1st 00:00).
  std::optional<int64_t> window_start;

  bool operator==(const Budget&) const = default;
};

// The stored form of a budget: the store's encoding of its budget_json columns (sandboxes,
// sessions), used by store_*.cc alone; every other layer holds a Budget.
// {"window": "day", "ai_micro_usd"?: N, "compute_ms"?: N, "window_start"?: N}. Text that does not
// parse, or "{}", is a budget with no amounts (no model use; compute not limited).
std::string BudgetToJson(const Budget& budget);
Budget BudgetFromJson(std::string_view text);

// [start, end) in unix seconds.
struct WindowRange {
  int64_t start = 0;
  int64_t end = 0;
};

// The window of `budget` that holds `now`. With window_start, a month window keeps its day of
// the month (clamped to shorter months: from Jan 31 the next starts Feb 28 or 29).
WindowRange CurrentWindow(const Budget& budget, int64_t now);

// "3.75" (USD) -> 3750000 micro-dollars; at most 6 decimals, not negative.
StatusOr<int64_t> ParseMicroUsd(std::string_view usd);
// 3750000 -> "3.750000"
std::string FormatMicroUsd(int64_t micro_usd);

struct ModelUsage {
  std::string model;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  int64_t cache_creation_input_tokens = 0;
  int64_t cache_read_input_tokens = 0;

  bool empty() const {
    return input_tokens == 0 && output_tokens == 0 && cache_creation_input_tokens == 0 &&
           cache_read_input_tokens == 0;
  }
};

// Micro-dollars per million tokens.
struct ModelPrice {
  int64_t input = 0;
  int64_t output = 0;
  int64_t cache_write = 0;
  int64_t cache_read = 0;
};

// Model id -> price. A dated id ("claude-sonnet-4-5-20250929") takes the entry of the longest
// key that is a prefix of it at a '-' boundary ("claude-sonnet-4-5"); "default" applies when none
// does. No entry: the model has no price and the relay refuses it (nothing goes unmetered).
class PriceTable {
 public:
  void Set(const std::string& model, ModelPrice price) { prices_[model] = price; }
  std::optional<ModelPrice> Find(std::string_view model) const;
  // The key whose entry Find takes for `model` ("default" included), or nullopt. Metrics label
  // a model with this, so that the label's values are the operator's keys and nothing else.
  std::optional<std::string> KeyFor(std::string_view model) const;
  bool empty() const { return prices_.empty(); }
  const std::map<std::string, ModelPrice, std::less<>>& entries() const { return prices_; }

 private:
  std::map<std::string, ModelPrice, std::less<>> prices_;
};

int64_t CostMicroUsd(const ModelPrice& price, const ModelUsage& usage);

// A model call's admission against its user's AI budget for the window (model_relay.h): what
// the ledger holds, and the calls admitted and not yet priced, on every node, with the most each
// may cost (their holds).
struct BudgetState {
  int64_t spent = 0;           // micro-dollars
  int64_t held_calls = 0;
  int64_t held_micro_usd = 0;
};
enum class HoldVerdict {
  kAdmit,     // the call goes ahead and holds its most possible cost until it is priced
  kSpent,     // the window's budget is spent
  kInFlight,  // what is left might not cover the calls in flight and this one at their most: retry
};
// kSpent when spent >= limit; kInFlight when calls are held and spent + held + estimate > limit;
// else kAdmit. A call with none in flight always goes ahead while the budget is not spent.
HoldVerdict DecideHold(const BudgetState& state, int64_t estimate_micro_usd, int64_t limit_micro_usd);

// What a budget (or the model relay's rate) refused or stopped, for metrics.
enum class BudgetRefusal {
  kAi,          // a model call: the AI budget of the window is spent, or the token has none
  kAiInFlight,  // a model call told to retry: what is left might not cover the calls in flight
  kRate,        // a model call above relay.requests_per_minute
  kCompute,     // a sandbox start (or create with start): the compute budget is spent
  kComputeStop, // a running sandbox stopped because its user's compute budget ran out
};
std::string_view BudgetRefusalName(BudgetRefusal kind);  // "ai", "ai_in_flight", "rate", ...

// Counters the API turns into metrics; called on the event loop.
class BudgetObserver {
 public:
  virtual ~BudgetObserver() = default;
  virtual void OnBudgetRefusal(BudgetRefusal kind) = 0;
};

// Reads the usage out of a streamed answer, fed in pieces as they pass (any split): from
// message_start (model, input and cache tokens, the first output count) and each message_delta
// (the output count so far, and input or cache counts when the API sends them). An `error` event
// is kept. An event longer than kMaxEventBytes is skipped, not buffered.
class SseUsageReader {
 public:
  static constexpr size_t kMaxEventBytes = 1 << 20;

  void Feed(std::string_view bytes);
  const ModelUsage& usage() const { return usage_; }
  bool saw_message_start() const { return saw_start_; }
  bool saw_message_stop() const { return saw_stop_; }
  const std::string& error_type() const { return error_type_; }

 private:
  void OnLine(std::string_view line);
  void OnEvent();

  std::string line_;
  bool line_too_long_ = false;
  std::string data_;  // the current event's data lines, joined
  bool data_too_long_ = false;
  ModelUsage usage_;
  bool saw_start_ = false;
  bool saw_stop_ = false;
  std::string error_type_;
};

// The usage of a whole (non-streamed) answer body; an answer without usage gives an empty one.
ModelUsage UsageFromMessage(std::string_view body);

}  // namespace corral::supervisor
