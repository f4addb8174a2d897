"""daemon_bench's density phase (issue 19): how fast sandboxes come and how many one host holds.

  1. create, then a first command done (`true` over one WebSocket): sequential, CREATE_RUNS of
     them (each destroyed before the next, untimed), without a pool and with one
     ([pool] sizes = { host = POOL_SIZE }, through a config reload; refilled between creates, so
     each create finds one)
  2. creates per second: DENSITY_CONCURRENCY clients creating for CREATE_TP_SECONDS, without and
     with the pool (with it, the rate is the pool's refill rate once it is empty)
  3. DENSITY idle sandboxes made by DENSITY_CONCURRENCY clients: each create's latency by its index
     (the first 20 against the last 20), the host's MemAvailable and disk use before and after
     (per sandbox), corrald's RSS and descriptors, exec round trips at that density (in sandboxes
     picked at random), and the time to destroy them all
"""
import asyncio
import concurrent.futures
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

from daemon_bench_client import Api, env, env_int, loadavg, stats_ms, write_json, ws_connect
from daemon_bench_proc import HZ, proc_cpu_ticks, proc_status_kib


def meminfo_kib(field):
    return meminfo()[field]


def meminfo():
    with open("/proc/meminfo") as f:
        return {line.split(":")[0]: int(line.split()[1]) for line in f if line.split()[-1] == "kB"}


# Where an idle sandbox's memory goes, in /proc/meminfo's terms (the kernel's objects are in Slab
# and KernelStack, a tmpfs's files in Shmem, processes' own pages in AnonPages and PageTables,
# file systems' metadata in Buffers).
UNRECLAIMABLE = ("AnonPages", "Shmem", "SUnreclaim", "KernelStack", "PageTables", "Percpu")
MEMINFO_PARTS = ("AnonPages", "Shmem", "Buffers", "Cached", "SReclaimable", "SUnreclaim", "KernelStack",
                 "PageTables", "Percpu")


def disk_used_kib(path):
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize // 1024


