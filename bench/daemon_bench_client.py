"""daemon_bench's figures and clients (see daemon_bench.py): the environment daemon.sh sets, sizes
and latency statistics, HS256 tokens, HTTP to corrald (TCP and the admin socket) and its WebSocket.
"""
import base64
import hashlib
import hmac
import http.client
import json
import os
import re
import socket
import sys
import time

import results_md  # bench/results_md.py: the marker-delimited sections
pct = results_md.pct

ISSUER = "bench"
FRAME_HEADER = 14  # corral's binary output frame: kind, fd, channel u32, seq u64


def env(name, default=None):
    value = os.environ.get(name, default)
    if value is None:
        sys.exit(f"daemon_bench: {name} is not set")
    return value


def env_int(name, default):
    return int(os.environ.get(name, default))


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMGT]?)i?B?", text.strip(), re.I)
    if not m:
        sys.exit(f"daemon_bench: bad size {text!r}")
    return int(m.group(1)) << (10 * " KMGT".index((m.group(2) or " ").upper()))


def stats_ms(seconds):
    return {"n": len(seconds), "p50_ms": pct(seconds, .5) * 1e3, "p95_ms": pct(seconds, .95) * 1e3,
            "mean_ms": sum(seconds) / len(seconds) * 1e3, "min_ms": min(seconds) * 1e3,
            "max_ms": max(seconds) * 1e3}


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def write_json(path, data):
    with open(path, "w") as f:
        json.dump(data, f, indent=1)


# ------------------------------------------------------------------------------- clients
def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint(issuer, secret, sub, ttl):
    """An HS256 token, as docs/PROTOCOL.md shows the operator's backend minting one."""
    now = int(time.time())
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64url(json.dumps({"iss": issuer, "sub": sub, "iat": now, "exp": now + ttl}).encode())
    sig = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url(sig)}"


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=120):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def _request(conn, method, path, token=None, body=None):
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    conn.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    try:
        return resp.status, json.loads(data) if data else None
    except ValueError:
        return resp.status, data


def admin(method, path, body=None):
    conn = UnixHTTPConnection(env("BENCH_ADMIN_SOCKET"))
    try:
        return _request(conn, method, path, body=body)
    finally:
        conn.close()


def host_port():
    url = env("CORRAL_URL")
    m = re.fullmatch(r"http://([\d.]+):(\d+)/?", url)
    if not m:
        sys.exit(f"daemon_bench: CORRAL_URL {url!r} is not http://IPv4:PORT")
    return m.group(1), int(m.group(2))


class Api:
    """HTTP with the bench token, one keep-alive connection (one per thread when shared)."""

    def __init__(self):
        self.host, self.port = host_port()
        self.token = env("CORRAL_TOKEN")
        self.conn = None

    def call(self, method, path, body=None):
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
            try:
                return _request(self.conn, method, path, self.token, body)
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise

    def create(self, name, memory, disk):
        status, body = self.call("POST", "/v1/sandboxes", {
            "name": name, "limits": {"memory_bytes": memory, "disk_bytes": disk}})
        if status != 201:
            raise RuntimeError(f"create {name}: HTTP {status}: {body}")
        return body["id"]

    def destroy(self, sid):
        status, body = self.call("DELETE", f"/v1/sandboxes/{sid}")
        if status != 200:
            raise RuntimeError(f"destroy {sid}: HTTP {status}: {body}")

    def close(self):
        if self.conn:
            self.conn.close()
            self.conn = None


async def ws_connect(**kwargs):
    import websockets  # Debian's python3-websockets (10.x)
    host, port = host_port()
    return await websockets.connect(
        f"ws://{host}:{port}/v1/ws", subprotocols=["corral.v1"],
        extra_headers={"Authorization": "Bearer " + env("CORRAL_TOKEN")},
        compression=None, max_size=None, **kwargs)
