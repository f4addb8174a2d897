// SandboxManager: recovery at start (sandbox_manager.h). The sandboxes the previous daemon left
// running are adopted when their init still lives (their commands too, as init holds them); the
// rest are stopped with what their cgroups still counted, half-made and half-destroyed ones are
// removed, and cgroups, full-network links and snapshot files that belong to nothing go.
#include "supervisor/sandboxes/sandbox_manager.h"

#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "supervisor/sandboxes/full_network.h"
#include "supervisor/ids.h"

namespace corral::supervisor {

Status SandboxManager::Recover() {
  RemoveMoveLeftovers();
  ASSIGN_OR_RETURN(auto rows, store_.ListNodeSandboxes());
  int adopted = 0, cleaned = 0;
  for (SandboxRow& row : rows) {
    if (row.state == "destroying" || row.state == "creating") {
      // Destroy half done, or a copy never acknowledged: finish the one, undo the other.
      RETURN_IF_ERROR(host_.Destroy(row.id));
      (void)store_.DeleteSandbox(row.id);
      ++cleaned;
      continue;
    }
    if (row.state == kPooled) {
      // The previous daemon's pool: made for nobody, so gone (ReconcilePool makes a new one).
      RETURN_IF_ERROR(RemovePooled(row));
      ++cleaned;
      continue;
    }
    if (row.state == "stopped" || row.state == "created") continue;
    ASSIGN_OR_RETURN(bool adopted_it, RecoverSandbox(row));
    ++(adopted_it ? adopted : cleaned);
  }
  RemoveLeftovers(rows);
  RemoveOrphanSnapshots();
  LogInfo("recovery", "done", {{"adopted", std::to_string(adopted)}, {"cleaned", std::to_string(cleaned)}});
  return Status();
}

StatusOr<bool> SandboxManager::RecoverSandbox(SandboxRow& row) {
  auto process = host_.Adopt(row.id, static_cast<pid_t>(row.init_pid), static_cast<uint64_t>(row.init_start_time));
  if (process.ok() && process->has_value() && row.state == "running") {
    // A snapshot may have frozen it when the previous daemon died.
    Status thawed = host_.Thaw(row.id);
    if (!thawed.ok()) LogWarn("recovery", "cannot thaw", {{"sandbox", row.id}, {"error", thawed.ToString()}});
    // Ask init what it still holds; it answers at once.
    auto hello = Hello((*process)->control.get(), kHelloTimeout, nullptr);
    if (!hello.ok()) {
      LogWarn("recovery", "corral-init did not answer hello", {{"sandbox", row.id}, {"error", hello.status().ToString()}});
      hello = InitHello{};  // version 0: the handshake every init speaks
    }
    (*process)->init_version = hello->version;
    OnStarted(row, std::move(**process), std::move(hello->listeners));
    AdoptCommands(live_[row.id], std::move(hello->commands));
    return true;
  }
  if (!process.ok()) {
    LogWarn("recovery", "cannot adopt; stopping it", {{"sandbox", row.id}, {"error", process.status().ToString()}});
  }
  // Gone (or half started, or half stopped): finish the stop, with what its cgroups counted
  // read before they go (its last CPU time to the ledger, its commands' figures).
  SandboxProcess leftover;
  if (process.ok() && process->has_value()) leftover = std::move(**process);
  ASSIGN_OR_RETURN(auto commands, store_.ListCommands(row.id, /*active_only=*/true));
  std::vector<uint64_t> seqs;
  for (const CommandRow& command : commands) seqs.push_back(static_cast<uint64_t>(command.init_seq));
  StopFigures figures = KillAndRead(row.id, seqs);
  RETURN_IF_ERROR(host_.Stop(row.id, leftover.pidfd ? &leftover : nullptr));
  if (figures.sandbox.ok()) {
    ComputeAccount gone;
    gone.sandbox_id = row.id;
    gone.iss = row.iss;
    gone.sub = row.sub;
    gone.cpu_billed_usec = row.cpu_billed_usec;
    meter_.Debit(gone, *figures.sandbox);
    if (auto fresh = store_.GetSandbox(row.id); fresh.ok() && fresh->has_value()) row = **fresh;
  }
  for (size_t i = 0; i < commands.size(); ++i) StoreLost(commands[i], figures.commands[i]);
  row.init_pid = 0;
  row.init_start_time = 0;
  SetState(row, "stopped");
  CloseAllPorts(row.id, "sandbox_stopped");
  // Found dead at this start: the host restarted, or its init died while no daemon ran.
  AppendLifecycle(row, WebhookEventType::kSandboxStopped,
                  nlohmann::json{{"reason", std::string(StopReasonName(StopReason::kNodeFailure))}}.dump(),
                  StopReason::kNodeFailure);
  return false;
}

void SandboxManager::RemoveLeftovers(const std::vector<SandboxRow>& rows) {
  // cgroups that belong to no running sandbox (a crash between mkdir and the row, or a stop
  // that did not finish) go too: those named like a sandbox. The parent may be shared ("corral"
  // also holds `corral run`'s runs and other daemons' parents, e.g. the tests').
  auto children = host_.backend().ListChildren(host_.cgroup_parent());
  if (children.ok()) {
    for (const std::string& child : *children) {
      const std::string id = child.substr(child.rfind('/') + 1);
      if (IsWellFormedId(id, "sb") && !live_.count(id)) (void)host_.backend().Destroy(child);
    }
  }
  // Under an older corrald's parent (corral/), only what bears the name of one of our sandboxes:
  // other programs may keep cgroups there (`corral run`, another corrald).
  std::set<std::string> known;
  for (const SandboxRow& row : rows) known.insert(row.id);
  for (const std::string& parent : host_.legacy_cgroup_parents()) {
    auto legacy = host_.backend().ListChildren(parent);
    if (!legacy.ok()) continue;
    for (const std::string& child : *legacy) {
      const std::string id = child.substr(child.rfind('/') + 1);
      if (known.count(id) && !live_.count(id)) (void)host_.backend().Destroy(child);
    }
    (void)host_.backend().RemoveIfEmpty(parent);
  }
  // Full-network links and filters of sandboxes that are not running (they died with the previous
  // daemon, or it died halfway through a stop).
  if (network_ != nullptr) {
    std::set<std::string> running;
    for (const auto& [id, live] : live_) running.insert(id);
    Status cleaned_network = network_->Cleanup(running);
    if (!cleaned_network.ok()) {
      LogWarn("recovery", "cannot clean up full-network leftovers", {{"error", cleaned_network.ToString()}});
    }
  }
}

}  // namespace corral::supervisor