def du_kib(path):
    out = subprocess.run(["du", "-sk", path], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def settle(seconds=3):
    """Lets the kernel's deferred work (namespace teardown, RCU frees) catch up before a reading."""
    subprocess.run(["sync"], check=False)
    time.sleep(seconds)


def host_ticks():
    """(busy, stolen, all) clock ticks of every CPU since boot, from /proc/stat's first line: busy
    is user, nice, system, irq and softirq; stolen is what a hypervisor took (a VM's host)."""
    with open("/proc/stat") as f:
        t = [int(v) for v in f.readline().split()[1:9]]
    return t[0] + t[1] + t[2] + t[5] + t[6], t[7], sum(t)


def every_process_ticks():
    """{(pid, comm): utime + stime} of every process now."""
    ticks = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                text = f.read()
        except OSError:
            continue  # gone meanwhile
        comm = text[text.index("(") + 1:text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        ticks[(int(name), comm)] = int(fields[11]) + int(fields[12])
    return ticks


def idle_cpu(pid, seconds):
    """While nothing is asked of it: corrald's CPU (all threads), the host's, in % of one core, and
    the processes that used the most (on a shared or virtual machine, not always corral's)."""
    print(f"density: idle window of {seconds} s begins", file=sys.stderr, flush=True)
    p0, c0, (b0, s0, a0), t0 = every_process_ticks(), proc_cpu_ticks(pid), host_ticks(), time.monotonic()
    time.sleep(seconds)
    c1, (b1, s1, a1), t1 = proc_cpu_ticks(pid), host_ticks(), time.monotonic()
    p1 = every_process_ticks()
    cores = os.cpu_count() or 1
    share = 100.0 * cores / max(1, a1 - a0)
    used = sorted(((p1[k] - v, k) for k, v in p0.items() if k in p1), reverse=True)[:3]
    top = [{"pid": k[0], "comm": k[1], "pct": 100.0 * d / HZ / (t1 - t0)} for d, k in used if d > 0]
    return {"seconds": t1 - t0, "corrald_pct": 100.0 * (c1 - c0) / HZ / (t1 - t0),
            "host_pct": share * (b1 - b0), "stolen_pct": share * (s1 - s0), "top": top}


def pooled(api):
    status, text = api.call("GET", "/metrics")
    if status != 200:
        raise RuntimeError(f"GET /metrics: HTTP {status}")
    text = text.decode() if isinstance(text, bytes) else str(text)
    m = re.search(r'^corral_sandboxes\{state="pooled"\} (\S+)$', text, re.M)
    return int(float(m.group(1))) if m else 0


def set_pool(api, size):
    """[pool] sizes in corrald's config, then a reload; waits until the pool holds `size`."""
    path = env("BENCH_CONFIG")
    with open(path) as f:
        text = f.read()
    text = re.sub(r"\[pool\]\nsizes = \{[^}]*\}\n", f"[pool]\nsizes = {{ host = {size} }}\n" if size else
                  "[pool]\nsizes = {}\n", text)
    with open(path, "w") as f:
        f.write(text)
    log = env("BENCH_LOG")
    before = open(log).read().count('"config reloaded"')
    os.kill(int(env("BENCH_DAEMON_PID")), signal.SIGHUP)
    deadline = time.time() + 30
    while open(log).read().count('"config reloaded"') <= before:
        if time.time() > deadline:
            raise RuntimeError("corrald did not reload its config")
        time.sleep(0.05)
    wait_pooled(api, size, timeout=120)


def wait_pooled(api, size, timeout=60):
    deadline = time.time() + timeout
    while pooled(api) != size:
        if time.time() > deadline:
            raise RuntimeError(f"the pool did not reach {size} (it holds {pooled(api)})")
        time.sleep(0.01)


async def exec_true(ws, sid, rid):
    """exec of ["true"] in `sid` over `ws` until its exit event; the seconds it took."""
    request = json.dumps({"id": rid, "op": "exec", "sandbox": sid, "argv": ["true"]})
    command = None
    t0 = time.perf_counter()
    async with asyncio.timeout(60):
        await ws.send(request)
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                continue
            data = json.loads(message)
            if data.get("id") == rid:
                if not data.get("ok"):
                    raise RuntimeError(f"exec refused: {data}")
                command = data["result"]["command"]
            elif data.get("event") == "exit" and command is not None and data.get("command") == command:
                outcome = data["outcome"]
                if outcome.get("outcome") != "exited" or outcome.get("exit_code") != 0:
                    raise RuntimeError(f"true did not exit 0: {outcome}")
                return time.perf_counter() - t0


def create_then_exec(runs, with_pool):
    """Sequential create -> first command done, each sandbox destroyed (untimed) before the next."""
    api = Api()
    size = env_int("POOL_SIZE", 8)

    async def go():
        ws = await ws_connect()
        times, creates = [], []
        try:
            for i in range(runs):
                if with_pool:
                    wait_pooled(api, size)
                t0 = time.perf_counter()
                status, body = api.call("POST", "/v1/sandboxes", {"name": f"first-{i}"})
                if status != 201:
                    raise RuntimeError(f"create: HTTP {status}: {body}")
                t1 = time.perf_counter()
                await exec_true(ws, body["id"], i + 1)
                times.append(time.perf_counter() - t0)
                creates.append(t1 - t0)
                api.destroy(body["id"])
        finally:
            await ws.close()
        return times, creates

    times, creates = asyncio.run(go())
    api.close()
    return {"runs": runs, "create_and_exec": stats_ms(times), "create": stats_ms(creates),
            "p99_ms": sorted(times)[max(0, int(len(times) * .99) - 1)] * 1e3}


def create_rate(clients, seconds, most):
    """Creates per second by `clients` at once for `seconds` (or until `most` are made: the daemon's
    limits allow no more); everything made is destroyed after."""
    made, lock = [], threading.Lock()
    stop_at = time.perf_counter() + seconds

    def worker(k):
        api = Api()
        n = 0
        while time.perf_counter() < stop_at and len(made) < most:
            status, body = api.call("POST", "/v1/sandboxes", {"name": f"rate-{k}-{n}"})
            if status != 201:
                raise RuntimeError(f"create: HTTP {status}: {body}")
            n += 1
            with lock:
                made.append(body["id"])
        api.close()

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        list(pool.map(worker, range(clients)))
    elapsed = time.perf_counter() - t0
    destroy_all(made, clients)
    return {"clients": clients, "seconds": elapsed, "created": len(made), "per_second": len(made) / elapsed}


def destroy_all(ids, clients):
    local = threading.local()

    def one(sid):
        if not hasattr(local, "api"):
            local.api = Api()
        local.api.destroy(sid)

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, ids))
    return time.perf_counter() - t0


