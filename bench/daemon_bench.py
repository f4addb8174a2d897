#!/usr/bin/python3
"""Driver of bench/daemon.sh (run with /usr/bin/python3: Debian's python3-websockets, standard
library otherwise). Every subcommand talks to the corrald that daemon.sh started, named by the
environment (BENCH_* below, CORRAL_URL, CORRAL_TOKEN), and writes JSON into OUT_DIR.

  setup ENV_FILE        wait for corrald's "listening" line, add an issuer, mint a token; writes
                        shell assignments (CORRAL_URL, CORRAL_TOKEN, ...) to ENV_FILE
  create NAME MEM DISK  create a running sandbox; prints its id
  exec-ws OUT_JSON      exec round trips of ["true"] over one WebSocket (RUNS, WARMUP)
  stream OUT_JSON       cat of a STREAM_BYTES file to three clients, STREAM_REPEAT times each
  idle OUT_JSON         IDLE_SANDBOXES idle sandboxes: creation (sequential, then concurrent),
                        RSS, destruction, leak check
  density OUT_JSON      create then first command (pool off and on), creates per second, DENSITY
                        idle sandboxes (daemon_bench_density.py)
  rss OUT_JSON          corrald's VmRSS now
  destroy-all           destroy every sandbox of the daemon (cleanup; admin socket)
  report OUT_DIR RESULTS_MD   the "corrald (issue 3)" section of RESULTS_MD

Environment: BENCH_LOG (corrald's log), BENCH_ADMIN_SOCKET, BENCH_STATE_DIR, BENCH_RUN_DIR,
BENCH_CGROUP_PARENT (relative to the hierarchies' roots), BENCH_DAEMON_PID, BENCH_SANDBOX,
CORRAL (the CLI).

The subcommands' shared parts live beside this file: daemon_bench_client.py (environment, figures,
the HTTP and WebSocket clients), daemon_bench_proc.py (/proc, cgroups, the leak check),
daemon_bench_stream.py (the streaming phase) and daemon_bench_report.py (the report).
"""
import asyncio
import concurrent.futures
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no bench/__pycache__ in the source tree
from daemon_bench_client import (ISSUER, Api, admin, env, env_int, loadavg, mint,  # noqa: E402
                                 parse_size, stats_ms, write_json, ws_connect)
from daemon_bench_proc import (CpuSampler, leak_check, our_loop_devices,  # noqa: E402
                               proc_pss_kib, proc_status_kib, sandbox_init_pids,
                               sandbox_memory_bytes)
from daemon_bench_report import report  # noqa: E402
from daemon_bench_stream import cmd_stream  # noqa: E402
from daemon_bench_density import cmd_density  # noqa: E402


# ------------------------------------------------------------------------------- setup
def cmd_setup(env_file):
    log, pid = env("BENCH_LOG"), int(env("BENCH_DAEMON_PID"))
    deadline = time.time() + 60
    port = None
    while port is None:
        if time.time() > deadline:
            sys.exit("daemon_bench: corrald did not log 'listening' within 60 s")
        if not os.path.exists(f"/proc/{pid}"):
            sys.exit("daemon_bench: corrald exited at start (see its log)")
        with open(log) as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("msg") == "listening" and entry.get("component") == "corrald":
                    port = int(entry["address"].rsplit(":", 1)[1])
        time.sleep(0.05)
    status, body = admin("POST", "/v1/admin/issuers", {"name": ISSUER})
    if status != 201:
        sys.exit(f"daemon_bench: cannot add issuer: HTTP {status}: {body}")
    token = mint(ISSUER, body["secret"], "bench", ttl=6 * 3600)
    with open(env_file, "w") as f:
        f.write(f"CORRAL_URL=http://127.0.0.1:{port}\nCORRAL_TOKEN={token}\n")


def cmd_create(name, memory, disk):
    api = Api()
    print(api.create(name, parse_size(memory), parse_size(disk)))


def cmd_rss(out_json):
    pid = int(env("BENCH_DAEMON_PID"))
    write_json(out_json, {"vmrss_kib": proc_status_kib(pid, "VmRSS"),
                          "vmhwm_kib": proc_status_kib(pid, "VmHWM")})


