#!/usr/bin/python3
"""bench/sessions.py [BUILD_DIR] - agent sessions (issue 4), in ONE run:

  1. the model relay's cost per call: build/bench/relay_bench (streamed Messages calls straight to
     the scripted server and through the relay, alternating; the p50 difference);
  2. session start: from `POST /v1/sandboxes/{id}/sessions` (with a prompt) to the agent's
     `system init` event on an attached WebSocket, against starting the same `claude -p
     --input-format stream-json --output-format stream-json --verbose` directly on the host and
     writing the same first message to it, until it prints its `system init` line. Both talk to
     the same scripted Messages API server (tests/fixtures/scripted_model.py) on loopback;
     alternating, RUNS (30) each after WARMUP (3).

Writes the "sessions" section of bench/RESULTS.md when RUNS >= 30 (else
bench/out/RESULTS-sessions-trial.md) and the raw times to bench/out/sessions/. Run as root
(corrald). Environment: RUNS, WARMUP, RESULTS_MD, CORRAL_BUILD_DIR (or the BUILD_DIR argument).
"""
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid

from bench_env import BUILD, HERE  # first: sets up the paths

import scripted_model  # noqa: E402
from corral_e2e import Daemon, WsClient, mint  # noqa: E402
from results_md import publish  # noqa: E402

RUNS = int(os.environ.get("RUNS", "30"))
WARMUP = int(os.environ.get("WARMUP", "3"))
OUT = os.path.join(HERE, "out", "sessions")


