// bench/fleet_store_bench: what one store sustains for a fleet's workload. Simulated nodes
// (threads, each with a Store of its own connection and node id, as corralds have) run, for a
// while, a loop of the store calls a fleet makes: a catalog lookup (GetSandbox), a budget
// admission and a debit (AdmitBudgetHold, then SettleBudgetHold: what the relay does per model
// call, each one transaction), a create and a destroy (CreateSandbox's transaction,
// DeleteSandbox) and, every second, a heartbeat. Prints, per call, how many a second the whole
// fleet made and the p50 / p99 of one, as JSON on stdout.
//
//   fleet_store_bench --url postgresql://... [--nodes 8] [--seconds 10]
//   fleet_store_bench --sqlite /tmp/x.db [--seconds 10]        (one node: SQLite's figures)
//
// bench/fleet.sh starts a PostgreSQL of its own (tests/fixtures/postgres.py, fsync on) and runs
// it with 1, 4 and 16 nodes.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "supervisor/store/store.h"

using corral::Status;
using corral::supervisor::BudgetHoldRequest;
using corral::supervisor::HoldVerdict;
using corral::supervisor::LedgerRow;
using corral::supervisor::NodeRow;
using corral::supervisor::SandboxRow;
using corral::supervisor::Store;
using corral::supervisor::StoreBackend;
using corral::supervisor::StoreOptions;
using Clock = std::chrono::steady_clock;

namespace {

struct Samples {
  std::vector<double> micros;
  int64_t errors = 0;
};

// One simulated node's loop; its samples per call.
std::map<std::string, Samples> RunNode(Store& store, int node, double seconds) {
  std::map<std::string, Samples> samples;
  auto timed = [&samples](const char* name, auto&& call) {
    const auto start = Clock::now();
    const bool ok = call();
    samples[name].micros.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    if (!ok) ++samples[name].errors;
  };
  const std::string prefix = "sb_n" + std::to_string(node) + "_";
  // A catalog to look things up in: 200 sandboxes of this node.
  for (int i = 0; i < 200; ++i) {
    SandboxRow row;
    row.id = prefix + "base" + std::to_string(i);
    row.iss = "bench";
    row.sub = "user" + std::to_string(i % 20);
    row.image = "host";
    row.state = "running";
    (void)store.CreateSandbox(row, 100000, 65536, 60000);
  }
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  auto next_heartbeat = Clock::now();
  for (int64_t i = 0; Clock::now() < end; ++i) {
    const std::string user = "user" + std::to_string(i % 20);
    timed("catalog_lookup", [&] { return store.GetSandbox(prefix + "base" + std::to_string(i % 200)).ok(); });
    BudgetHoldRequest call;
    call.iss = "bench";
    call.sub = user;
    call.limit_micro_usd = int64_t{1} << 60;  // never spent: every call is admitted
    call.window = {0, int64_t{1} << 40};
    call.micro_usd = 50000;
    call.now = static_cast<int64_t>(time(nullptr));
    call.stale_before = call.now - 3900;
    int64_t hold = 0;
    timed("budget_admit", [&] {
      auto admitted = store.AdmitBudgetHold(call);
      if (admitted.ok()) hold = admitted->hold_id;
      return admitted.ok() && admitted->verdict == HoldVerdict::kAdmit;
    });
    timed("ledger_debit", [&] {
      LedgerRow debit;
      debit.iss = "bench";
      debit.sub = user;
      debit.kind = "ai";
      debit.amount = 1234;
      debit.at = i;
      debit.model = "claude";
      return store.SettleBudgetHold(hold, debit).ok();
    });
    if (i % 4 == 0) {
      const std::string id = prefix + std::to_string(i);
      SandboxRow row;
      row.id = id;
      row.iss = "bench";
      row.sub = user;
      row.image = "host";
      row.state = "created";
      timed("create_sandbox", [&] { return store.CreateSandbox(row, 100000, 65536, 60000).ok(); });
      timed("destroy_sandbox", [&] { return store.DeleteSandbox(id).ok(); });
    }
    if (Clock::now() >= next_heartbeat) {
      timed("heartbeat", [&] { return store.HeartbeatNode(store.node_id(), i, 200, 1 << 30).ok(); });
      next_heartbeat += std::chrono::seconds(1);
    }
  }
  return samples;
}

double Percentile(std::vector<double>& values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(p * static_cast<double>(values.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  StoreOptions options;
  int nodes = 1;
  double seconds = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--url") {
      options.backend = StoreBackend::kPostgresql;
      options.url = argv[i + 1];
    } else if (flag == "--sqlite") {
      options.path = argv[i + 1];
    } else if (flag == "--nodes") {
      nodes = std::max(1, atoi(argv[i + 1]));
    } else if (flag == "--seconds") {
      seconds = atof(argv[i + 1]);
    } else {
      fprintf(stderr, "usage: %s --url URL|--sqlite FILE [--nodes N] [--seconds S]\n", argv[0]);
      return 2;
    }
  }
  if (options.backend == StoreBackend::kSqlite && options.path.empty()) {
    fprintf(stderr, "%s: --url or --sqlite is required\n", argv[0]);
    return 2;
  }
  if (options.backend == StoreBackend::kSqlite) nodes = 1;  // a SQLite store is one node's
  std::vector<std::unique_ptr<Store>> stores;
  for (int n = 0; n < nodes; ++n) {
    StoreOptions mine = options;
    mine.node_id = "bench-node-" + std::to_string(n);
    auto store = Store::Open(mine);
    if (!store.ok()) {
      fprintf(stderr, "open: %s\n", store.status().ToString().c_str());
      return 1;
    }
    NodeRow row;
    row.id = mine.node_id;
    (void)(*store)->RegisterNode(row);
    stores.push_back(std::move(*store));
  }
  std::vector<std::map<std::string, Samples>> results(static_cast<size_t>(nodes));
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int n = 0; n < nodes; ++n) {
    threads.emplace_back([&, n] { results[static_cast<size_t>(n)] = RunNode(*stores[static_cast<size_t>(n)], n, seconds); });
  }
  for (auto& thread : threads) thread.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::map<std::string, Samples> all;
  for (auto& per_node : results) {
    for (auto& [name, samples] : per_node) {
      Samples& merged = all[name];
      merged.micros.insert(merged.micros.end(), samples.micros.begin(), samples.micros.end());
      merged.errors += samples.errors;
    }
  }
  nlohmann::json report = {{"backend", options.backend == StoreBackend::kPostgresql ? "postgresql" : "sqlite"},
                           {"nodes", nodes},
                           {"seconds", elapsed}};
  for (auto& [name, samples] : all) {
    const double count = static_cast<double>(samples.micros.size());
    report["calls"][name] = {{"per_second", count / elapsed},
                             {"p50_us", Percentile(samples.micros, 0.50)},
                             {"p99_us", Percentile(samples.micros, 0.99)},
                             {"errors", samples.errors}};
  }
  printf("%s\n", report.dump(2).c_str());
  return 0;
}