def ramp(n, clients):
    """n idle sandboxes, made by `clients` at once; what they cost; exec at that density; teardown."""
    state_dir, pid = env("BENCH_STATE_DIR"), int(env("BENCH_DAEMON_PID"))
    settle(10)  # what the phases before destroyed is freed by deferred kernel work
    info0 = meminfo()
    mem0, disk0, du0 = info0["MemAvailable"], disk_used_kib(state_dir), du_kib(state_dir)
    rss0, fds0 = proc_status_kib(pid, "VmRSS"), len(os.listdir(f"/proc/{pid}/fd"))
    latencies = [None] * n
    ids = [None] * n
    counter = iter(range(n))
    lock = threading.Lock()

    def worker(_):
        api = Api()
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                break
            t0 = time.perf_counter()
            status, body = api.call("POST", "/v1/sandboxes", {"name": f"idle-{i}"})
            if status != 201:
                raise RuntimeError(f"create {i} of {n}: HTTP {status}: {body}")
            latencies[i] = time.perf_counter() - t0
            ids[i] = body["id"]
        api.close()

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        list(pool.map(worker, range(clients)))
    create_total = time.perf_counter() - t0
    settle(5)
    info1 = meminfo()
    mem1, disk1, du1 = info1["MemAvailable"], disk_used_kib(state_dir), du_kib(state_dir)
    rss1, fds1 = proc_status_kib(pid, "VmRSS"), len(os.listdir(f"/proc/{pid}/fd"))
    idle = idle_cpu(pid, env_int("IDLE_WINDOW_S", 10))
    runs = env_int("RUNS", 200)

    async def execs():
        ws = await ws_connect()
        try:
            rng = random.Random(19)
            return [await exec_true(ws, rng.choice(ids), i + 1) for i in range(runs)]
        finally:
            await ws.close()
    rtt = asyncio.run(execs())
    destroy_s = destroy_all(ids, clients)
    first, last = latencies[:20], latencies[-20:]
    print(f"density: {n} idle sandboxes in {create_total:.1f} s; MemAvailable -{(mem0 - mem1) / n:.0f} KiB and "
          f"disk +{(du1 - du0) / n:.0f} KiB each; exec p50 {stats_ms(rtt)['p50_ms']:.2f} ms; destroyed in "
          f"{destroy_s:.1f} s", file=sys.stderr)
    return {
        "n": n, "clients": clients, "create_total_s": create_total, "create": stats_ms(latencies),
        "create_first20": stats_ms(first), "create_last20": stats_ms(last),
        "mem_available_drop_kib_per_sandbox": (mem0 - mem1) / n,
        "meminfo_kib_per_sandbox": {k: (info1.get(k, 0) - info0.get(k, 0)) / n for k in MEMINFO_PARTS},
        "disk_used_kib_per_sandbox": (disk1 - disk0) / n, "du_kib_per_sandbox": (du1 - du0) / n,
        "corrald_rss_kib": [rss0, rss1], "corrald_fds": [fds0, fds1],
        "exec_at_density": stats_ms(rtt), "destroy_all_s": destroy_s, "idle_cpu": idle,
    }


def cmd_density(out_json):
    n = env_int("DENSITY", 2000)
    clients = env_int("DENSITY_CONCURRENCY", 4)
    runs = env_int("CREATE_RUNS", 200)
    tp = float(env("CREATE_TP_SECONDS", "10"))
    api = Api()
    result = {"loadavg_start": loadavg(), "pool_size": env_int("POOL_SIZE", 8)}
    set_pool(api, 0)
    result["first_command_no_pool"] = create_then_exec(runs, with_pool=False)
    result["rate_no_pool"] = create_rate(clients, tp, n)
    set_pool(api, result["pool_size"])
    result["first_command_pool"] = create_then_exec(runs, with_pool=True)
    wait_pooled(api, result["pool_size"])
    result["rate_pool"] = create_rate(clients, tp, n)
    set_pool(api, 0)
    for key in ("first_command_no_pool", "first_command_pool"):
        s = result[key]["create_and_exec"]
        print(f"{key}: p50 {s['p50_ms']:.2f} ms  p95 {s['p95_ms']:.2f} ms  p99 {result[key]['p99_ms']:.2f} ms",
              file=sys.stderr)
    for key in ("rate_no_pool", "rate_pool"):
        print(f"{key}: {result[key]['per_second']:.0f} creates/s", file=sys.stderr)
    result["ramp"] = ramp(n, clients)
    result["loadavg_end"] = loadavg()
    api.close()
    write_json(out_json, result)


