"""daemon_bench's report (see daemon_bench.py): the "corrald (issue 3)" section of RESULTS_MD, from
the JSON the other subcommands wrote into OUT_DIR.
"""
import json
import os

import results_md  # bench/results_md.py: the marker-delimited sections
from daemon_bench_client import stats_ms
from daemon_bench_density import report_density


def load(out_dir, name):
    try:
        with open(os.path.join(out_dir, name)) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def hyperfine_stats(out_dir, tool):
    data = load(out_dir, f"latency-{tool}.json")
    if data is None:
        return None
    return stats_ms(data["results"][0]["times"])


def yes(ok):
    return "**met**" if ok else "**not met**"


def report(out_dir, results_md_path):
    meta = load(out_dir, "meta.json")
    L = results_md.report_head("corrald: exec round trip, streaming, idle sandboxes, density", meta,
                               "`bench/daemon.sh` (against a private corrald it starts)")
    L.append("")
    report_exec(L, out_dir, meta)
    report_stream(L, out_dir, meta)
    report_idle(L, out_dir)
    report_density(L, load(out_dir, "density.json"))
    report_end(L, out_dir, meta)
    results_md.write_section(results_md_path, "daemon", "\n".join(L))
    print("\n".join(L))


# ---- 1. exec
def report_exec(L, out_dir, meta):
    """Section 1: the exec round trip's table, its target, where the round trip goes."""
    ws = load(out_dir, "exec-ws.json")
    lean = load(out_dir, "exec-lean.json")
    if ws is None:
        return
    rows, ref = exec_rows(out_dir, meta, ws, lean)
    L.append("## 1. Exec round trip in a running sandbox\n")
    L.append(f"`true` in an already running sandbox or container: {meta['warmup']} warmup runs, then "
             f"{meta['runs']} runs each. The corral sandbox is the bench sandbox (image `host`, "
             f"memory {meta['sandbox_memory']}, disk {meta['sandbox_disk']}); the containers use the "
             f"cold-start bundle (7 namespaces, memory {meta['mem']} and pids {meta['pids']} limits, "
             "seccomp allowlist) with `sleep infinity` as their process. Ratios are *row p50 / "
             "runtime p50*: below 1 means the row is faster. Load average during the WebSocket "
             f"runs: {ws['loadavg_start']} at their start, {ws['loadavg_end']} at their end.\n")
    head = "| what | how | p50 ms | p95 ms | mean ms |" + "".join(
        f" p50 / {rt} exec p50 |" for rt in meta["runtimes"])
    L.append(head)
    L.append("|---|---|---:|---:|---:|" + "---:|" * len(meta["runtimes"]))
    for name, how, st in rows:
        if st is None:
            continue
        line = f"| {name} | {how} | {st['p50_ms']:.2f} | {st['p95_ms']:.2f} | {st['mean_ms']:.2f} |"
        for rt in meta["runtimes"]:
            line += f" {st['p50_ms'] / ref[rt]['p50_ms']:.2f} |" if ref.get(rt) else " – |"
        L.append(line)
    L.append("")
    if ref.get("crun"):
        exec_target(L, out_dir, ws, lean, ref)
    L.append("Where the WebSocket round trip goes: the `exec` reply arrived after p50 "
             f"{ws['reply']['p50_ms']:.2f} ms (Python client); the command's `wall_s` in its outcome "
             "(from corrald's request to corral-init until corrald has read the command's cgroup "
             "figures) "
             f"was p50 {ws['outcome_wall']['p50_ms']:.2f} ms; "
             f"corrald used {ws['corrald_cpu_ms_per_exec']:.2f} ms of CPU per exec (utime+stime, "
             f"all threads) and the Python client {ws['client_cpu_ms_per_exec']:.2f} ms.\n"
             if ws.get("outcome_wall") else "")


def exec_rows(out_dir, meta, ws, lean):
    """Section 1's rows, (name, how, stats or None), and {runtime: its stats or None}."""
    rows = []
    if lean is not None:
        rows.append(("corral, WebSocket", "`exec` of `[\"true\"]` on one open WebSocket, timed from the "
                     "request to its `exit` event (bench/exec_rtt.cc: Boost.Beast, synchronous)",
                     stats_ms(lean["times"])))
    rows += [("corral, WebSocket, Python", "the same with a Python websockets (asyncio) client",
              ws["round_trip"]),
            ("corral, CLI", "`corral exec SB -- true`: a whole process (start, connect, upgrade, "
             "exec, exit), hyperfine -N", hyperfine_stats(out_dir, "corral-cli"))]
    for tool, name, how in (
            ("corral-version", "corral CLI start alone", "`corral version`: the CLI's process "
             "start and exit, no connection (the floor of the row above)"),
            ("true", "`true` on the host", "`/bin/true`: fork+exec of `true` on the host, no "
             "sandbox (the floor of every row)")):
        st = hyperfine_stats(out_dir, tool)
        if st:
            rows.append((name, how, st))
    ref = {}
    for rt in meta["runtimes"]:
        st = hyperfine_stats(out_dir, rt)
        ref[rt] = st
        rows.append((f"{rt} exec", f"`{rt} exec CTR true` into a running container "
                     "(`sleep infinity`, cold-start bundle), hyperfine -N", st))
    return rows, ref


