"""daemon_bench's readings of /proc and the cgroup hierarchies (see daemon_bench.py): CPU time and
scheduler delays, memory, the sandboxes' init processes, and the leak check.
"""
import os
import re
import threading
import time

from daemon_bench_client import env

CGROUP_ROOT = "/sys/fs/cgroup"
HZ = os.sysconf("SC_CLK_TCK")


def proc_cpu_ticks(pid, tid=None):
    """utime + stime of a process (or one of its threads), in clock ticks."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def proc_status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        m = re.search(rf"^{key}:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1)) if m else 0


def proc_pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            m = re.search(r"^Pss:\s+(\d+) kB", f.read(), re.M)
        return int(m.group(1)) if m else 0
    except OSError:
        return 0


def sched_ns(pid, tid):
    """(on-CPU ns, ns spent runnable but waiting for a CPU) of one thread: /proc/.../schedstat."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            run, wait, _ = f.read().split()
        return int(run), int(wait)
    except (OSError, ValueError):
        return None


class CpuSampler:
    """CPU time of corrald (whole and its main, event-loop thread) and of other pids, as deltas;
    plus, from schedstat, how long corrald's event loop and this process's main thread were on a
    CPU and how long they waited for one (run-queue delay: a busy shared host)."""

    def __init__(self, daemon_pid, others=()):
        self.daemon_pid = daemon_pid
        self.others = dict(others)  # name -> pid

    def sample(self):
        s = {"t": time.monotonic(), "corrald": proc_cpu_ticks(self.daemon_pid),
             "corrald_main": proc_cpu_ticks(self.daemon_pid, self.daemon_pid)}
        for name, pid in self.others.items():
            try:
                s[name] = proc_cpu_ticks(pid)
            except OSError:
                s[name] = None
        s["sched"] = {"corrald_main": sched_ns(self.daemon_pid, self.daemon_pid),
                      "self": sched_ns(os.getpid(), threading.get_native_id())}
        return s

    @staticmethod
    def delta(a, b):
        wall = b["t"] - a["t"]
        out = {"wall_s": wall}
        for k in a:
            if k not in ("t", "sched") and a[k] is not None and b.get(k) is not None:
                out[k + "_cpu_s"] = (b[k] - a[k]) / HZ
        for k, before in a["sched"].items():
            after = b["sched"].get(k)
            if before and after:
                out[k + "_oncpu_s"] = (after[0] - before[0]) / 1e9
                out[k + "_runqueue_s"] = (after[1] - before[1]) / 1e9
        return out


def hierarchies():
    """The cgroup hierarchies' roots: [(name, path)] (one, "unified", on a v2 host)."""
    with open("/proc/self/mounts") as f:
        mounts = [line.split() for line in f]
    roots = []
    for dev, path, fstype, opts, *_ in mounts:
        if fstype == "cgroup2" and path == CGROUP_ROOT:
            return [("unified", path)]
        if fstype == "cgroup":
            roots.append((os.path.basename(path), path))
        elif fstype == "cgroup2":
            roots.append(("unified", path))
    return roots


def our_cgroups():
    """Every directory below the private cgroup parent, in every hierarchy (relative paths)."""
    parent = env("BENCH_CGROUP_PARENT")
    found = []
    for name, root in hierarchies():
        base = os.path.join(root, parent)
        for d, dirs, _ in os.walk(base):
            if d != base:
                found.append(os.path.relpath(d, CGROUP_ROOT))
    return found


def sandbox_init_pids(sid):
    """corral-init's host pids: the `init` cgroup of the sandbox (pids or memory hierarchy)."""
    parent = env("BENCH_CGROUP_PARENT")
    for name, root in hierarchies():
        if name not in ("pids", "memory", "unified"):
            continue
        path = os.path.join(root, parent, sid, "init", "cgroup.procs")
        try:
            with open(path) as f:
                return [int(p) for p in f.read().split()]
        except OSError:
            continue
    return []


def sandbox_memory_bytes(sid):
    """The sandbox cgroup's memory usage (v1 memory.usage_in_bytes, v2 memory.current)."""
    parent = env("BENCH_CGROUP_PARENT")
    for name, root in hierarchies():
        for f in ("memory.usage_in_bytes", "memory.current"):
            path = os.path.join(root, parent, sid, f)
            if name in ("memory", "unified") and os.path.exists(path):
                with open(path) as fh:
                    return int(fh.read())
    return None


def our_loop_devices():
    state = env("BENCH_STATE_DIR")
    found = []
    for name in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                if f.read().startswith(state):
                    found.append(name)
        except OSError:
            pass
    return found


def our_mounts():
    state, run = env("BENCH_STATE_DIR"), env("BENCH_RUN_DIR")
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if state in line or run in line]


def leak_check():
    cgs = our_cgroups()
    return {"cgroups": cgs, "loop_devices": our_loop_devices(), "mounts": our_mounts()}
