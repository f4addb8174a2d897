// SandboxManager: the warm pool (warm_pool.h, [pool] in the config). Pooled sandboxes are made
// one at a time on the worker pool, kept running unclaimed, and given to creates of their shape;
// the pool is refilled after each claim, drained to a reload's sizes, destroyed at shutdown, and
// what a daemon that died left of it is destroyed by the next one's recovery.
#include "supervisor/sandboxes/sandbox_manager.h"

#include <utility>

#include <boost/asio/post.hpp>

#include "common/log.h"
#include "isolation/sandbox_spec.h"
#include "supervisor/ids.h"
#include "supervisor/sandboxes/launched.h"

namespace corral::supervisor {
namespace {

namespace asio = boost::asio;

// How long the pool waits to try a shape again after a sandbox of it could not be made (an image
// gone, the disk full, the daemon at its maximum): failures are logged, not repeated in a loop.
constexpr std::chrono::seconds kPoolRetry{5};
// Pooled sandboxes made at once: one, so that filling never holds up the worker pool users' own
// starts and copies run on.
constexpr size_t kPoolFillsAtOnce = 1;

}  // namespace

void SandboxManager::ReconcilePool() {
  if (detached_) return;
  std::map<PoolShape, uint64_t> targets;
  std::map<PoolShape, std::string> names;
  for (const auto& [image, count] : config_.pool_sizes) {
    auto chosen = ResolveImage(UserCaps{}, image);
    if (!chosen.ok()) {
      LogWarn("pool", "cannot pool this image", {{"image", image}, {"error", chosen.status().ToString()}});
      continue;
    }
    const PoolShape shape = ShapeOf(chosen->digest, config_.default_disk_bytes, config_.default_cpu_millicores);
    targets[shape] += count;
    names[shape] = image;
  }
  warm_pool_.SetTargets(std::move(targets));
  pool_names_ = std::move(names);
  for (WarmPool::Entry& extra : warm_pool_.Excess()) DestroyPooled(std::move(extra));
  FillPool();
}

void SandboxManager::FillPool() {
  if (detached_ || pool_retry_armed_) return;
  while (auto shape = warm_pool_.NextToFill(kPoolFillsAtOnce)) {
    auto limits = admission_.Limits(UserCaps{}, isolation::ResourceLimits{});
    auto count = store_.CountAllSandboxes();
    Status room = !limits.ok() ? limits.status()
                  : !count.ok() ? count.status()
                  : static_cast<uint64_t>(*count) >= config_.max_sandboxes
                      ? Status::Error("the daemon holds its maximum of sandboxes", EDQUOT)
                      : Status();
    SandboxRow row;
    if (room.ok()) {
      row.id = NewId("sb");
      row.image = shape->image;
      row.image_name = pool_names_[*shape];
      row.state = kPooled;
      row.limits = *limits;
      row.limits.disk_bytes = shape->disk_bytes;
      row.created_at = row.updated_at = row.last_active_at = Now();
      row.network = kNetworkLoopback;
      auto created = store_.CreateSandbox(row, kUidFirst, kUidStep, kUidSlots);
      if (created.ok()) row = *created;
      room = created.status();
    }
    StatusOr<isolation::SandboxSpec> spec = room.ok() ? SpecOf(row) : StatusOr<isolation::SandboxSpec>(room);
    if (!spec.ok()) {
      if (room.ok()) (void)store_.DeleteSandbox(row.id);
      LogWarn("pool", "cannot make a pooled sandbox; trying again later",
              {{"shape", shape->ToString()}, {"error", spec.status().ToString()}});
      ArmPoolRetry();
      return;
    }
    warm_pool_.Filling(*shape);
    asio::post(pool_, [this, row, shape = *shape, spec = std::move(*spec)]() mutable {
      auto launched = std::make_shared<Launched>();
      *launched = Launch(row, spec);
      {
        std::lock_guard lock(fills_mu_);
        if (!fills_stopped_) {
          fills_done_[row.id] = launched;
          asio::post(io_, [this, row = std::move(row), shape = std::move(shape), launched]() mutable {
            {
              std::lock_guard taken(fills_mu_);
              if (fills_done_.erase(row.id) == 0) return;  // Detach destroyed it
            }
            OnPoolFilled(std::move(row), std::move(shape), launched);
          });
          return;
        }
      }
      // The daemon stopped while this one started: made for nobody, and the loop is gone.
      DestroyPooled(row.id, launched->process.ok() ? &*launched->process : nullptr);
    });
  }
}

void SandboxManager::DestroyPooled(const std::string& id, SandboxProcess* process) {
  Status stopped = host_.Stop(id, process);
  if (stopped.ok()) stopped = host_.Destroy(id);
  if (!stopped.ok()) LogError("pool", "cannot destroy a pooled sandbox", {{"sandbox", id}, {"error", stopped.ToString()}});
}

void SandboxManager::DestroyUnclaimedFills() {
  std::map<std::string, std::shared_ptr<Launched>> done;
  {
    std::lock_guard lock(fills_mu_);
    fills_stopped_ = true;
    done.swap(fills_done_);
  }
  // On the worker pool, which corrald joins before it exits (their rows go at the next start's
  // recovery).
  for (auto& [id, launched] : done) {
    asio::post(pool_, [this, id = id, launched = launched] {
      DestroyPooled(id, launched->process.ok() ? &*launched->process : nullptr);
    });
  }
}

void SandboxManager::ArmPoolRetry() {
  if (pool_retry_armed_) return;
  pool_retry_armed_ = true;
  pool_retry_.expires_after(kPoolRetry);
  pool_retry_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    pool_retry_armed_ = false;
    FillPool();
  });
}

