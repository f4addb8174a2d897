#include "supervisor/sandboxes/compute_meter.h"

#include <time.h>

#include <algorithm>

#include "common/log.h"
#include "common/unix_time.h"

namespace corral::supervisor {
namespace {

}  // namespace

Status ComputeMeter::CheckStart(const std::string& iss, const std::string& sub, const Budget& budget) {
  if (!budget.compute_ms) return Status();
  const WindowRange window = CurrentWindow(budget, UnixNow());
  ASSIGN_OR_RETURN(int64_t spent, store_.LedgerSum(iss, sub, "compute", window.start, window.end));
  if (spent < *budget.compute_ms) return Status();
  if (observer_ != nullptr) observer_->OnBudgetRefusal(BudgetRefusal::kCompute);
  return Status::Error("the compute budget of this " + std::string(WindowName(budget.window)) + " is spent (" +
                           std::to_string(spent / 1000) + " of " + std::to_string(*budget.compute_ms / 1000) +
                           " CPU-seconds); it renews at " + std::to_string(window.end),
                       EKEYEXPIRED);
}

std::optional<ComputeSpent> ComputeMeter::Spent(const ComputeAccount& account) {
  if (!account.budget.compute_ms) return std::nullopt;
  const WindowRange window = CurrentWindow(account.budget, UnixNow());
  auto spent = store_.LedgerSum(account.iss, account.sub, "compute", window.start, window.end);
  if (!spent.ok() || *spent < *account.budget.compute_ms) return std::nullopt;
  return ComputeSpent{*spent, *account.budget.compute_ms};
}

void ComputeMeter::CountStop() {
  if (observer_ != nullptr) observer_->OnBudgetRefusal(BudgetRefusal::kComputeStop);
}

void ComputeMeter::Read(ComputeAccount& account) {
  auto stats = host_.backend().Stats(host_.SandboxCgroup(account.sandbox_id));
  if (!stats.ok()) return;  // gone already: nothing more to read
  Debit(account, *stats);
}

void ComputeMeter::Debit(ComputeAccount& account, const cgroups::CgroupStats& stats) {
  const int64_t usage = static_cast<int64_t>(stats.cpu_usage_usec);
  // Whole milliseconds; the rest waits for the next reading.
  const int64_t ms = (usage - account.cpu_billed_usec) / 1000;
  if (ms <= 0) return;
  LedgerRow debit;
  debit.iss = account.iss;
  debit.sub = account.sub;
  debit.kind = "compute";
  debit.amount = ms;
  debit.at = UnixNow();
  debit.sandbox_id = account.sandbox_id;
  const int64_t billed = account.cpu_billed_usec + ms * 1000;
  // The debit and the mark of what it covered are one transaction: a crash between them would
  // otherwise debit the same time twice, or never.
  Status stored = store_.InTransaction([&]() -> Status {
    ASSIGN_OR_RETURN(std::optional<SandboxRow> row, store_.GetSandbox(account.sandbox_id));
    if (!row) return Status();
    RETURN_IF_ERROR(store_.AddLedger(debit).status());
    row->cpu_billed_usec = billed;
    return store_.UpdateSandbox(*row);
  });
  if (!stored.ok()) {
    LogError("sandbox", "cannot debit compute", {{"sandbox", account.sandbox_id}, {"error", stored.ToString()}});
    return;
  }
  account.cpu_billed_usec = billed;
  debited_ms_ += ms;
}

int64_t ComputeMeter::Unmetered(const ComputeAccount& account) {
  auto usage = host_.backend().CpuUsageUsec(host_.SandboxCgroup(account.sandbox_id));
  if (!usage.ok()) return 0;
  return std::max<int64_t>(static_cast<int64_t>(*usage) - account.cpu_billed_usec, 0) / 1000;
}

}  // namespace corral::supervisor
