// Metrics in the Prometheus text exposition format (version 0.0.4), served at GET /metrics.
//
//   Metrics m;
//   Counter& auth_failures = m.AddCounter("corral_auth_failures_total", "Requests whose token did not verify");
//   auth_failures.Increment();
//   Histogram& latency = m.AddHistogram("corral_http_request_duration_seconds", "...", {0.001, 0.01, 0.1, 1});
//   latency.Observe(0.004);
//   m.Render()  ->  "# HELP ...\n# TYPE ... counter\ncorral_auth_failures_total 1\n..."
//
// Labelled families: AddCounter("corral_commands_total", "...", {"outcome"}) then
// counter.WithLabels({"exited"}).Increment(). Label values are escaped as the format requires.
// Gauges may instead be computed at render time (AddGaugeCallback), e.g. sandboxes by state.
// A counter kept in whole fractions of its unit (micro-dollars) is rendered in its unit
// (AddScaledCounterFamily: corral_model_cost_usd_total counts micro-dollars and shows dollars).
// Thread-safe: values are atomics; registration happens at start, before threads use them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace corral::api {

class Counter {
 public:
  void Increment(uint64_t by = 1) { value_.fetch_add(by, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

class Gauge {
 public:
  void Set(int64_t v) { value_.store(v, std::memory_order_relaxed); }
  void Add(int64_t by) { value_.fetch_add(by, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // sorted ascending; +Inf is implicit
  void Observe(double value);
  // For Render and tests: cumulative bucket counts (one per bound, then +Inf), sum, count.
  std::vector<uint64_t> CumulativeCounts() const;
  double sum() const;
  uint64_t count() const;
  const std::vector<double>& upper_bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // non-cumulative, bounds_.size() + 1
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_micro_{0};  // sum in millionths, so an atomic integer can hold it
};

// A family of one metric type with label names; WithLabels creates the child on first use.
template <typename T>
class Family {
 public:
  explicit Family(std::vector<std::string> label_names, std::function<std::unique_ptr<T>()> make)
      : label_names_(std::move(label_names)), make_(std::move(make)) {}
  T& WithLabels(const std::vector<std::string>& values);
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Snapshot of (label values, child) pairs in label order, for rendering.
  std::vector<std::pair<std::vector<std::string>, const T*>> Children() const;

 private:
  std::vector<std::string> label_names_;
  std::function<std::unique_ptr<T>()> make_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> children_;
};

class Metrics {
 public:
  Metrics();
  ~Metrics();  // out of line: Entry is complete only in metrics.cc
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  Counter& AddCounter(const std::string& name, const std::string& help);
  Gauge& AddGauge(const std::string& name, const std::string& help);
  Histogram& AddHistogram(const std::string& name, const std::string& help, std::vector<double> bounds);
  Family<Counter>& AddCounterFamily(const std::string& name, const std::string& help,
                                    std::vector<std::string> label_names);
  // Counts in 1/per_unit of the metric's unit, rendered divided by per_unit: a counter of
  // micro-dollars registered with per_unit 1000000 shows 0.021 for 21000.
  Family<Counter>& AddScaledCounterFamily(const std::string& name, const std::string& help,
                                          std::vector<std::string> label_names, uint64_t per_unit);
  Family<Gauge>& AddGaugeFamily(const std::string& name, const std::string& help,
                                std::vector<std::string> label_names);
  // A gauge family whose values are computed at render time: the callback returns
  // (label values, value) pairs. Called from Render's thread.
  void AddGaugeCallback(const std::string& name, const std::string& help,
                        std::vector<std::string> label_names,
                        std::function<std::vector<std::pair<std::vector<std::string>, double>>()> read);
  // The same for a counter whose value is computed at render time (the callback keeps it from
  // going down).
  void AddCounterCallback(const std::string& name, const std::string& help,
                          std::vector<std::string> label_names,
                          std::function<std::vector<std::pair<std::vector<std::string>, double>>()> read);

  std::string Render() const;

 private:
  struct Entry;
  // Registers `value` under `name` and returns it (kept alive by the entry).
  template <typename T>
  T& Add(const std::string& name, const std::string& help, const char* type, std::vector<std::string> label_names,
         std::unique_ptr<T> value);
  std::vector<std::unique_ptr<Entry>> entries_;  // in registration order
};

}  // namespace corral::api