void SandboxManager::OnPoolFilled(SandboxRow row, PoolShape shape, std::shared_ptr<Launched> launched) {
  if (!launched->process.ok()) {
    warm_pool_.FillFailed(shape);
    LogError("pool", "a pooled sandbox could not start", {{"sandbox", row.id}, {"error", launched->process.status().ToString()}});
    asio::post(pool_, [this, id = row.id] {
      Status destroyed = host_.Destroy(id);
      asio::post(io_, [this, id, destroyed] {
        if (destroyed.ok()) (void)store_.DeleteSandbox(id);
      });
    });
    ArmPoolRetry();
    return;
  }
  WarmPool::Entry entry;
  entry.id = row.id;
  entry.shape = shape;
  entry.process = std::move(*launched->process);
  entry.listeners = std::move(launched->hello->listeners);
  if (detached_) {
    // The daemon is stopping: made for nobody.
    warm_pool_.FillFailed(shape);
    return DestroyPooled(std::move(entry));
  }
  // The pid is stored so that the next daemon's recovery finds and stops it if this one dies.
  row.init_pid = entry.process.pid;
  row.init_start_time = static_cast<int64_t>(entry.process.start_time);
  (void)store_.UpdateSandbox(row);
  if (auto unwanted = warm_pool_.Filled(std::move(entry))) DestroyPooled(std::move(*unwanted));
  FillPool();
}

void SandboxManager::ClaimPooled(const Caller& caller, const UserCaps& caps, SandboxRow row, WarmPool::Entry entry,
                                 Done<SandboxRow> done) {
  const SandboxRow asked = row;
  auto fresh = [this, caller, caps, asked, done](std::string why) mutable {
    LogWarn("pool", "claim failed; creating afresh", {{"error", why}});
    CreateFresh(caller, caps, asked, /*start=*/true, std::move(done));
  };
  auto pooled = store_.GetSandbox(entry.id);
  if (!pooled.ok() || !pooled->has_value() || ProcessStartTime(entry.process.pid) != entry.process.start_time) {
    const std::string id = entry.id;
    DestroyPooled(std::move(entry));
    FillPool();
    return fresh("pooled sandbox " + id + " is gone");
  }
  row.id = entry.id;
  row.uid_base = (*pooled)->uid_base;
  row.state = "starting";
  row.init_pid = entry.process.pid;
  row.init_start_time = static_cast<int64_t>(entry.process.start_time);
  Status claimed = admission_.Claim(caller, caps, row);
  if (!claimed.ok()) {
    warm_pool_.Return(std::move(entry));
    return done(claimed);
  }
  busy_[row.id] = true;
  auto held = std::make_shared<WarmPool::Entry>(std::move(entry));
  asio::post(pool_, [this, row, held, done = std::move(done), fresh = std::move(fresh)]() mutable {
    // The caller's limits on the cgroup, and the CPU time init used so far, which is not theirs.
    Status limited = host_.SetLimits(row.id, row.uid_base, row.limits);
    StatusOr<uint64_t> used = limited.ok() ? host_.CpuUsageUsec(row.id) : StatusOr<uint64_t>(limited);
    asio::post(io_, [this, row = std::move(row), held, used, done = std::move(done),
                     fresh = std::move(fresh)]() mutable {
      busy_.erase(row.id);
      if (!used.ok() || detached_) {
        DestroyPooled(std::move(*held));
        if (detached_) return;
        FillPool();
        return fresh("pooled sandbox " + row.id + ": " + used.status().ToString());
      }
      row.cpu_billed_usec = static_cast<int64_t>(*used);
      row.last_active_at = Now();
      SetState(row, "running");
      AppendLifecycle(row, WebhookEventType::kSandboxCreated);
      AppendLifecycle(row, WebhookEventType::kSandboxStarted);
      LogInfo("sandbox", "created from the pool", {{"sandbox", row.id}, {"iss", row.iss}, {"sub", row.sub}});
      OnStarted(row, std::move(held->process), std::move(held->listeners));
      done(row);
      FillPool();
    });
  });
}

void SandboxManager::DestroyPooled(WarmPool::Entry entry, std::function<void()> done) {
  auto process = std::make_shared<SandboxProcess>(std::move(entry.process));
  asio::post(pool_, [this, id = entry.id, process, done = std::move(done)]() mutable {
    Status stopped = host_.Stop(id, process.get());
    Status destroyed = stopped.ok() ? host_.Destroy(id) : stopped;
    asio::post(io_, [this, id, destroyed, done = std::move(done)] {
      if (!destroyed.ok()) {
        LogError("pool", "cannot destroy a pooled sandbox", {{"sandbox", id}, {"error", destroyed.ToString()}});
      } else {
        (void)store_.DeleteSandbox(id);
      }
      if (done) done();
    });
  });
}

Status SandboxManager::RemovePooled(const SandboxRow& row) {
  auto process = host_.Adopt(row.id, static_cast<pid_t>(row.init_pid), static_cast<uint64_t>(row.init_start_time));
  SandboxProcess leftover;
  if (process.ok() && process->has_value()) leftover = std::move(**process);
  RETURN_IF_ERROR(host_.Stop(row.id, leftover.pidfd ? &leftover : nullptr));
  RETURN_IF_ERROR(host_.Destroy(row.id));
  return store_.DeleteSandbox(row.id);
}

}  // namespace corral::supervisor