def pct(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def claude_version():
    try:
        return subprocess.run(["claude", "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        return "?"


def bare_claude_start(port, home):
    """Seconds from starting claude to its system init line, on the host."""
    env = {"PATH": os.environ["PATH"], "HOME": home, "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
           "ANTHROPIC_API_KEY": "sk-bench", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_ERROR_REPORTING": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    started = time.monotonic()
    proc = subprocess.Popen(["claude", "-p", "--input-format", "stream-json", "--output-format", "stream-json",
                             "--verbose", "--session-id", str(uuid.uuid4())],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                            cwd=home)
    proc.stdin.write((json.dumps({"type": "user", "message": {"role": "user", "content": "hi"}}) + "\n").encode())
    proc.stdin.flush()
    elapsed = None
    for line in proc.stdout:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("type") == "system" and message.get("subtype") == "init":
            elapsed = time.monotonic() - started
            break
    proc.kill()
    proc.wait()
    if elapsed is None:
        raise RuntimeError("claude printed no system init")
    return elapsed


async def corral_session_start(daemon, token, sandbox):
    """Seconds from the create request to the agent's system init event."""
    client = await WsClient.connect(daemon.ws_url(), token)
    try:
        started = time.monotonic()
        status, session = await asyncio.to_thread(daemon.http, "POST", f"/v1/sandboxes/{sandbox}/sessions", token,
                                                  {"prompt": "hi"})
        if status != 201:
            raise RuntimeError(f"create: {status} {session}")
        reply = await client.request("session.attach", session=session["id"])
        assert reply["ok"], reply
        while True:
            event = await client.next_event(timeout=60)
            data = event.get("data") or {}
            if event.get("kind") == "agent" and data.get("type") == "system" and data.get("subtype") == "init":
                elapsed = time.monotonic() - started
                break
        await client.request("session.abort", session=session["id"])
        while True:
            event = await client.next_event(timeout=60)
            if event.get("event") == "session_end":
                break
        return elapsed
    finally:
        await client.close()


def main():
    if os.geteuid() != 0:
        raise SystemExit("run as root (corrald)")
    if not shutil.which("claude"):
        raise SystemExit("claude is not installed (dist/install-deps.sh)")
    os.makedirs(OUT, exist_ok=True)

    relay_json = os.path.join(OUT, "relay.json")
    relay_text = subprocess.run([os.path.join(BUILD, "bench", "relay_bench"), "300", relay_json],
                                capture_output=True, text=True, check=True).stdout
    with open(relay_json) as f:
        relay = json.load(f)
    direct_ms = [t * 1000 for t in relay["direct"]]
    relayed_ms = [t * 1000 for t in relay["relay"]]

    server = scripted_model.serve({"turns": [], "exhausted": "ok"}, port=0)
    key_dir = tempfile.mkdtemp(prefix="corral-bench-sessions-")
    key_file = os.path.join(key_dir, "api-key")
    with open(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write("sk-bench-operator\n")
    daemon = Daemon()
    daemon.extra_config = f"""
[relay]
upstream = "http://127.0.0.1:{server.port}"
api_key_file = "{key_file}"
[relay.prices.default]
input = 3
output = 15
cache_write = 3.75
cache_read = 0.3
"""
    bare, corral = [], []
    try:
        daemon.start()
        secret = daemon.add_issuer("bench")
        token = mint("bench", secret, "bencher", budget={"ai_usd": 100, "window": "day"})
        # The host's CPUs, as bare claude has them (its start is multi-threaded).
        status, sandbox = daemon.http("POST", "/v1/sandboxes", token,
                                      {"limits": {"cpus": os.cpu_count(), "memory_bytes": 2 << 30}})
        assert status == 201, sandbox
        home = tempfile.mkdtemp(prefix="corral-bench-claude-home-")
        for i in range(WARMUP + RUNS):
            b = bare_claude_start(server.port, home)
            c = asyncio.run(corral_session_start(daemon, token, sandbox["id"]))
            if i >= WARMUP:
                bare.append(b * 1000)
                corral.append(c * 1000)
        shutil.rmtree(home, ignore_errors=True)
        daemon.http("DELETE", f"/v1/sandboxes/{sandbox['id']}", token)
    finally:
        daemon.cleanup()
        server.shutdown()
        server.server_close()
        shutil.rmtree(key_dir, ignore_errors=True)
    with open(os.path.join(OUT, "session_start.json"), "w") as f:
        json.dump({"bare_ms": bare, "corral_ms": corral}, f)

    d50, r50 = statistics.median(direct_ms), statistics.median(relayed_ms)
    b50, c50 = statistics.median(bare), statistics.median(corral)
    body = f"""## Agent sessions (`bench/sessions.py`)

Measured {time.strftime('%Y-%m-%d')} on {platform.node()} ({os.cpu_count()} CPUs, kernel {platform.release()}),
{claude_version()}, against the scripted Messages API server on loopback. Command:
`sudo bench/sessions.py build` (RUNS={RUNS}, WARMUP={WARMUP}).

| what | p50 | p95 | target |
| --- | --- | --- | --- |
| streamed model call, direct to the server | {d50:.3f} ms | {pct(direct_ms, 95):.3f} ms | |
| the same through the relay | {r50:.3f} ms | {pct(relayed_ms, 95):.3f} ms | |
| **relay overhead per call** (p50 difference) | **{r50 - d50:.3f} ms** | | under 1 ms |
| `claude -p` started on the host, to its `system init` | {b50:.1f} ms | {pct(bare, 95):.1f} ms | |
| corral session: create request to the `system init` event | {c50:.1f} ms | {pct(corral, 95):.1f} ms | |
| **session start over bare `claude`** (p50 difference) | **{c50 - b50:+.1f} ms** | | within 50 ms |

The session's figure includes the HTTP create (the session row, the placeholder key), the
command's start in the sandbox through corral-init (its own cgroup), and the stream-json events
passing through the daemon to the WebSocket. The sandbox has as many CPUs as the host
(`limits.cpus`), as bare `claude` has: Claude Code's start is multi-threaded, and with the
default of one CPU it starts about 60 ms later. Raw times: `bench/out/sessions/`.
"""
    print(relay_text)
    print(body)
    publish("sessions", body, full=RUNS >= 30)


if __name__ == "__main__":
    main()
