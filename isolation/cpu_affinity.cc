#include "isolation/cpu_affinity.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace corral::isolation {

std::vector<int> ChooseCpus(uint64_t millicores, const std::vector<int>& allowed, uint64_t spread) {
  if (millicores == 0 || allowed.empty()) return {};
  const uint64_t wanted = (millicores + 999) / 1000;
  if (wanted >= allowed.size()) return {};
  const size_t count = static_cast<size_t>(wanted);
  const size_t start = static_cast<size_t>((spread % allowed.size()) * count % allowed.size());
  std::vector<int> cpus;
  for (size_t i = 0; i < count; ++i) cpus.push_back(allowed[(start + i) % allowed.size()]);
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

std::string CpuListText(const std::vector<int>& cpus) {
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!text.empty()) text += ',';
    text += std::to_string(cpus[i]);
    if (j > i) text += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  if (!text.empty()) text += '\n';
  return text;
}

std::vector<unsigned long> CpuMask(const std::vector<int>& cpus) {
  constexpr int kBits = sizeof(unsigned long) * CHAR_BIT;
  std::vector<unsigned long> mask;
  for (int cpu : cpus) {
    if (cpu < 0) continue;
    const size_t word = static_cast<size_t>(cpu / kBits);
    if (mask.size() <= word) mask.resize(word + 1, 0);
    mask[word] |= 1ul << (cpu % kBits);
  }
  return mask;
}

StatusOr<std::vector<int>> AllowedCpus() {
  // Big enough for any machine: the kernel refuses (EINVAL) a mask shorter than its nr_cpu_ids.
  for (size_t cpus = 1024; cpus <= (1u << 20); cpus *= 4) {
    cpu_set_t* set = CPU_ALLOC(cpus);
    if (set == nullptr) return Status::Error("CPU_ALLOC", ENOMEM);
    const size_t bytes = CPU_ALLOC_SIZE(cpus);
    if (sched_getaffinity(0, bytes, set) == 0) {
      std::vector<int> allowed;
      for (size_t cpu = 0; cpu < cpus; ++cpu) {
        if (CPU_ISSET_S(cpu, bytes, set)) allowed.push_back(static_cast<int>(cpu));
      }
      CPU_FREE(set);
      return allowed;
    }
    const int error = errno;
    CPU_FREE(set);
    if (error != EINVAL) return ErrnoError("sched_getaffinity", error);
  }
  return Status::Error("sched_getaffinity: more CPUs than a mask can hold", EINVAL);
}

}  // namespace corral::isolation
