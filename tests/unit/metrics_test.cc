#include "api/metrics.h"

#include <gtest/gtest.h>

#include <thread>

namespace corral::api {
namespace {

TEST(MetricsTest, EmptyRegistryRendersNothing) { EXPECT_EQ(Metrics().Render(), ""); }

TEST(MetricsTest, CounterAndGauge) {
  Metrics m;
  Counter& c = m.AddCounter("corral_auth_failures_total", "Requests whose token did not verify");
  Gauge& g = m.AddGauge("corral_connections", "Open connections");
  c.Increment();
  c.Increment(4);
  g.Set(7);
  g.Add(-9);
  EXPECT_EQ(c.value(), 5u);
  EXPECT_EQ(g.value(), -2);
  EXPECT_EQ(m.Render(),
            "# HELP corral_auth_failures_total Requests whose token did not verify\n"
            "# TYPE corral_auth_failures_total counter\n"
            "corral_auth_failures_total 5\n"
            "# HELP corral_connections Open connections\n"
            "# TYPE corral_connections gauge\n"
            "corral_connections -2\n");
}

TEST(MetricsTest, AScaledCounterIsRenderedInItsUnitExactly) {
  Metrics m;
  Family<Counter>& usd = m.AddScaledCounterFamily("corral_model_cost_usd_total", "Dollars", {"model"}, 1000000);
  usd.WithLabels({"a"}).Increment(21000);
  usd.WithLabels({"b"}).Increment(3000000);
  usd.WithLabels({"c"}).Increment(1234567);
  usd.WithLabels({"d"});
  usd.WithLabels({"e"}).Increment(1);
  EXPECT_EQ(usd.WithLabels({"a"}).value(), 21000u);  // the counter itself keeps micro-dollars
  EXPECT_EQ(m.Render(),
            "# HELP corral_model_cost_usd_total Dollars\n"
            "# TYPE corral_model_cost_usd_total counter\n"
            "corral_model_cost_usd_total{model=\"a\"} 0.021\n"
            "corral_model_cost_usd_total{model=\"b\"} 3\n"
            "corral_model_cost_usd_total{model=\"c\"} 1.234567\n"
            "corral_model_cost_usd_total{model=\"d\"} 0\n"
            "corral_model_cost_usd_total{model=\"e\"} 0.000001\n");
}

TEST(MetricsTest, HelpEscapesBackslashAndNewline) {
  Metrics m;
  m.AddCounter("x_total", "a\\b\nc \"quoted\"");
  EXPECT_EQ(m.Render(),
            "# HELP x_total a\\\\b\\nc \"quoted\"\n"
            "# TYPE x_total counter\n"
            "x_total 0\n");
}

TEST(MetricsTest, LabelledFamilyEscapesValuesAndSortsChildren) {
  Metrics m;
  Family<Counter>& f =
      m.AddCounterFamily("corral_commands_total", "Commands by outcome", {"outcome", "user"});
  f.WithLabels({"exited", "plain"}).Increment();
  f.WithLabels({"exited", "plain"}).Increment();  // the same child
  f.WithLabels({"a\"b", "c\\d\ne"}).Increment(3);
  EXPECT_EQ(m.Render(),
            "# HELP corral_commands_total Commands by outcome\n"
            "# TYPE corral_commands_total counter\n"
            "corral_commands_total{outcome=\"a\\\"b\",user=\"c\\\\d\\ne\"} 3\n"
            "corral_commands_total{outcome=\"exited\",user=\"plain\"} 2\n");
  ASSERT_EQ(f.Children().size(), 2u);
}

TEST(MetricsTest, FamilyWithoutChildrenRendersOnlyMetadata) {
  Metrics m;
  m.AddGaugeFamily("g", "help", {"state"});
  EXPECT_EQ(m.Render(), "# HELP g help\n# TYPE g gauge\n");
}

TEST(MetricsTest, FamilyToleratesWrongNumberOfValues) {
  Metrics m;
  Family<Gauge>& f = m.AddGaugeFamily("g", "h", {"a", "b"});
  f.WithLabels({"x"}).Set(1);
  f.WithLabels({"y", "z", "extra"}).Set(2);
  EXPECT_EQ(m.Render(),
            "# HELP g h\n# TYPE g gauge\n"
            "g{a=\"x\",b=\"\"} 1\n"
            "g{a=\"y\",b=\"z\"} 2\n");
}

TEST(MetricsTest, HistogramCumulativeBucketsSumCount) {
  Metrics m;
  Histogram& h = m.AddHistogram("lat_seconds", "Latency", {0.0005, 0.01, 0.1, 1, 10});
  h.Observe(0.0005);  // le is inclusive: counts in the 0.0005 bucket
  h.Observe(0.004);
  h.Observe(0.004);
  h.Observe(0.5);
  h.Observe(42);  // only +Inf
  EXPECT_EQ(h.count(), 5u);
  EXPECT_DOUBLE_EQ(h.sum(), 0.0005 + 0.004 + 0.004 + 0.5 + 42);
  EXPECT_EQ(h.CumulativeCounts(), (std::vector<uint64_t>{1, 3, 3, 4, 4, 5}));
  EXPECT_EQ(m.Render(),
            "# HELP lat_seconds Latency\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{le=\"0.0005\"} 1\n"
            "lat_seconds_bucket{le=\"0.01\"} 3\n"
            "lat_seconds_bucket{le=\"0.1\"} 3\n"
            "lat_seconds_bucket{le=\"1\"} 4\n"
            "lat_seconds_bucket{le=\"10\"} 4\n"
            "lat_seconds_bucket{le=\"+Inf\"} 5\n"
            "lat_seconds_sum 42.5085\n"
            "lat_seconds_count 5\n");
}

TEST(MetricsTest, EmptyHistogramRendersZeros) {
  Metrics m;
  m.AddHistogram("h", "x", {1});
  EXPECT_EQ(m.Render(),
            "# HELP h x\n# TYPE h histogram\n"
            "h_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n");
}

TEST(MetricsTest, HistogramNegativeObservationsKeepTheSumSigned) {
  Histogram h({0});
  h.Observe(-1.5);
  h.Observe(0.25);
  EXPECT_DOUBLE_EQ(h.sum(), -1.25);
  EXPECT_EQ(h.CumulativeCounts(), (std::vector<uint64_t>{1, 2}));
}

TEST(MetricsTest, GaugeCallbackIsReadAtRenderTime) {
  Metrics m;
  int calls = 0;
  m.AddGaugeCallback("corral_sandboxes", "Sandboxes by state", {"state"}, [&calls] {
    ++calls;
    return std::vector<std::pair<std::vector<std::string>, double>>{{{"running"}, 3}, {{"stopped"}, 0.5}};
  });
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(m.Render(),
            "# HELP corral_sandboxes Sandboxes by state\n"
            "# TYPE corral_sandboxes gauge\n"
            "corral_sandboxes{state=\"running\"} 3\n"
            "corral_sandboxes{state=\"stopped\"} 0.5\n");
  EXPECT_EQ(calls, 1);
}

TEST(MetricsTest, CounterCallbackIsReadAtRenderTimeAsACounter) {
  Metrics m;
  double value = 1.5;
  m.AddCounterCallback("corral_compute_cpu_seconds_total", "CPU-seconds", {}, [&value] {
    return std::vector<std::pair<std::vector<std::string>, double>>{{{}, value}};
  });
  EXPECT_EQ(m.Render(),
            "# HELP corral_compute_cpu_seconds_total CPU-seconds\n"
            "# TYPE corral_compute_cpu_seconds_total counter\n"
            "corral_compute_cpu_seconds_total 1.5\n");
  value = 2.25;
  EXPECT_NE(m.Render().find("corral_compute_cpu_seconds_total 2.25\n"), std::string::npos);
}

TEST(MetricsTest, ConcurrentIncrementsAreNotLost) {
  Metrics m;
  Counter& c = m.AddCounter("c_total", "c");
  Family<Counter>& f = m.AddCounterFamily("f_total", "f", {"k"});
  Histogram& h = m.AddHistogram("h", "h", {1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Increment();
        f.WithLabels({i % 2 ? "odd" : "even"}).Increment();
        h.Observe(0.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000u);
  EXPECT_EQ(f.WithLabels({"odd"}).value(), 20000u);
  EXPECT_EQ(h.count(), 40000u);
  EXPECT_DOUBLE_EQ(h.sum(), 20000);
}

}  // namespace
}  // namespace corral::api
