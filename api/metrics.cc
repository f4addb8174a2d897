#include "api/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <variant>

namespace corral::api {

// --- Histogram -----------------------------------------------------------------------------

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  // Defensive: the exposition format needs ascending, distinct, finite bounds (+Inf is implicit).
  std::sort(bounds_.begin(), bounds_.end());
  bounds_.erase(std::unique(bounds_.begin(), bounds_.end()), bounds_.end());
  bounds_.erase(std::remove_if(bounds_.begin(), bounds_.end(), [](double b) { return !std::isfinite(b); }),
                bounds_.end());
  buckets_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  // `le` is inclusive: a value equal to a bound falls in that bound's bucket. NaN lands in +Inf.
  size_t index = bounds_.size();
  if (!std::isnan(value)) {
    index = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  }
  buckets_[index].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  if (std::isfinite(value)) {
    // Two's complement: adding a negative amount as uint64_t wraps, and sum() reads it back signed.
    double micros = std::round(value * 1e6);
    constexpr double kMax = 9.2e18;
    micros = std::clamp(micros, -kMax, kMax);
    sum_micro_.fetch_add(static_cast<uint64_t>(static_cast<int64_t>(micros)), std::memory_order_relaxed);
  }
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += buckets_[i].load(std::memory_order_relaxed);
    out[i] = running;
  }
  return out;
}

double Histogram::sum() const {
  return static_cast<double>(static_cast<int64_t>(sum_micro_.load(std::memory_order_relaxed))) / 1e6;
}

uint64_t Histogram::count() const { return count_.load(std::memory_order_relaxed); }

// --- Family --------------------------------------------------------------------------------

template <typename T>
T& Family<T>::WithLabels(const std::vector<std::string>& values) {
  // A wrong number of values is a programming error; rather than abort the daemon, missing values
  // are empty and extra ones are dropped.
  std::vector<std::string> key = values;
  key.resize(label_names_.size());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = children_.find(key);
  if (it == children_.end()) it = children_.emplace(std::move(key), make_()).first;
  return *it->second;
}

template <typename T>
std::vector<std::pair<std::vector<std::string>, const T*>> Family<T>::Children() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::vector<std::string>, const T*>> out;
  out.reserve(children_.size());
  for (const auto& [labels, child] : children_) out.emplace_back(labels, child.get());
  return out;
}

template class Family<Counter>;
template class Family<Gauge>;

// --- Metrics -------------------------------------------------------------------------------

namespace {

using GaugeReader = std::function<std::vector<std::pair<std::vector<std::string>, double>>()>;

// Prometheus text escaping: backslash and newline always; the double quote too in label values
// (`quote`), not in HELP text.
std::string Escape(const std::string& text, bool quote) {
  std::string out;
  for (char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"' && quote)
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string EscapeHelp(const std::string& text) { return Escape(text, /*quote=*/false); }
std::string EscapeLabelValue(const std::string& text) { return Escape(text, /*quote=*/true); }

// Go's ParseFloat reads what this writes: "+Inf", "-Inf", "NaN", integers without a fraction,
// and the shortest decimal that round-trips otherwise ("0.0005", not "5e-04").
std::string FormatDouble(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto format = (std::fabs(v) >= 1e-6 && std::fabs(v) < 1e15) || v == 0 ? std::chars_format::fixed
                                                                        : std::chars_format::general;
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, format);
  if (ec != std::errc()) return "NaN";
  return std::string(buf, end);
}

// {a="x",b="y"} or "" without labels; `extra` is appended (the histogram's le).
std::string LabelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    out += out.empty() ? "{" : ",";
    out += names[i] + "=\"" + EscapeLabelValue(i < values.size() ? values[i] : "") + "\"";
  }
  if (!extra_name.empty()) {
    out += out.empty() ? "{" : ",";
    out += extra_name + "=\"" + EscapeLabelValue(extra_value) + "\"";
  }
  if (!out.empty()) out += "}";
  return out;
}

}  // namespace

struct Metrics::Entry {
  std::string name;
  std::string help;
  std::string type;  // "counter", "gauge", "histogram"
  std::vector<std::string> label_names;
  std::variant<std::unique_ptr<Counter>, std::unique_ptr<Gauge>, std::unique_ptr<Histogram>,
               std::unique_ptr<Family<Counter>>, std::unique_ptr<Family<Gauge>>, GaugeReader>
      value;
  uint64_t per_unit = 1;  // a scaled counter family: values are divided by this

  std::string CounterValue(uint64_t v) const {
    // Division (not a multiplication by 1e-6) gives the double nearest the exact quotient, which
    // FormatDouble prints as its shortest decimal: 21000 micro-dollars is "0.021".
    return per_unit <= 1 ? std::to_string(v) : FormatDouble(static_cast<double>(v) / static_cast<double>(per_unit));
  }

