#!/usr/bin/python3
"""Helpers of bench/cold_start.sh (run with /usr/bin/python3; standard library only).

  bundle OUT_DIR ROOTFS CGROUPS_PATH MEM_BYTES PIDS HOST_UID   write OUT_DIR/config.json
  throughput SECONDS CMD_JSON [CMD_JSON...]                    one worker per command; JSON out
  report OUT_DIR RESULTS_MD                                    percentiles + the cold_start
                                                               section of RESULTS_MD
"""
import ctypes
import ctypes.util
import json
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no bench/__pycache__ in the source tree
import results_md as results_md_lib  # noqa: E402  (bench/results_md.py: sections with markers)
pct = results_md_lib.pct

# ---------------------------------------------------------------------------------- OCI bundle
# Seccomp for crun/runc: no Docker/containers profile is installed on this host, so the bundle
# carries its own, in the same shape as Docker's default: default action EPERM, an allowlist of
# every x86_64 syscall (from the kernel headers, as known to the installed libseccomp) minus the
# privileged/dangerous ones below; clone only without namespace flags; clone3 -> ENOSYS (so libc
# falls back to clone). Same architectures as Docker (x86_64, x86, x32).
DENY = set("""
acct add_key bpf clock_adjtime clock_settime create_module delete_module finit_module
get_kernel_syms init_module ioperm iopl kcmp kexec_file_load kexec_load keyctl lookup_dcookie
mount umount2 move_mount open_tree fsopen fsconfig fsmount fspick mount_setattr pivot_root
name_to_handle_at open_by_handle_at nfsservctl perf_event_open process_vm_readv
process_vm_writev ptrace query_module quotactl quotactl_fd reboot request_key setns unshare
settimeofday swapon swapoff sysfs _sysctl uselib userfaultfd ustat vm86 vm86old
io_uring_setup io_uring_enter io_uring_register syslog vhangup mbind set_mempolicy
get_mempolicy move_pages set_mempolicy_home_node afs_syscall tuxcall security putpmsg getpmsg
epoll_ctl_old epoll_wait_old chroot clone clone3 personality
""".split())
CLONE_NS_FLAGS = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET


def syscall_names():
    names = []
    with open("/usr/include/x86_64-linux-gnu/asm/unistd_64.h") as f:
        for line in f:
            m = re.match(r"#define __NR_(\w+)\s+\d+", line)
            if m:
                names.append(m.group(1))
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2")
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    known = [n for n in names if lib.seccomp_syscall_resolve_name(n.encode()) >= 0]
    return sorted(set(known) - DENY)


def seccomp_profile():
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
        "syscalls": [
            {"names": syscall_names(), "action": "SCMP_ACT_ALLOW"},
            {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
             "args": [{"index": 0, "value": CLONE_NS_FLAGS, "valueTwo": 0,
                       "op": "SCMP_CMP_MASKED_EQ"}]},
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
        ],
    }


def bundle(out_dir, rootfs, cgroups_path, mem_bytes, pids, host_uid):
    mem, host_uid = int(mem_bytes), int(host_uid)
    caps = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]  # `crun spec`'s default set
    cfg = {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": ["/bin/true"],
            "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
            "capabilities": {k: caps for k in ("bounding", "effective", "permitted")},
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": os.path.abspath(rootfs), "readonly": True},
        "hostname": "bench",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
             "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "nodev", "mode=1777"]},
            {"destination": "/usr", "type": "bind", "source": "/usr",
             "options": ["rbind", "ro", "nosuid", "nodev"]},
        ],
        "linux": {
            "uidMappings": [{"containerID": 0, "hostID": host_uid, "size": 65536}],
            "gidMappings": [{"containerID": 0, "hostID": host_uid, "size": 65536}],
            "namespaces": [{"type": t} for t in
                           ("pid", "network", "ipc", "uts", "mount", "user", "cgroup")],
            "cgroupsPath": cgroups_path,
            "resources": {
                "devices": [{"allow": False, "access": "rwm"}],
                "memory": {"limit": mem, "swap": mem},  # memory+swap == memory: swap off
                "pids": {"limit": int(pids)},
            },
            "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
                            "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                            "/proc/sched_debug", "/proc/scsi", "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                              "/proc/sysrq-trigger"],
            "seccomp": seccomp_profile(),
        },
    }
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    n = len(cfg["linux"]["seccomp"]["syscalls"][0]["names"])
    print(f"{out_dir}/config.json: seccomp allowlist of {n} syscalls")


