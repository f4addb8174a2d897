#!/usr/bin/python3
"""bench/egress.py [BUILD_DIR] - the egress proxy and full network mode (issue 5), in ONE run:

  1. added latency per connection: RUNS (50) `curl https://example.test/whoami` (a new TCP and
     TLS connection each, the answer is 25 bytes) from inside a sandbox through its egress proxy
     (CONNECT), against the same curl run directly in the network namespace the proxy connects
     from (`ip netns exec`); curl's own time_total, so neither side pays for starting curl;
  2. throughput: SIZE_MB (256) MiB downloaded over HTTPS through the proxy (CONNECT), and the
     same directly, best of 3 each.

Both again from a sandbox in full network mode (its own eth0, a veth to a router namespace of
tests/fixtures/fake_internet.py with corrald's nftables filter and NAT, then a veth to the fake
internet): what the kernel path costs, next to the proxy's.

Both sides talk to the same servers of tests/fixtures/fake_internet.py (a network namespace with
public-looking addresses; Python's HTTPS server, which limits the absolute figures: the ratio is
the proxy's share). Writes the "egress" section of bench/RESULTS.md when RUNS >= 50 (else
bench/out/RESULTS-egress-trial.md). Run as root. Environment: RUNS, SIZE_MB, RESULTS_MD,
CORRAL_BUILD_DIR (or the BUILD_DIR argument).
"""
import os
import platform
import statistics
import time

import bench_env  # noqa: F401 (first: sets up the paths)

from corral_e2e import Daemon, WsClient, mint  # noqa: E402
from fake_internet import FakeInternet, NETNS_DNS_ADDRESS, PUBLIC_ADDRESS  # noqa: E402
from results_md import publish  # noqa: E402
import asyncio  # noqa: E402

RUNS = int(os.environ.get("RUNS", "50"))
SIZE_MB = int(os.environ.get("SIZE_MB", "256"))
CA = "/home/agent/ca.pem"