def exec_target(L, out_dir, ws, lean, ref):
    """Section 1's target: corral's round trip (and the CLI's) against crun exec's p50."""
    c = ref["crun"]["p50_ms"]
    r = stats_ms(lean["times"])["p50_ms"] if lean is not None else ws["round_trip"]["p50_ms"]
    py = ws["round_trip"]["p50_ms"]
    L.append(f"**Target: corral's exec round trip ≤ 1/5 of crun exec's p50.** crun exec p50 is "
             f"{c:.2f} ms, so the target is ≤ {c / 5:.2f} ms. corral's round trip over the "
             f"WebSocket has p50 {r:.2f} ms, {r / c:.2f} of crun's (1/{c / r:.1f}): "
             f"{yes(r <= c / 5)}. With the Python client it is {py:.2f} ms "
             f"({py / c:.2f} of crun's), the difference being that client's own work.")
    cli = hyperfine_stats(out_dir, "corral-cli")
    ver = hyperfine_stats(out_dir, "corral-version")
    if cli:
        L.append(f"The CLI as a whole process (p50 {cli['p50_ms']:.2f} ms) is "
                 f"{cli['p50_ms'] / c:.2f} of crun exec's p50: "
                 f"{'within' if cli['p50_ms'] <= c / 5 else 'above'} 1/5.")
        if ver:
            rest = cli["p50_ms"] - ver["p50_ms"] - r
            L.append(f"Of its p50, {ver['p50_ms']:.2f} ms is the CLI process alone (`corral "
                     "version`: the dynamically linked binary's start, see "
                     f"tools/CMakeLists.txt) and {r:.2f} ms the round trip above; the other "
                     f"{rest:.2f} ms go to the TCP connection, the WebSocket upgrade with "
                     "its token check, and the CLI's own work.")
    L.append("")


# ---- 2. streaming
STREAM_CLIENT_NAMES = {"cli": "`corral exec SB -- cat big > /dev/null` (the CLI)",
                       "websockets": "Python websockets, frames dropped",
                       "raw": "raw socket, payloads skipped (diagnostic)"}