# ---------------------------------------------------------------------------------- throughput
def throughput(seconds, cmds):
    """One worker thread per command: run it back to back until the deadline; count the runs
    that completed before it (a run still going at the deadline is finished but not counted).
    Any failed run aborts with its stderr."""
    seconds = float(seconds)
    counts = [0] * len(cmds)
    errors = []
    start = time.monotonic()
    deadline = start + seconds

    def worker(i, cmd):
        while not errors:
            p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE)
            if p.returncode != 0:
                errors.append(f"worker {i}: {' '.join(cmd)} exited {p.returncode}: "
                              f"{p.stderr.decode(errors='replace').strip()[-500:]}")
                return
            if time.monotonic() > deadline:
                return
            counts[i] += 1

    threads = [threading.Thread(target=worker, args=(i, c)) for i, c in enumerate(cmds)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        print("throughput: FAILED: " + errors[0], file=sys.stderr)
        sys.exit(1)
    print(json.dumps({"seconds": seconds, "workers": len(cmds), "per_worker": counts,
                      "completed": sum(counts), "per_s": sum(counts) / seconds}))


# ---------------------------------------------------------------------------------- report
def report(out_dir, results_md):
    with open(os.path.join(out_dir, "meta.json")) as f:
        meta = json.load(f)
    ref = meta["ref"]
    rows = {}
    for tool in meta["tools"]:
        with open(os.path.join(out_dir, f"latency-{tool}.json")) as f:
            times = json.load(f)["results"][0]["times"]
        with open(os.path.join(out_dir, f"throughput-{tool}.json")) as f:
            tp = json.load(f)
        rss = []
        try:
            with open(os.path.join(out_dir, f"rss-{tool}.txt")) as f:
                rss = [int(x) for x in f.read().split()]
        except FileNotFoundError:
            pass
        rows[tool] = {"n": len(times), "p50": pct(times, .5) * 1e3, "p95": pct(times, .95) * 1e3,
                      "mean": sum(times) / len(times) * 1e3, "tp": tp["per_s"],
                      "tp_runs": tp["completed"], "rss": rss}
    summary = {t: {k: v for k, v in r.items() if k != "rss"} for t, r in rows.items()}
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)

    R = rows.get(ref)
    L = results_md_lib.report_head("Cold-start benchmark: create a sandbox, run `/bin/true`, tear it down",
                                   meta, "`bench/cold_start.sh`")
    L.append("\n## Results\n")
    L.append(f"Latency: hyperfine `-N`, {meta['warmup']} warmup runs, then {meta['runs']} runs per "
             f"tool; p50/p95 from hyperfine's per-run `times`. Throughput: {meta['tp_workers']} "
             f"parallel workers running the same command back to back for {meta['tp_seconds']:g} s "
             "(completed sandboxes per second, all workers together). Ratios are "
             f"*tool / {ref}*: a p50 ratio above 1 and a throughput ratio below 1 mean "
             f"{ref} is faster.\n")
    L.append(f"| tool | what | p50 ms | p95 ms | mean ms | throughput /s | p50 ratio (tool/{ref}) "
             f"| throughput ratio (tool/{ref}) |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|")
    for tool in meta["tools"]:
        r = rows[tool]
        if R and tool != ref:
            pr, tr = f"{r['p50'] / R['p50']:.2f}", f"{r['tp'] / R['tp']:.2f}"
        elif R:
            pr = tr = "1.00"
        else:
            pr = tr = "–"
        L.append(f"| `{tool}` | {meta['what'][tool]} | {r['p50']:.2f} | {r['p95']:.2f} | "
                 f"{r['mean']:.2f} | {r['tp']:.0f} | {pr} | {tr} |")
    L.append("")
    if "corral" in rows and "bwrap-cg" in rows:
        speedup = rows["bwrap-cg"]["p50"] / rows["corral"]["p50"]
        L.append(f"Target (issue 19): `corral run` at least 1.5x faster than bubblewrap in a cgroup, p50: "
                 f"{speedup:.2f}x, **{'met' if speedup >= 1.5 else 'not met'}** on this machine. A write of a pid "
                 "to `cgroup.procs` waits for an RCU grace period unless another one happened within the last "
                 "period (so a tool's own speed in a back-to-back loop decides whether it pays that wait); "
                 "corral's sandbox joins its cgroup without one (v1: its first thread writes 0 to `tasks`; "
                 "v2: `CLONE_INTO_CGROUP`), `cgwrap` writes `cgroup.procs`.\n")
    if any(rows[t]["rss"] for t in rows):
        L.append("## Peak RSS\n")
        L.append("`/usr/bin/time -f %M` over the whole command, "
                 f"{meta['rss_runs']} runs per tool. This is the largest RSS of the launched "
                 "process and of every process it waited for (a maximum, not a sum), so it is "
                 "the runtime itself unless a child was larger.\n")
        L.append("| tool | peak RSS KiB (median) | peak RSS KiB (max) |")
        L.append("|---|---:|---:|")
        for tool in meta["tools"]:
            rs = rows[tool]["rss"]
            if rs:
                L.append(f"| `{tool}` | {pct(rs, .5):.0f} | {max(rs)} |")
        L.append("")
    if meta.get("notes"):
        L.append("## Notes\n")
        for note in meta["notes"].values():
            L.append(f"- {note}")
        L.append("")
    L.append("## Commands\n")
    for tool in meta["tools"]:
        L.append(f"- `{tool}`: `{meta['commands'][tool]}`")
    L.append("")
    L.append("Raw hyperfine JSON, throughput counts and RSS samples: `bench/out/` (git-ignored).")
    # Only this benchmark's section of the file (between its markers); other sections stay.
    results_md_lib.write_section(results_md, "cold_start", "\n".join(L))
    # console summary
    for tool in meta["tools"]:
        r = rows[tool]
        print(f"{tool:10s} p50 {r['p50']:7.2f} ms  p95 {r['p95']:7.2f} ms  "
              f"throughput {r['tp']:6.0f}/s" +
              (f"  peak RSS {max(r['rss'])} KiB" if r['rss'] else ""))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "bundle":
        bundle(*args)
    elif cmd == "throughput":
        throughput(args[0], [json.loads(a) for a in args[1:]])
    elif cmd == "report":
        report(*args)
    else:
        sys.exit(f"unknown subcommand {cmd}")