def pct(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def run_in(daemon, token, sid, argv, stdin=None):
    async def go():
        client = await WsClient.connect(daemon.ws_url(), token)
        try:
            return await client.run(sid, argv, stdin=stdin)
        finally:
            await client.close()
    out, err, outcome, _ = asyncio.run(go())
    if outcome.get("exit_code") != 0:
        raise SystemExit(f"{argv}: {outcome} {err.decode(errors='replace')}")
    return out.decode()


def latency_loop(ca, url, runs):
    return (f"for i in $(seq {runs}); do curl -sS -o /dev/null --cacert {ca} -w '%{{time_total}}\\n' {url} "
            "|| exit 1; done")


def throughput(ca, url):
    return f"curl -sS -o /dev/null --cacert {ca} -w '%{{size_download}} %{{time_total}}\\n' {url}"


def main():
    if os.geteuid() != 0:
        raise SystemExit("bench/egress.py: run as root (corrald, network namespaces)")
    inet = FakeInternet().start()
    router = inet.add_router()
    daemon = Daemon()
    daemon.extra_config = (f'\n[egress]\nenabled = true\nnetns = "{inet.netns_path}"\nresolver = "{inet.dns_address}"\n'
                           'domains = ["example.test"]\nports = [443]\n'
                           f'\n[network]\nnetns = "{router.netns_path}"\ndns = ["{NETNS_DNS_ADDRESS}"]\n')
    try:
        with open(os.path.join(inet.docroot, "big.bin"), "wb") as f:
            f.truncate(SIZE_MB << 20)
        daemon.start()
        secret = daemon.add_issuer("bench")
        token = mint("bench", secret, "bench")
        status, sandbox = daemon.http("POST", "/v1/sandboxes", token, {"limits": {"cpus": os.cpu_count()}})
        assert status == 201, sandbox
        sid = sandbox["id"]
        full_token = mint("bench", secret, "bench-full", scope=["sandboxes", "exec", "unsafe:full_network"])
        status, sandbox = daemon.http("POST", "/v1/sandboxes", full_token,
                                      {"limits": {"cpus": os.cpu_count()}, "network": "full", "unsafe": ["full_network"]})
        assert status == 201, sandbox
        full_sid = sandbox["id"]
        with open(inet.ca_cert_path, "rb") as f:
            ca_pem = f.read()
        run_in(daemon, token, sid, ["sh", "-c", f"cat > {CA}"], stdin=ca_pem)
        run_in(daemon, full_token, full_sid, ["sh", "-c", f"cat > {CA}"], stdin=ca_pem)
        # The direct side runs in the fake internet's namespace and skips DNS (curl --resolve);
        # the proxy looks the name up for every connection, which is part of what it adds.
        resolve = f"--resolve example.test:443:{PUBLIC_ADDRESS}"

        def direct(cmd):
            r = inet.run_in_netns(["sh", "-c", cmd.replace("curl ", f"curl {resolve} ", 1)],
                                  capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
            if r.returncode != 0:
                raise SystemExit(f"direct: {r.stderr}")
            return r.stdout

        whoami = "https://example.test/whoami"
        big = "https://example.test/big.bin"
        def routed(cmd):  # in the full-network sandbox, also without DNS
            return run_in(daemon, full_token, full_sid, ["sh", "-c", cmd.replace("curl ", f"curl {resolve} ", 1)])

        # Warm up every path, then alternate blocks of ten.
        run_in(daemon, token, sid, ["sh", "-c", latency_loop(CA, whoami, 3)])
        direct(latency_loop(inet.ca_cert_path, whoami, 3))
        routed(latency_loop(CA, whoami, 3))
        proxied_ms, direct_ms, routed_ms = [], [], []
        for _ in range(max(1, RUNS // 10)):
            out = run_in(daemon, token, sid, ["sh", "-c", latency_loop(CA, whoami, 10)])
            proxied_ms += [float(x) * 1000 for x in out.split()]
            direct_ms += [float(x) * 1000 for x in direct(latency_loop(inet.ca_cert_path, whoami, 10)).split()]
            routed_ms += [float(x) * 1000 for x in routed(latency_loop(CA, whoami, 10)).split()]
        proxied_mbs, direct_mbs, routed_mbs = [], [], []
        for _ in range(3):
            size, secs = run_in(daemon, token, sid, ["sh", "-c", throughput(CA, big)]).split()
            proxied_mbs.append(int(size) / float(secs) / (1 << 20))
            size, secs = direct(throughput(inet.ca_cert_path, big)).split()
            direct_mbs.append(int(size) / float(secs) / (1 << 20))
            size, secs = routed(throughput(CA, big)).split()
            routed_mbs.append(int(size) / float(secs) / (1 << 20))
        status, page = daemon.http("GET", f"/v1/sandboxes/{sid}/events?type=egress", token)
        allowed = sum(1 for e in page["events"] if e["data"]["decision"] == "allowed")
    finally:
        daemon.cleanup()
        inet.stop()

    p50, d50, r50 = statistics.median(proxied_ms), statistics.median(direct_ms), statistics.median(routed_ms)
    best_p, best_d, best_r = max(proxied_mbs), max(direct_mbs), max(routed_mbs)
    body = f"""## Egress proxy (`bench/egress.py`)

Measured {time.strftime('%Y-%m-%d')} on {platform.node()} ({os.cpu_count()} CPUs, kernel {platform.release()}).
Command: `sudo bench/egress.py build` (RUNS={RUNS}, SIZE_MB={SIZE_MB}). Servers: the tests' fake
internet (Python's HTTPS server in a network namespace); "direct" is curl in that namespace,
"proxied" is curl in a sandbox through its egress proxy (CONNECT, rules checked, the name
resolved by the proxy through the fake DNS server, an event written per connection); "full
network" is curl in a sandbox with `"network": "full"` (eth0, a veth to a router namespace with
corrald's nftables filter and masquerade, a veth to the fake internet; no DNS, like "direct").

| what | direct | through the proxy | added | full network | added |
| --- | --- | --- | --- | --- | --- |
| new HTTPS connection + request, p50 | {d50:.2f} ms | {p50:.2f} ms | **{p50 - d50:+.2f} ms** | {r50:.2f} ms | **{r50 - d50:+.2f} ms** |
| the same, p95 | {pct(direct_ms, 95):.2f} ms | {pct(proxied_ms, 95):.2f} ms | | {pct(routed_ms, 95):.2f} ms | |
| download of {SIZE_MB} MiB over HTTPS, best of 3 | {best_d:.0f} MiB/s | {best_p:.0f} MiB/s | **{best_p / best_d:.2f}x** | {best_r:.0f} MiB/s | **{best_r / best_d:.2f}x** |

{allowed} connections were allowed and recorded as events during the run. The absolute
throughput is the Python server's; the ratios are what each path costs on this machine against
curl run straight in the fake internet's namespace: the proxy's extra copy (sandbox loopback →
daemon → namespace), and for full network two veth hops, the filter and NAT.
"""
    print(body)
    publish("egress", body, full=RUNS >= 50)


if __name__ == "__main__":
    main()