  void Render(std::string& out) const;
};

void Metrics::Entry::Render(std::string& out) const {
  out += "# HELP " + name + " " + EscapeHelp(help) + "\n";
  out += "# TYPE " + name + " " + type + "\n";
  if (auto* c = std::get_if<std::unique_ptr<Counter>>(&value)) {
    out += name + " " + std::to_string((*c)->value()) + "\n";
  } else if (auto* g = std::get_if<std::unique_ptr<Gauge>>(&value)) {
    out += name + " " + std::to_string((*g)->value()) + "\n";
  } else if (auto* h = std::get_if<std::unique_ptr<Histogram>>(&value)) {
    const Histogram& hist = **h;
    // One snapshot, so that the +Inf bucket and _count agree even while others observe.
    std::vector<uint64_t> cumulative = hist.CumulativeCounts();
    const auto& bounds = hist.upper_bounds();
    for (size_t i = 0; i < bounds.size(); ++i) {
      out += name + "_bucket" + LabelSet({}, {}, "le", FormatDouble(bounds[i])) + " " +
             std::to_string(cumulative[i]) + "\n";
    }
    out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cumulative.back()) + "\n";
    out += name + "_sum " + FormatDouble(hist.sum()) + "\n";
    out += name + "_count " + std::to_string(cumulative.back()) + "\n";
  } else if (auto* fc = std::get_if<std::unique_ptr<Family<Counter>>>(&value)) {
    for (const auto& [labels, child] : (*fc)->Children()) {
      out += name + LabelSet(label_names, labels) + " " + CounterValue(child->value()) + "\n";
    }
  } else if (auto* fg = std::get_if<std::unique_ptr<Family<Gauge>>>(&value)) {
    for (const auto& [labels, child] : (*fg)->Children()) {
      out += name + LabelSet(label_names, labels) + " " + std::to_string(child->value()) + "\n";
    }
  } else if (auto* read = std::get_if<GaugeReader>(&value)) {
    if (*read) {
      for (const auto& [labels, v] : (*read)()) {
        out += name + LabelSet(label_names, labels) + " " + FormatDouble(v) + "\n";
      }
    }
  }
}

Metrics::Metrics() = default;
Metrics::~Metrics() = default;

template <typename T>
T& Metrics::Add(const std::string& name, const std::string& help, const char* type,
                std::vector<std::string> label_names, std::unique_ptr<T> value) {
  T& ref = *value;
  entries_.push_back(std::make_unique<Entry>(Entry{name, help, type, std::move(label_names), std::move(value)}));
  return ref;
}

Counter& Metrics::AddCounter(const std::string& name, const std::string& help) {
  return Add(name, help, "counter", {}, std::make_unique<Counter>());
}

Gauge& Metrics::AddGauge(const std::string& name, const std::string& help) {
  return Add(name, help, "gauge", {}, std::make_unique<Gauge>());
}

Histogram& Metrics::AddHistogram(const std::string& name, const std::string& help,
                                 std::vector<double> bounds) {
  return Add(name, help, "histogram", {}, std::make_unique<Histogram>(std::move(bounds)));
}

Family<Counter>& Metrics::AddCounterFamily(const std::string& name, const std::string& help,
                                           std::vector<std::string> label_names) {
  auto family = std::make_unique<Family<Counter>>(label_names, [] { return std::make_unique<Counter>(); });
  return Add(name, help, "counter", std::move(label_names), std::move(family));
}

Family<Counter>& Metrics::AddScaledCounterFamily(const std::string& name, const std::string& help,
                                                 std::vector<std::string> label_names, uint64_t per_unit) {
  Family<Counter>& family = AddCounterFamily(name, help, std::move(label_names));
  entries_.back()->per_unit = per_unit;
  return family;
}

Family<Gauge>& Metrics::AddGaugeFamily(const std::string& name, const std::string& help,
                                       std::vector<std::string> label_names) {
  auto family = std::make_unique<Family<Gauge>>(label_names, [] { return std::make_unique<Gauge>(); });
  return Add(name, help, "gauge", std::move(label_names), std::move(family));
}

void Metrics::AddGaugeCallback(const std::string& name, const std::string& help,
                               std::vector<std::string> label_names, GaugeReader read) {
  entries_.push_back(
      std::make_unique<Entry>(Entry{name, help, "gauge", std::move(label_names), std::move(read)}));
}

void Metrics::AddCounterCallback(const std::string& name, const std::string& help,
                                 std::vector<std::string> label_names, GaugeReader read) {
  entries_.push_back(
      std::make_unique<Entry>(Entry{name, help, "counter", std::move(label_names), std::move(read)}));
}

std::string Metrics::Render() const {
  std::string out;
  for (const auto& entry : entries_) entry->Render(out);
  return out;
}

}  // namespace corral::api