def cmd_destroy_all():
    status, body = admin("GET", "/v1/admin/sandboxes")
    if status != 200:
        sys.exit(f"daemon_bench: cannot list sandboxes: HTTP {status}: {body}")
    failed = 0
    for sb in body.get("sandboxes", []):
        s, b = admin("DELETE", f"/v1/sandboxes/{sb['id']}")
        if s != 200:
            print(f"daemon_bench: destroy {sb['id']}: HTTP {s}: {b}", file=sys.stderr)
            failed += 1
    sys.exit(1 if failed else 0)


# ------------------------------------------------------------------------------- 1. exec
async def exec_ws(out_json):
    sid, runs, warmup = env("BENCH_SANDBOX"), env_int("RUNS", 200), env_int("WARMUP", 10)
    daemon_pid = int(env("BENCH_DAEMON_PID"))
    load0 = loadavg()
    ws = await ws_connect()
    rid = 0

    async def one():
        nonlocal rid
        rid += 1
        my_id = rid
        request = json.dumps({"id": my_id, "op": "exec", "sandbox": sid, "argv": ["true"]})
        command, t_reply = None, None
        async with asyncio.timeout(60):  # cheap, unlike a wait_for() task per message
            t0 = time.perf_counter()
            await ws.send(request)
            while True:
                message = await ws.recv()
                if isinstance(message, bytes):
                    continue  # output: `true` has none
                data = json.loads(message)
                if data.get("id") == my_id:
                    if not data.get("ok"):
                        raise RuntimeError(f"exec refused: {data}")
                    t_reply = time.perf_counter()
                    command = data["result"]["command"]
                elif data.get("event") == "exit" and command is not None and data.get("command") == command:
                    # (events of a command follow the reply to its exec)
                    t1 = time.perf_counter()
                    outcome = data["outcome"]
                    if outcome.get("outcome") != "exited" or outcome.get("exit_code") != 0:
                        raise RuntimeError(f"true did not exit 0: {outcome}")
                    return t1 - t0, t_reply - t0, outcome.get("wall_s")

    for _ in range(warmup):
        await one()
    rt, reply, wall = [], [], []
    cpu = CpuSampler(daemon_pid)
    a = cpu.sample()
    own0 = os.times()
    for _ in range(runs):
        r, q, w = await one()
        rt.append(r)
        reply.append(q)
        if w is not None:
            wall.append(w)
    own1 = os.times()
    b = cpu.sample()
    await ws.close()
    d = CpuSampler.delta(a, b)
    write_json(out_json, {
        "runs": runs, "warmup": warmup, "times": rt, "loadavg_start": load0, "loadavg_end": loadavg(),
        "round_trip": stats_ms(rt), "reply": stats_ms(reply),
        "outcome_wall": stats_ms(wall) if wall else None,
        "corrald_cpu_ms_per_exec": d["corrald_cpu_s"] / runs * 1e3,
        "client_cpu_ms_per_exec": ((own1.user - own0.user) + (own1.system - own0.system)) / runs * 1e3,
    })
    s = stats_ms(rt)
    print(f"exec over WebSocket: p50 {s['p50_ms']:.2f} ms  p95 {s['p95_ms']:.2f} ms  "
          f"mean {s['mean_ms']:.2f} ms", file=sys.stderr)



