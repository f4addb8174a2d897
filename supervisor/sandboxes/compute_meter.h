// The compute meter (DESIGN.md §4 Budgets and ledger): every running sandbox's CPU time, read from
// its cgroup, is debited to its user's ledger (kind "compute", whole milliseconds; the rest waits
// for the next reading) every metering interval and when it stops, limited or not. A sandbox is
// metered against the budget of the token that last created or started it; once its user's
// compute for the window reaches the budget's compute_ms, the sandbox manager freezes and stops it
// and refuses starts until the next window.
//
// A debit and the mark of what it covered (the row's cpu_billed_usec) are one transaction: a crash
// between them can neither debit the same time twice nor lose it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cgroups/cgroup_backend.h"
#include "common/status.h"
#include "supervisor/relay/budget.h"
#include "supervisor/sandboxes/sandbox_host.h"
#include "supervisor/store/store.h"

namespace corral::supervisor {

// One sandbox's account with the meter: whose CPU time it is, against which budget, and how much
// of its cgroup's usage the ledger holds already.
struct ComputeAccount {
  std::string sandbox_id;
  std::string iss;
  std::string sub;
  Budget budget;
  int64_t cpu_billed_usec = 0;
  bool exhausted = false;  // its user's budget is spent: it is being frozen and stopped
};

// What a user spent of a compute budget that is spent (both in CPU milliseconds).
struct ComputeSpent {
  int64_t spent_ms = 0;
  int64_t budget_ms = 0;
};

class ComputeMeter {
 public:
  ComputeMeter(Store& store, SandboxHost& host) : store_(store), host_(host) {}

  // Where refusals of a start (kCompute) and stops (kComputeStop) are counted; null: nowhere.
  void SetObserver(BudgetObserver* observer) { observer_ = observer; }

  // Before a start: EKEYEXPIRED, with the figures and when the window renews, when the user's
  // compute for the budget's current window is spent (no compute_ms: never).
  Status CheckStart(const std::string& iss, const std::string& sub, const Budget& budget);
  // The spent budget of the account's user in the current window, if it is spent.
  std::optional<ComputeSpent> Spent(const ComputeAccount& account);
  // The account's sandbox is stopped for its spent budget (counted for the metrics).
  void CountStop();

  // Debits what the account's cgroup counted since its last debit (nothing when it is gone).
  void Read(ComputeAccount& account);
  // Debits what `stats` (the cgroup's last figures) counted above the account's last debit.
  void Debit(ComputeAccount& account, const cgroups::CgroupStats& stats);
  // Whole CPU milliseconds the account's cgroup counted that the ledger does not hold yet.
  int64_t Unmetered(const ComputeAccount& account);
  // CPU milliseconds this meter debited since the daemon started.
  int64_t debited_ms() const { return debited_ms_; }

 private:
  Store& store_;
  SandboxHost& host_;
  BudgetObserver* observer_ = nullptr;
  int64_t debited_ms_ = 0;
};

}  // namespace corral::supervisor
