// WarmPool: sandboxes made ahead, per image, for creates to claim (DESIGN.md §4, [pool] in the
// config).
//
// A pooled sandbox is fully started (namespaces, cgroup, mounts, its init waiting on its control
// socket) with the daemon's [sandbox] defaults, under a row of its own owned by nobody (state
// "pooled"). What a start fixes for good makes its shape: the image, the disk size (its layer is
// an image of that size) and the number of CPUs (those it is pinned to and shows as online). A
// create of that shape claims one instead of starting a sandbox: its row becomes the caller's
// (name, limits, budget, egress, idle timeout), the limits go to its cgroup, and its loopback is
// served from then on. Each pooled sandbox is a launch of its own, with its own id, uid range,
// layer and namespaces: no claim shares anything with another (nothing is copied from a
// template, so no memory and no random state either).
//
// This class is the bookkeeping, on the daemon's loop: what each shape should hold, what it
// holds, what is being made. The manager fills, claims and drains (pool.cc).
#pragma once

#include <compare>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "supervisor/sandboxes/sandbox_host.h"

namespace corral::supervisor {

// The state of a pooled sandbox's row.
inline constexpr char kPooled[] = "pooled";

struct PoolShape {
  std::string image;        // "host" or the image's digest
  uint64_t disk_bytes = 0;  // its layer image's size
  uint64_t cpus = 0;        // ceil(cpu limit / 1000); 0: no CPU limit

  auto operator<=>(const PoolShape&) const = default;
  std::string ToString() const;
};

// The shape of a sandbox with these limits (cpu_millicores 0: no limit).
PoolShape ShapeOf(const std::string& image, uint64_t disk_bytes, uint64_t cpu_millicores);

class WarmPool {
 public:
  struct Entry {
    std::string id;
    PoolShape shape;
    SandboxProcess process;
    std::vector<UniqueFd> listeners;  // its loopback's, served once claimed
  };

  // What each shape should hold (a reload's new sizes). Shapes no longer wanted, and entries
  // beyond a lowered size, are what Excess() hands back.
  void SetTargets(std::map<PoolShape, uint64_t> targets);
  const std::map<PoolShape, uint64_t>& targets() const { return targets_; }

  // The next shape to make a sandbox of: one holding fewer than it should, counting those being
  // made; none while `max_filling` are being made. The caller marks it with Filling().
  std::optional<PoolShape> NextToFill(size_t max_filling) const;
  void Filling(const PoolShape& shape) { ++filling_[shape]; }
  // A fill ended: its entry joins the pool (or, no longer wanted, comes back to be destroyed).
  std::optional<Entry> Filled(Entry entry);
  void FillFailed(const PoolShape& shape);

  // The oldest ready entry of `shape`, taken out of the pool.
  std::optional<Entry> Take(const PoolShape& shape);
  // An entry taken for a claim that did not happen, back at the head of its queue.
  void Return(Entry entry);
  // The entry `id`, taken out (an admin destroys a pooled sandbox).
  std::optional<Entry> TakeId(const std::string& id);
  // Entries beyond their shape's target, taken out.
  std::vector<Entry> Excess();
  // Every entry, taken out (shutdown).
  std::vector<Entry> TakeAll();

  size_t ready(const PoolShape& shape) const;
  size_t ready() const;
  size_t filling() const;

 private:
  std::map<PoolShape, uint64_t> targets_;
  std::map<PoolShape, std::deque<Entry>> ready_;
  std::map<PoolShape, size_t> filling_;
};

}  // namespace corral::supervisor