# ------------------------------------------------------------------------------- 3. idle sandboxes
def cmd_idle(out_json):
    n = env_int("IDLE_SANDBOXES", 200)
    conc = env_int("CREATE_CONCURRENCY", 8)
    mem, disk = parse_size(env("IDLE_MEMORY", "64M")), parse_size(env("IDLE_DISK", "64M"))
    pid = int(env("BENCH_DAEMON_PID"))
    result = {"n": n, "concurrency": conc, "memory_bytes": mem, "disk_bytes": disk, "phases": [],
              "loadavg_start": loadavg()}
    local = threading.local()

    def api():
        if not hasattr(local, "api"):
            local.api = Api()
        return local.api

    def timed(fn, *a):
        t0 = time.perf_counter()
        value = fn(*a)
        return value, time.perf_counter() - t0

    for mode, workers in (("sequential", 1), ("concurrent", conc)):
        leftover = leak_check()["cgroups"]
        if leftover:
            raise RuntimeError(f"cgroups left before the {mode} phase: {leftover[:5]}")
        phase = {"mode": mode, "workers": workers,
                 "rss_before_kib": proc_status_kib(pid, "VmRSS"),
                 "fds_before": len(os.listdir(f"/proc/{pid}/fd"))}
        names = [f"idle-{mode[:3]}-{i}" for i in range(n)]
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            made = list(pool.map(lambda name: timed(lambda: api().create(name, mem, disk)), names))
        phase["create_total_s"] = time.perf_counter() - t0
        ids = [sid for sid, _ in made]
        phase["create"] = stats_ms([dt for _, dt in made])
        time.sleep(2)  # let the last starts settle (init's first allocations)
        init_rss = init_pss = init_anon = init_shmem = 0
        cg_mem = []
        inits = 0
        for sid in ids:
            for p in sandbox_init_pids(sid):
                inits += 1
                init_rss += proc_status_kib(p, "VmRSS")
                init_anon += proc_status_kib(p, "RssAnon")
                init_shmem += proc_status_kib(p, "RssShmem")  # its memfd copy of the binary
                init_pss += proc_pss_kib(p)
            m = sandbox_memory_bytes(sid)
            if m is not None:
                cg_mem.append(m)
        phase.update({
            "rss_after_kib": proc_status_kib(pid, "VmRSS"),
            "hwm_after_kib": proc_status_kib(pid, "VmHWM"),
            "fds_after": len(os.listdir(f"/proc/{pid}/fd")),
            "threads": len(os.listdir(f"/proc/{pid}/task")),
            "init_processes": inits, "init_rss_kib": init_rss, "init_pss_kib": init_pss,
            "init_rss_anon_kib": init_anon, "init_rss_shmem_kib": init_shmem,
            "cgroup_memory_bytes": sum(cg_mem), "cgroups_with_memory": len(cg_mem),
            "loop_devices": len(our_loop_devices()),
        })
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            gone = list(pool.map(lambda sid: timed(lambda: api().destroy(sid)), ids))
        phase["destroy_total_s"] = time.perf_counter() - t0
        phase["destroy"] = stats_ms([dt for _, dt in gone])
        # Nothing may be left: cgroups under the private parent, loop devices on the state
        # dir's images, mounts of the state or run dir. (Checked until 10 s have passed.)
        leaks = settled_leaks()
        phase["leaks"] = leaks
        phase["rss_after_destroy_kib"] = proc_status_kib(pid, "VmRSS")
        phase["fds_after_destroy"] = len(os.listdir(f"/proc/{pid}/fd"))
        result["phases"].append(phase)
        print(f"idle {mode}: {n} created in {phase['create_total_s']:.1f} s; corrald VmRSS "
              f"{phase['rss_before_kib']} -> {phase['rss_after_kib']} KiB; leaks: "
              f"{sum(len(v) for v in leaks.values())}", file=sys.stderr)
        if any(leaks.values()):
            write_json(out_json, result)
            raise RuntimeError(f"leaked after destroying every sandbox: {leaks}")
    result["loadavg_end"] = loadavg()
    write_json(out_json, result)


def settled_leaks():
    """leak_check() until it finds nothing, for at most 10 s (a destroy's last steps are async)."""
    deadline = time.time() + 10
    while True:
        leaks = leak_check()
        if not any(leaks.values()) or time.time() > deadline:
            return leaks
        time.sleep(0.2)


def cmd_leaks(out_json):
    """After every sandbox is destroyed: nothing under the cgroup parent, no loop device on the
    state dir's images, no mount of the state or run dir in this mount namespace."""
    leaks = settled_leaks()
    write_json(out_json, leaks)
    if any(leaks.values()):
        print(f"daemon_bench: leaked: {leaks}", file=sys.stderr)
        sys.exit(1)



# ------------------------------------------------------------------------------- main
if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "setup":
        cmd_setup(*args)
    elif cmd == "create":
        cmd_create(*args)
    elif cmd == "exec-ws":
        asyncio.run(exec_ws(*args))
    elif cmd == "stream":
        cmd_stream(*args)
    elif cmd == "idle":
        cmd_idle(*args)
    elif cmd == "density":
        cmd_density(*args)
    elif cmd == "report":
        report(*args)
    elif cmd == "leaks":
        cmd_leaks(*args)
    elif cmd == "rss":
        cmd_rss(*args)
    elif cmd == "destroy-all":
        cmd_destroy_all()
    else:
        sys.exit(f"daemon_bench: unknown subcommand {cmd}")
