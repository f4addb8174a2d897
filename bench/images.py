#!/usr/bin/python3
"""bench/images.py [BUILD_DIR] - images (issue 18), in ONE run:

  1. two OCI layouts made here with umoci, the same busybox root file system plus incompressible
     data: SMALL_MB (10) and LARGE_MB (1024) in all;
  2. import: `POST /v1/images/import` of each (RUNS, 3, times: the image removed and its layers
     pruned between them), against `umoci unpack` of the same layout, which is what runc and crun
     need per container (a bundle's rootfs: there is no layer sharing there);
  3. create: N (100) sandboxes of each image one after the other (`POST /v1/sandboxes`, running
     when it answers), and of the host image as the control; the time of each create and the
     disk the N took (du of the state dir's sandboxes, allocated blocks), then all destroyed;
  4. build: `corral image build` of a recipe on the small image (RUN + COPY), RUNS times
     without the cache and RUNS times with it.

Writes the "images" section of bench/RESULTS.md when N >= 100 and RUNS >= 3 (else
bench/out/RESULTS-images-trial.md) and the raw figures to bench/out/images/. Run as root
(corrald). Environment: N, RUNS, SMALL_MB, LARGE_MB, RESULTS_MD, CORRAL_BUILD_DIR (or the
BUILD_DIR argument).
"""
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from bench_env import HERE  # first: sets up the paths

from corral_e2e import CORRAL, Daemon, mint  # noqa: E402
from results_md import pct, publish  # noqa: E402
from test_images import busybox_entries, umoci_layout  # noqa: E402

N = int(os.environ.get("N", "100"))
RUNS = int(os.environ.get("RUNS", "3"))
SIZES = {"small": int(os.environ.get("SMALL_MB", "10")), "large": int(os.environ.get("LARGE_MB", "1024"))}
OUT = os.path.join(HERE, "out", "images")
CHUNK_MB = 16


def cpu_model():
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "?")