# ------------------------------------------------------------------------------- report
def report_density(L, density):
    """Section 4 of the daemon report: the density phase's figures against issue 19's targets."""
    if density is None:
        return
    met = lambda ok: "**met**" if ok else "**not met**"  # noqa: E731
    nopool, pool = density["first_command_no_pool"], density["first_command_pool"]
    ramp = density["ramp"]
    n = ramp["n"]
    L.append(f"## 4. Fast and dense (issue 19): first command, creates per second, {n} idle sandboxes\n")
    L.append(f"Through the API, image `host` with the [sandbox] defaults. *Create then first command*: "
             f"`POST /v1/sandboxes`, then `exec` of `true` over an open WebSocket until its exit event, "
             f"{nopool['runs']} times in a row (each sandbox destroyed, untimed, before the next); with "
             f"the pool (`[pool] sizes = {{ host = {density['pool_size']} }}`), the pool is refilled between "
             f"creates, so each finds one. *Creates per second*: {density['rate_no_pool']['clients']} "
             f"clients creating for {density['rate_no_pool']['seconds']:.0f} s (with the pool: once it "
             f"is empty, its refill rate). Then {n} sandboxes created by {ramp['clients']} clients and "
             f"left idle. Load average {density['loadavg_start']} at the start, "
             f"{density['loadavg_end']} at the end.\n")
    L.append("| what | figure | target | |")
    L.append("|---|---:|---|---|")
    s0, s1 = nopool["create_and_exec"], pool["create_and_exec"]
    L.append(f"| create, then first command done, no pool: p50 / p95 / p99 | {s0['p50_ms']:.2f} / "
             f"{s0['p95_ms']:.2f} / {nopool['p99_ms']:.2f} ms | p50 <= 15 ms | {met(s0['p50_ms'] <= 15)} |")
    L.append(f"| the same with a warm pool: p50 / p95 / p99 | {s1['p50_ms']:.2f} / {s1['p95_ms']:.2f} / "
             f"{pool['p99_ms']:.2f} ms | p50 <= 5, p99 <= 20 ms | "
             f"{met(s1['p50_ms'] <= 5 and pool['p99_ms'] <= 20)} |")
    r0, r1 = density["rate_no_pool"], density["rate_pool"]
    L.append(f"| creates per second, {r0['clients']} clients, no pool / pool | {r0['per_second']:.0f} / "
             f"{r1['per_second']:.0f} | >= 300 | {met(max(r0['per_second'], r1['per_second']) >= 300)} |")
    f20, l20 = ramp["create_first20"], ramp["create_last20"]
    L.append(f"| create p50, first 20 vs last 20 of {n} | {f20['p50_ms']:.1f} -> {l20['p50_ms']:.1f} ms | flat | "
             f"{met(l20['p50_ms'] <= 1.5 * f20['p50_ms'])} |")
    L.append(f"| idle sandboxes held at once | {n} (every create succeeded) | 2,000 | {met(n >= 2000)} |")
    e = ramp["exec_at_density"]
    L.append(f"| exec round trip at {n}: p50 / p95 | {e['p50_ms']:.2f} / {e['p95_ms']:.2f} ms | p50 < 5 ms | "
             f"{met(e['p50_ms'] < 5)} |")
    L.append(f"| destroy all {n} ({ramp['clients']} clients) | {ramp['destroy_all_s']:.1f} s | < 20 s | "
             f"{met(ramp['destroy_all_s'] < 20)} |")
    parts = ramp.get("meminfo_kib_per_sandbox", {})
    held = sum(parts.get(k, 0) for k in UNRECLAIMABLE)
    shown = ", ".join(f"{k} {v:.0f}" for k, v in parts.items() if abs(v) >= 1)
    L.append(f"| host memory per idle sandbox: what the kernel cannot reclaim ({' + '.join(UNRECLAIMABLE)} "
             f"of /proc/meminfo, before and after, / {n}; all parts, KiB: {shown}; MemAvailable fell by "
             f"{ramp['mem_available_drop_kib_per_sandbox']:.0f} KiB each) | {held:.0f} KiB | <= 400 KiB | "
             f"{met(held <= 400)} |")
    disk = ramp["du_kib_per_sandbox"]
    L.append(f"| host disk per empty sandbox (`du` of the state dir / {n}; file system use: "
             f"{ramp['disk_used_kib_per_sandbox']:.0f} KiB) | {disk:.0f} KiB | <= 1 MiB | {met(disk <= 1024)} |")
    rss, fds = ramp["corrald_rss_kib"], ramp["corrald_fds"]
    L.append(f"| corrald's RSS and descriptors, before -> with {n} | {rss[0] // 1024} -> {rss[1] // 1024} MiB; "
             f"{fds[0]} -> {fds[1]} | | |")
    idle = ramp.get("idle_cpu")
    if idle:
        busiest = ", ".join("%s (pid %d) %.1f" % (t["comm"], t["pid"], t["pct"]) for t in idle.get("top", []))
        L.append(f"| CPU while the {n} sandboxes idle and nobody asks anything ({idle['seconds']:.0f} s), "
                 f"% of one core: corrald / the whole host (taken by the hypervisor: "
                 f"{idle.get('stolen_pct', 0):.1f}; the busiest processes: {busiest}) | "
                 f"{idle['corrald_pct']:.1f} / {idle['host_pct']:.1f} | | |")
    L.append("")
