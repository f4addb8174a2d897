#include "supervisor/sandboxes/warm_pool.h"

#include <utility>

namespace corral::supervisor {

std::string PoolShape::ToString() const {
  return image + ", disk " + std::to_string(disk_bytes) + ", " + (cpus == 0 ? "no CPU limit" : std::to_string(cpus) + " CPUs");
}

PoolShape ShapeOf(const std::string& image, uint64_t disk_bytes, uint64_t cpu_millicores) {
  return PoolShape{image, disk_bytes, (cpu_millicores + 999) / 1000};
}

void WarmPool::SetTargets(std::map<PoolShape, uint64_t> targets) { targets_ = std::move(targets); }

std::optional<PoolShape> WarmPool::NextToFill(size_t max_filling) const {
  if (filling() >= max_filling) return std::nullopt;
  for (const auto& [shape, target] : targets_) {
    auto in_fill = filling_.find(shape);
    const size_t have = ready(shape) + (in_fill == filling_.end() ? 0 : in_fill->second);
    if (have < target) return shape;
  }
  return std::nullopt;
}

std::optional<WarmPool::Entry> WarmPool::Filled(Entry entry) {
  auto in_fill = filling_.find(entry.shape);
  if (in_fill != filling_.end() && --in_fill->second == 0) filling_.erase(in_fill);
  auto target = targets_.find(entry.shape);
  if (target == targets_.end() || ready(entry.shape) >= target->second) return entry;
  ready_[entry.shape].push_back(std::move(entry));
  return std::nullopt;
}

void WarmPool::FillFailed(const PoolShape& shape) {
  auto in_fill = filling_.find(shape);
  if (in_fill != filling_.end() && --in_fill->second == 0) filling_.erase(in_fill);
}

std::optional<WarmPool::Entry> WarmPool::Take(const PoolShape& shape) {
  auto it = ready_.find(shape);
  if (it == ready_.end() || it->second.empty()) return std::nullopt;
  Entry entry = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) ready_.erase(it);
  return entry;
}

void WarmPool::Return(Entry entry) {
  std::deque<Entry>& entries = ready_[entry.shape];
  entries.push_front(std::move(entry));
}

std::optional<WarmPool::Entry> WarmPool::TakeId(const std::string& id) {
  for (auto it = ready_.begin(); it != ready_.end(); ++it) {
    for (auto entry = it->second.begin(); entry != it->second.end(); ++entry) {
      if (entry->id != id) continue;
      Entry taken = std::move(*entry);
      it->second.erase(entry);
      if (it->second.empty()) ready_.erase(it);
      return taken;
    }
  }
  return std::nullopt;
}

std::vector<WarmPool::Entry> WarmPool::Excess() {
  std::vector<Entry> out;
  for (auto it = ready_.begin(); it != ready_.end();) {
    auto target = targets_.find(it->first);
    const size_t keep = target == targets_.end() ? 0 : target->second;
    // The newest go first: the oldest have waited longest and are claimed next.
    while (it->second.size() > keep) {
      out.push_back(std::move(it->second.back()));
      it->second.pop_back();
    }
    it = it->second.empty() ? ready_.erase(it) : std::next(it);
  }
  return out;
}

std::vector<WarmPool::Entry> WarmPool::TakeAll() {
  std::vector<Entry> out;
  for (auto& [shape, entries] : ready_) {
    for (Entry& entry : entries) out.push_back(std::move(entry));
  }
  ready_.clear();
  return out;
}

size_t WarmPool::ready(const PoolShape& shape) const {
  auto it = ready_.find(shape);
  return it == ready_.end() ? 0 : it->second.size();
}

size_t WarmPool::ready() const {
  size_t n = 0;
  for (const auto& [shape, entries] : ready_) n += entries.size();
  return n;
}

size_t WarmPool::filling() const {
  size_t n = 0;
  for (const auto& [shape, count] : filling_) n += count;
  return n;
}

}  // namespace corral::supervisor