def du_bytes(path):
    """Allocated bytes under path (du -s -B1), 0 when it is not there."""
    if not os.path.exists(path):
        return 0
    out = subprocess.run(["du", "-s", "-B1", path], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def layout_of(work, name, mb):
    """An OCI layout of busybox plus `mb` MB of random data in files of CHUNK_MB."""
    entries = busybox_entries() + [("data", "dir", None, 0, 0o755)]
    left = mb
    while left > 0:
        size = min(CHUNK_MB, left)
        entries.append((f"data/blob-{len(entries)}", "file", os.urandom(size << 20), 0, 0o644))
        left -= size
    return umoci_layout(work, name, entries)


def timed(fn):
    started = time.monotonic()
    result = fn()
    return time.monotonic() - started, result


def check(status, body, what):
    if status not in (200, 201, 204):
        raise RuntimeError(f"{what}: {status} {body}")
    return body


def bench_import(daemon, layout, name):
    """Seconds per import of `layout` as `name`, each from nothing (removed and pruned between)."""
    times = []
    for _ in range(RUNS):
        seconds, (status, body) = timed(lambda: daemon.admin("POST", "/v1/images/import",
                                                             {"path": layout, "name": name}))
        check(status, body, f"import {name}")
        times.append(seconds)
        check(*daemon.admin("DELETE", f"/v1/images/{body['digest']}"), f"remove {name}")
        check(*daemon.admin("POST", "/v1/images/prune"), "prune")
    check(*daemon.admin("POST", "/v1/images/import", {"path": layout, "name": name}), f"import {name}")
    return times


def bench_unpack(work, layout):
    """Seconds and bytes of `umoci unpack` of the layout into a bundle, RUNS times."""
    times, sizes = [], []
    for i in range(RUNS):
        bundle = os.path.join(work, f"bundle-{os.path.basename(layout)}-{i}")
        seconds, _ = timed(lambda: subprocess.run(["umoci", "unpack", "--image", f"{layout}:latest", bundle],
                                                  check=True, capture_output=True))
        times.append(seconds)
        sizes.append(du_bytes(os.path.join(bundle, "rootfs")))
        shutil.rmtree(bundle)
    return times, sizes


def bench_create(daemon, token, image):
    """Seconds per create of N sandboxes of `image`, and the bytes they took on disk together."""
    sandboxes_dir = os.path.join(daemon.state_dir, "sandboxes")
    before = du_bytes(sandboxes_dir)
    times, ids = [], []
    try:
        for _ in range(N):
            seconds, (status, body) = timed(lambda: daemon.http("POST", "/v1/sandboxes", token, {"image": image}))
            check(status, body, f"create of {image}")
            times.append(seconds)
            ids.append(body["id"])
        used = du_bytes(sandboxes_dir) - before
    finally:
        for sid in ids:
            daemon.http("DELETE", f"/v1/sandboxes/{sid}", token)
    return times, used


def bench_build(daemon, context, cached):
    times = []
    for i in range(RUNS):
        # A RUN again makes a new layer (its files' times), so each uncached build its own tag.
        tag = "built:cached" if cached else f"built:{i}"
        argv = [CORRAL, "image", "build", "--admin-socket", daemon.admin_socket, "--json", "-t", tag,
                *([] if cached else ["--no-cache"]), context]
        seconds, proc = timed(lambda: subprocess.run(argv, capture_output=True, text=True))
        if proc.returncode != 0:
            raise RuntimeError(f"build: {proc.stderr[-2000:]}")
        result = json.loads(proc.stdout)
        if result["cached"] != (2 if cached else 0):
            raise RuntimeError(f"build: cached {result['cached']}, expected {2 if cached else 0}")
        times.append(seconds)
    return times


def ms(values):
    return f"{statistics.median(values) * 1000:.0f}"


def report(figures, elapsed):
    f = figures
    c = {k: f["create"][k]["seconds"] for k in ("host", "small", "large")}
    disk = {k: f["create"][k]["bytes"] / N / (1 << 20) for k in ("host", "small", "large")}
    lines = [f"""## Images (`bench/images.py`)

Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} ({elapsed:.0f} s for the whole run) on
**{f['cpu']}**, {os.cpu_count()} CPUs, kernel {os.uname().release}, `{f['umoci']}`. Command:
`sudo bench/images.py build` (N={N}, RUNS={RUNS}). Two images of the same busybox root file system
plus random data: small {SIZES['small']} MB, large {SIZES['large']} MB (unpacked:
{f['image_bytes']['small'] / (1 << 20):.0f} and {f['image_bytes']['large'] / (1 << 20):.0f} MiB in the store).

**Create: {N} sandboxes of each, one after the other** (each running when its `POST
/v1/sandboxes` answers; `default_disk` 256M, a sparse ext4 image per sandbox):

| image | p50 ms | p95 ms | mean ms | disk per sandbox MiB | p50 ratio (image/small) | disk ratio (image/small) |
| --- | ---: | ---: | ---: | ---: | ---: | ---: |"""]
    for k in ("small", "large", "host"):
        lines.append(f"| {k} | {ms(c[k])} | {pct(c[k], 0.95) * 1000:.0f} | {statistics.mean(c[k]) * 1000:.0f} | "
                     f"{disk[k]:.2f} | {statistics.median(c[k]) / statistics.median(c['small']):.2f} | "
                     f"{disk[k] / disk['small']:.2f} |")
    lines.append(f"""
The large image's sandboxes cost what the small one's do: the layers are shared, read-only,
overlayfs lower layers (idmapped), so a sandbox's create time and disk are its own writable layer's
and its start's, whatever the image's size. `host` is the control without image layers.

**Import, and the reference: unpacking the same layout for runc or crun** (`umoci unpack`: one
bundle's rootfs, which each of their containers needs; {N} containers of the large image would
need {N} of them, {N * f['unpack']['large']['bytes'][0] / (1 << 30):.1f} GiB):

| image | corral import p50 ms | `umoci unpack` p50 ms | ratio (unpack/import) | unpacked MiB |
| --- | ---: | ---: | ---: | ---: |""")
    for k in ("small", "large"):
        imp, unp = f["import"][k], f["unpack"][k]["seconds"]
        lines.append(f"| {k} | {ms(imp)} | {ms(unp)} | {statistics.median(unp) / statistics.median(imp):.2f} | "
                     f"{statistics.median(f['unpack'][k]['bytes']) / (1 << 20):.0f} |")
    lines.append(f"""
The import verifies each layer's digest, unpacks it with libarchive (whiteouts, the checks of
bad input) into a temporary directory and moves it into place: once per layer, for every sandbox
of the host.

**Build** (`corral image build`, `FROM small`, a RUN and a COPY): p50 {ms(f['build']['uncached'])} ms
without the cache (`--no-cache`: the RUN's sandbox created, run, destroyed, its writable layer
captured), {ms(f['build']['cached'])} ms with it (every step a hit). No builder (buildah, docker) is
installed here to compare with in the same run.

Raw figures: `bench/out/images/`.
""")
    return "\n".join(lines)


def main():
    if os.geteuid() != 0:
        raise SystemExit("run as root (corrald)")
    if shutil.which("umoci") is None:
        raise SystemExit("umoci is not installed (dist/install-deps.sh)")
    os.makedirs(OUT, exist_ok=True)
    started = time.monotonic()
    work = tempfile.mkdtemp(prefix="corral-bench-images-", dir="/var/tmp")
    daemon = Daemon()
    daemon.extra_config = f"""max_sandboxes_per_user = {N + 10}
max_sandboxes = {N + 10}

[images]
max_size = "{SIZES['large'] + 512}M"
"""
    figures = {"cpu": cpu_model(), "create": {}, "unpack": {}, "import": {}, "image_bytes": {},
               "umoci": subprocess.run(["umoci", "--version"], capture_output=True, text=True).stdout.strip()}
    try:
        layouts = {k: layout_of(work, k, mb) for k, mb in SIZES.items()}
        daemon.start()
        token = mint("bench", daemon.add_issuer("bench"), "bencher")
        for k, layout in layouts.items():
            times, sizes = bench_unpack(work, layout)
            figures["unpack"][k] = {"seconds": times, "bytes": sizes}
            figures["import"][k] = bench_import(daemon, layout, f"{k}:1")
            figures["image_bytes"][k] = du_bytes(os.path.join(daemon.state_dir, "images"))
        figures["image_bytes"]["large"] -= figures["image_bytes"]["small"]
        for k, image in (("small", "small:1"), ("large", "large:1"), ("host", "host")):
            times, used = bench_create(daemon, token, image)
            figures["create"][k] = {"seconds": times, "bytes": used}
        context = os.path.join(work, "context")
        os.makedirs(context)
        with open(os.path.join(context, "file.txt"), "w") as f:
            f.write("copied\n")
        with open(os.path.join(context, "Recipe"), "w") as f:
            f.write("FROM small:1\nRUN echo built > /built\nCOPY file.txt /file.txt\n")
        figures["build"] = {"uncached": bench_build(daemon, context, cached=False),
                            "cached": bench_build(daemon, context, cached=True)}
    finally:
        daemon.cleanup()
        shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(OUT, "figures.json"), "w") as f:
        json.dump(figures, f, indent=1)
    body = report(figures, time.monotonic() - started)
    print(body)
    publish("images", body, full=N >= 100 and RUNS >= 3)


if __name__ == "__main__":
    main()
