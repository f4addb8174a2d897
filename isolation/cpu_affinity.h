// The CPUs a sandbox with a CPU limit is pinned to.
//
// A CPU quota (cpu.max) caps how much CPU time a sandbox gets, but says nothing to the programs
// that size their thread pools by the number of CPUs they may run on: sched_getaffinity (glibc's
// nproc, Node's os.availableParallelism(), Go's GOMAXPROCS, the JVM, .NET) and
// /sys/devices/system/cpu/online (glibc's sysconf(_SC_NPROCESSORS_ONLN): Python's
// os.cpu_count(), make -j$(getconf _NPROCESSORS_ONLN)). Without pinning, a 1-CPU sandbox on a
// 64-core host starts 64 workers, which then take turns in the quota.
//
// So the launcher pins a limited sandbox's PID 1 (and with it everything inside) to
// ceil(limit) CPUs, and rootfs shows the same list as /sys/devices/system/cpu/online. The cost
// is placement: the scheduler runs the sandbox only on those CPUs, even when others idle. The
// run of CPUs therefore starts at a place given by the sandbox (its uid slot), which spreads
// the sandboxes of one host over all its CPUs. A program may still widen its own mask
// (sched_setaffinity is allowed, within the launcher's cpuset): the mask informs, the quota
// limits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace corral::isolation {

// ceil(millicores / 1000) of `allowed` (sorted CPU numbers), consecutive in `allowed` from
// position (spread * count) mod allowed.size(), wrapping; sorted. Empty when there is nothing
// to pin: no limit (0), or a limit that covers every allowed CPU.
std::vector<int> ChooseCpus(uint64_t millicores, const std::vector<int>& allowed, uint64_t spread);

// The kernel's CPU list format, as /sys/devices/system/cpu/online reads: "0-2,5\n". Empty for
// no CPUs.
std::string CpuListText(const std::vector<int>& cpus);

// sched_setaffinity's mask for `cpus`: one bit per CPU, in unsigned longs. Empty for no CPUs.
std::vector<unsigned long> CpuMask(const std::vector<int>& cpus);

// The CPUs the calling thread may run on (sched_getaffinity), sorted.
StatusOr<std::vector<int>> AllowedCpus();

}  // namespace corral::isolation
