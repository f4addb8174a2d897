"""bench/fleet_forward.py [BUILD_DIR]: what forwarding between the nodes of a fleet costs.

Two corralds on one PostgreSQL (tests/fixtures/postgres.py), on this host's loopback, with a
cluster secret; a sandbox on node-b. Each figure is measured twice in the same run, once asking
node-b itself ("direct") and once asking node-a, which forwards to node-b ("forwarded"):
  - an HTTP request: GET /v1/sandboxes/{id} on one keep-alive connection (the Python client's own
    cost is in both);
  - an exec round trip over the WebSocket, `true`, from the op to its `exit` event
    (bench/exec_rtt.cc);
  - streaming: `head -c 256M /dev/zero` read whole over the WebSocket (bench/exec_rtt.cc).
Prints a JSON report with the CPU model; the forwarded/direct ratios go to docs/FLEET.md."""
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from bench_env import BUILD
from corral_e2e import Daemon, mint
import postgres

SECRET = "bench-forward-secret-" + "0123456789abcdef" * 3
ROUNDS = 5


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_model():
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def percentiles(times):
    times = sorted(times)
    return {"p50_ms": round(statistics.median(times) * 1000, 3),
            "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))] * 1000, 3),
            "n": len(times)}


def http_times(port, path, token, runs=500, warmup=50):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    times = []
    for i in range(warmup + runs):
        t0 = time.perf_counter()
        conn.request("GET", path, headers={"Authorization": "Bearer " + token})
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path}: {response.status}")
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    conn.close()
    return times


def exec_times(port, token, sandbox, runs, warmup, argv):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([os.path.join(BUILD, "bench", "exec_rtt"), f"http://127.0.0.1:{port}", token, sandbox,
                        str(runs), str(warmup), out.name] + argv, check=True)
        return json.load(open(out.name))["times"]


def main():
    pg = postgres.Postgres(fsync=True)
    pg.start()
    url = pg.create_database("bench")
    tmp = tempfile.mkdtemp(prefix="corral-bench-forward-")
    secret_file = os.path.join(tmp, "cluster-secret")
    with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(SECRET)
    nodes = {}
    try:
        for name in ("node-a", "node-b"):
            daemon = Daemon()
            port = free_port()
            daemon.extra_api_config = "requests_per_minute = 1000000"
            daemon.extra_sections = (f'[store]\nbackend = "postgresql"\nurl = "{url}"\n\n'
                                     f'[node]\nid = "{name}"\naddress = "127.0.0.1:{port}"\nheartbeat = 1\n'
                                     f'dead_after = 3\ncluster_secret_file = "{secret_file}"\n')
            nodes[name] = daemon
            daemon.start(port=port)
        a, b = nodes["node-a"], nodes["node-b"]
        issuer_secret = a.add_issuer("bench")
        time.sleep(2)  # node-b reads the new issuer at its next heartbeat
        token = mint("bench", issuer_secret, "bench-user")
        status, sandbox = b.http("POST", "/v1/sandboxes", token, {})
        assert status == 201, sandbox
        sid = sandbox["id"]
        # node-a forwards (its answer names node-b), node-b answers itself.
        conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=30)
        conn.request("GET", f"/v1/sandboxes/{sid}", headers={"Authorization": "Bearer " + token})
        response = conn.getresponse()
        response.read()
        assert response.getheader("X-Corral-Node") == "node-b", response.getheaders()
        conn.close()
        report = {"cpu": cpu_model(), "cpus": os.cpu_count(), "rounds": ROUNDS, "figures": {}}
        raw = {label: {"http_get": [], "exec_true": [], "stream": []} for label in ("direct", "forwarded")}
        # Rounds that alternate, so that what else the machine does weighs on both alike.
        for _ in range(ROUNDS):
            for label, daemon in (("direct", b), ("forwarded", a)):
                raw[label]["http_get"] += http_times(daemon.port, f"/v1/sandboxes/{sid}", token, runs=200)
                raw[label]["exec_true"] += exec_times(daemon.port, token, sid, 100, 10, ["true"])
                raw[label]["stream"] += exec_times(daemon.port, token, sid, 2, 1,
                                                   ["head", "-c", str(256 << 20), "/dev/zero"])
        for label, times in raw.items():
            report["figures"][label] = {
                "http_get": percentiles(times["http_get"]),
                "exec_true": percentiles(times["exec_true"]),
                "stream_256MiB": {"MiB_per_s": round(256 / statistics.median(times["stream"]), 1),
                                  "n": len(times["stream"])},
            }
        direct, forwarded = report["figures"]["direct"], report["figures"]["forwarded"]
        report["ratios"] = {
            "http_get_p50": round(forwarded["http_get"]["p50_ms"] / direct["http_get"]["p50_ms"], 2),
            "exec_true_p50": round(forwarded["exec_true"]["p50_ms"] / direct["exec_true"]["p50_ms"], 2),
            "stream_throughput": round(forwarded["stream_256MiB"]["MiB_per_s"] / direct["stream_256MiB"]["MiB_per_s"],
                                       2),
        }
        print(json.dumps(report, indent=2))
        b.http("DELETE", f"/v1/sandboxes/{sid}", token)
    finally:
        for daemon in nodes.values():
            daemon.cleanup()
        pg.stop()
        os.unlink(secret_file)
        os.rmdir(tmp)


if __name__ == "__main__":
    sys.exit(main())