def report_stream(L, out_dir, meta):
    """Section 2: the streaming table, its target, where the time goes."""
    sm = load(out_dir, "stream.json")
    if sm is None:
        return
    size = sm["bytes"]
    L.append("## 2. Streaming throughput\n")
    L.append(f"`cat` of a {size / 2**30:g} GiB file (zeros; `{sm['path']}`, on the sandbox's disk "
             "image and in its page cache; /tmp is a tmpfs of at most 1 GiB) to each client, which "
             f"discards it. Best of {sm['repeat']} runs per client, the clients taking turns. "
             "MB/s = 10^6 bytes per second, from the exec request (the CLI: from its start) to "
             "the exit event. The other columns describe the best run, as shares of its wall "
             "time (100 % = one core; the host has "
             f"{meta['machine']['nproc']}): CPU time (utime+stime) of corrald (all threads), of the "
             "client (the CLI: its rusage; the Python clients: this process) and of `cat` (its "
             "outcome's `cpu_user_s` + `cpu_sys_s`); and, from `/proc/.../schedstat`, how long "
             "corrald's event-loop thread was on a CPU and how long it was runnable but waiting "
             "for one (the host is shared). Load average: "
             f"{sm['loadavg_start']} at the start of these runs, {sm['loadavg_end']} at their end.\n")
    L.append("| client | best MB/s | all runs MB/s | s (best) | corrald CPU % | corrald event loop: "
             "on CPU % + waiting for a CPU % | client CPU % | cat CPU % | corral-init CPU % |")
    L.append("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    best = stream_rows(L, sm)
    L.append("")
    L.append(f"**Target: ≥ 1 GB/s.** The CLI: {best['cli']['mb_s']:.0f} MB/s, "
             f"{yes(best['cli']['mb_s'] >= 1000)}. Python websockets: "
             f"{best['websockets']['mb_s']:.0f} MB/s, {yes(best['websockets']['mb_s'] >= 1000)}. "
             f"(The raw-socket client, the daemon's delivery to a client that only parses frame "
             f"headers: {best['raw']['mb_s']:.0f} MB/s.)\n")
    stream_where(L, best, sm["bytes"])
    L.append("")


def share(b, k):
    """b[k] as a share of the run's wall time, in % ("–" if not measured)."""
    return f"{100 * b[k] / b['wall_s']:.0f}" if b.get(k) is not None else "–"


def stream_rows(L, sm):
    """Section 2's rows: each client's best run, then the floor. Returns {client: best run}."""
    size = sm["bytes"]
    names = STREAM_CLIENT_NAMES
    best = {}
    for kind, runs in sm["runs"].items():
        b = max(runs, key=lambda r: r["mb_s"])
        best[kind] = b
        L.append(f"| {names[kind]} | {b['mb_s']:.0f} | {', '.join('%.0f' % r['mb_s'] for r in runs)} | "
                 f"{b['seconds']:.2f} | {share(b, 'corrald_cpu_s')} | "
                 f"{share(b, 'corrald_main_oncpu_s')} + {share(b, 'corrald_main_runqueue_s')} | "
                 f"{share(b, 'client_cpu_s')} | {share(b, 'cat_cpu_s')} | "
                 f"{share(b, 'corral_init_cpu_s')} |")
    fl = sm["floor"][-1]
    L.append(f"| floor: `cat big > /dev/null` inside the sandbox, no client | "
             f"{size / fl['wall_s'] / 1e6:.0f} | | {fl['wall_s']:.2f} | | | | "
             f"{100 * ((fl.get('cpu_user_s') or 0) + (fl.get('cpu_sys_s') or 0)) / fl['wall_s']:.0f} | |")
    return best


def stream_where(L, best, size):
    """Section 2's "where the time goes": cores busy per client, the event loop, the framing."""
    names = STREAM_CLIENT_NAMES
    raw = best["raw"]
    per_msg = raw["data_frames"] / max(1, raw["messages"])
    L.append("Where the time goes (measured in this run):\n")
    for kind in ("cli", "websockets", "raw"):
        b = best[kind]
        w = b["wall_s"]
        on, wait = b.get("corrald_main_oncpu_s"), b.get("corrald_main_runqueue_s")
        procs = {"corrald": b.get("corrald_cpu_s", 0), "the client": b["client_cpu_s"],
                 "cat": b["cat_cpu_s"], "corral-init": b.get("corral_init_cpu_s") or 0}
        top = max(procs, key=procs.get)
        line = (f"- {names[kind]}: {sum(procs.values()) / w:.2f} cores busy with the transfer; "
                f"the busiest process is {top} ({100 * procs[top] / w:.0f} % of a core).")
        if on is not None and wait is not None:
            line += (f" corrald's event loop was on a CPU {100 * on / w:.0f} % of the time and "
                     f"waiting for one {100 * wait / w:.0f} %: idle only "
                     f"{max(0, 100 * (w - on - wait) / w):.0f} %.")
        L.append(line)
    L.append(f"- Framing: the raw client received {raw['messages']} output messages in "
             f"{raw['data_frames']} WebSocket data frames ({per_msg:.1f} frames per message; the "
             f"largest frame payload was {raw['max_frame']} bytes, {size / raw['data_frames']:.0f} "
             "data bytes per frame on average).")
    if raw["max_frame"] <= 4096 and per_msg > 2:
        L.append("  corrald reads a command's output 64 KiB at a time (`Command::buffer_`, "
                 "supervisor/commands/command.h) and sends each read as one binary message, but Boost.Beast "
                 "writes a message longer than `write_buffer_bytes` (4096 by default) as 4 KiB "
                 "fragments when `auto_fragment` is on (the default), each fragment its own "
                 "`async_write` of the socket: a `sendmsg` (which may wake the client) and a "
                 "trip through the event loop per 4 KiB, and on the client's side a frame to "
                 "read and parse per 4 KiB. `WsSession::Start` (api/server.cc) sets neither "
                 "option; the CLI sets `auto_fragment(false)` for its own sends "
                 "(tools/corral/client.cc).")


# ---- 3. idle sandboxes
def report_idle(L, out_dir):
    """Section 3: creation, memory and destruction of the idle sandboxes."""
    idle = load(out_dir, "idle.json")
    if idle is None:
        return
    n = idle["n"]
    L.append(f"## 3. corrald's memory with {n} idle sandboxes\n")
    L.append(f"{n} running sandboxes (image `host`, memory {idle['memory_bytes'] >> 20} MiB, disk "
             f"{idle['disk_bytes'] >> 20} MiB, nothing running in them), created through "
             f"`POST /v1/sandboxes` by 1 client, destroyed, then created by {idle['concurrency']} "
             "concurrent clients (one HTTP connection each) and destroyed again. Memory is read "
             "with all of them running: corrald's VmRSS (/proc/PID/status), the RSS and PSS "
             "(smaps_rollup) summed over the corral-init processes, and the sandboxes' memory "
             "cgroups (usage_in_bytes, which includes their page cache and kernel memory). Per "
             f"sandbox: corrald's VmRSS growth / {n}; corral-init's and the cgroups' sums / {n}. "
             f"Load average: {idle['loadavg_start']} at the start, "
             f"{idle['loadavg_end']} at the end.\n")
    L.append("| clients | create all s | sandboxes/s | create p50 ms | create p95 ms | "
             "destroy all s | corrald VmRSS KiB before → with all | corrald KiB per sandbox | "
             "corral-init RSS (PSS) KiB per sandbox | cgroup memory MiB per sandbox | leaks |")
    L.append("|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---|")
    for ph in idle["phases"]:
        leaks = ph["leaks"]
        nleak = sum(len(v) for v in leaks.values())
        L.append(f"| {ph['workers']} | {ph['create_total_s']:.1f} | {n / ph['create_total_s']:.1f} | "
                 f"{ph['create']['p50_ms']:.0f} | {ph['create']['p95_ms']:.0f} | "
                 f"{ph['destroy_total_s']:.1f} | {ph['rss_before_kib']} → {ph['rss_after_kib']} | "
                 f"{(ph['rss_after_kib'] - ph['rss_before_kib']) / n:.0f} | "
                 f"{ph['init_rss_kib'] / max(1, ph['init_processes']):.0f} "
                 f"({ph['init_pss_kib'] / max(1, ph['init_processes']):.0f}) | "
                 f"{ph['cgroup_memory_bytes'] / max(1, ph['cgroups_with_memory']) / 2**20:.1f} | "
                 + ("none" if nleak == 0 else f"**{nleak}**: {leaks}") + " |")
    L.append("")
    first = idle["phases"][0]
    k = max(1, first["init_processes"])
    if "init_rss_shmem_kib" in first:
        L.append(f"Of corral-init's RSS, {first['init_rss_shmem_kib'] / k:.0f} KiB per sandbox is "
                 f"shmem (RssShmem) and {first['init_rss_anon_kib'] / k:.0f} KiB anonymous memory "
                 "(RssAnon).")
        if first["init_rss_shmem_kib"] > first["init_rss_kib"] / 2:
            L.append("The shmem is the static binary itself: each sandbox's init runs from a sealed "
                     "memfd copy made for that sandbox alone (`SandboxHost::Start` calls "
                     "`isolation::LoadSealedExecutable` at every start), so no two sandboxes "
                     "share those pages, and PSS equals RSS.")
        L.append("")
    last = idle["phases"][-1]
    L.append(f"With {n} sandboxes, corrald held {last['fds_after']} open descriptors "
             f"({last['fds_before']} before; {last['fds_after_destroy']} after they were destroyed) "
             f"and {last['threads']} threads; its VmRSS after they were destroyed: "
             f"{last['rss_after_destroy_kib']} KiB. "
             f"corral-init processes counted: {last['init_processes']}. Leak check after each "
             "destruction: no directory left under the private cgroup parent in any hierarchy, no "
             "loop device whose backing file is in the state dir (`/sys/block/loop*/loop/"
             "backing_file`, what `losetup -j` reads), no mount of the state or run dir.\n")


def report_end(L, out_dir, meta):
    """corrald's VmRSS over the run, the notes, the commands, where the raw data is."""
    rs, re_ = load(out_dir, "rss-start.json"), load(out_dir, "rss-end.json")
    if rs and re_:
        L.append(f"corrald's VmRSS: {rs['vmrss_kib']} KiB right after start; {re_['vmrss_kib']} KiB at "
                 f"the end of the run, after the exec and streaming phases (peak VmHWM "
                 f"{re_['vmhwm_kib']} KiB).\n")
    if meta.get("notes"):
        L.append("## Notes\n")
        for note in meta["notes"].values():
            L.append(f"- {note}")
        L.append("")
    if meta.get("commands"):
        L.append("## Commands\n")
        for tool, c in sorted(meta["commands"].items()):
            L.append(f"- `{tool}`: `{c}`")
        L.append("")
    L.append("Raw data (hyperfine JSON, per-run times and CPU, the daemon's log): `bench/out/daemon/` "
             "(git-ignored).")
