"""Shared fixture for the end-to-end tests: a real corrald, started the way an operator starts
it, with a private state dir, run dir, admin socket and cgroup parent, on a free loopback port.

Clients are real ones: HTTP (http.client), the admin unix socket, Python `websockets` (Debian's
python3-websockets) and the built `corral` CLI.
"""
import asyncio
import base64
import hashlib
import hmac
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

import websockets

BUILD_DIR = os.environ.get("CORRAL_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
CORRALD = os.path.join(BUILD_DIR, "tools", "corrald")
CORRAL = os.path.join(BUILD_DIR, "tools", "corral")
CGROUP_ROOT = "/sys/fs/cgroup"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# Every secret the tests hand to or get from a daemon (issuer secrets, tokens' signatures, API
# keys): no daemon's log may hold one (Daemon.cleanup checks, for every e2e test).
SECRETS = set()


def remember_token(token):
    parts = token.split(".") if isinstance(token, str) else []
    if len(parts) == 3 and len(parts[2]) >= 16:
        SECRETS.add(parts[2])


def mint(issuer, secret, sub, ttl=3600, header=None, **claims):
    """The operator's side, as docs/PROTOCOL.md shows it (standard library only)."""
    now = int(time.time())
    head = b64url(json.dumps(header or {"alg": "HS256", "typ": "JWT"}).encode())
    payload = {"iss": issuer, "sub": sub, "iat": now, "exp": now + ttl}
    payload.update(claims)
    body = b64url(json.dumps(payload).encode())
    sig = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    token = f"{head}.{body}.{b64url(sig)}"
    remember_token(token)
    return token


# USD per million tokens for every model: what the tests' relays charge.
PRICE = {"input": 3, "output": 15, "cache_write": 3.75, "cache_read": 0.3}


def relay_config(upstream_port, key_file, price=PRICE):
    """The [relay] tables of a daemon whose model calls go to a scripted server on loopback,
    with the operator's key in key_file (to put after corral_e2e's [sandbox] table)."""
    return f"""
[relay]
upstream = "http://127.0.0.1:{upstream_port}"
api_key_file = "{key_file}"
[relay.prices.default]
input = {price["input"]}
output = {price["output"]}
cache_write = {price["cache_write"]}
cache_read = {price["cache_read"]}
"""


def operator_key_file(prefix, key):
    """The operator's model key in a file of a new temporary directory, created 0600 (never
    readable by others, even for a moment): (the directory, the file)."""
    key_dir = tempfile.mkdtemp(prefix=prefix)
    key_file = os.path.join(key_dir, "api-key")
    with open(os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(key + "\n")
    return key_dir, key_file


def micro_usd(usage, price=PRICE):
    """What a relay with `price` charges for a model call's usage, in micro-dollars."""
    return round(usage.get("input_tokens", 0) * price["input"] + usage.get("output_tokens", 0) * price["output"]
                 + usage.get("cache_creation_input_tokens", 0) * price["cache_write"]
                 + usage.get("cache_read_input_tokens", 0) * price["cache_read"])


class Scrape:
    """A Prometheus text exposition: every sample, and the declared metric names and types."""

    _LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

    def __init__(self, text):
        self.text = text
        self.types = {}    # name -> counter | gauge | histogram
        self.samples = {}  # (name, ((label, value), ...) sorted) -> float
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                self.types[name] = kind
            elif line and not line.startswith("#"):
                series, value = line.rsplit(" ", 1)
                name, _, labels = series.partition("{")
                self.samples[(name, tuple(sorted(self._LABEL.findall(labels))))] = float(value)

    def get(self, name, **labels):
        """The sample with exactly these labels (0 when there is none yet)."""
        return self.samples.get((name, tuple(sorted(labels.items()))), 0.0)

    def sum(self, name, **labels):
        """The sum over the samples of `name` that have these labels (and any others)."""
        return sum(v for (n, pairs), v in self.samples.items()
                   if n == name and all(dict(pairs).get(k) == w for k, w in labels.items()))


def metric_delta(before, after, name, **labels):
    """How much a counter moved between two scrapes (summed over the other labels)."""
    return after.sum(name, **labels) - before.sum(name, **labels)


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=30):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


class Daemon:
    """One corrald process and everything it owns."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="corral-e2e-")
        tag = f"e2e-{os.getpid()}-{os.path.basename(self.tmp)[-6:]}"
        self.cgroup_parent = f"corral/{tag}"
        self.state_dir = os.path.join(self.tmp, "state")
        self.run_dir = f"/run/corral-{tag}"
        self.admin_socket = os.path.join(self.run_dir, "admin.sock")
        self.config_path = os.path.join(self.tmp, "corrald.toml")
        self.log_path = os.path.join(self.tmp, "corrald.log")
        self.port = None
        self.proc = None
        self.corrald = CORRALD      # another build's corrald (test_upgrade: the previous release)
        self.extra_config = ""      # more [sandbox] keys
        self.extra_daemon_config = ""  # more [daemon] keys
        self.extra_api_config = ""  # more [api] keys
        self.extra_sections = ""    # more sections ([store] ...), at the end
        self.stop_grace = 2         # sandbox.stop_grace, seconds
        self.listen_host = "127.0.0.1"  # api.listen's address
        self.wrapper = []           # what corrald runs under (test_fleet: nsenter into a node's netns)

    def write_config(self, port=0):
        with open(self.config_path, "w") as f:
            f.write(f"""
[daemon]
state_dir = "{self.state_dir}"
run_dir = "{self.run_dir}"
admin_socket = "{self.admin_socket}"
cgroup_parent = "{self.cgroup_parent}"
{self.extra_daemon_config}

[api]
listen = "{self.listen_host}:{port}"
{self.extra_api_config}

[sandbox]
default_disk = "256M"
default_memory = "512M"
stop_grace = {self.stop_grace}
{self.extra_config}

{self.extra_sections}
""")

    def start(self, port=None):
        self.write_config(port if port is not None else (self.port or 0))
        offset = len(self.log())
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.wrapper + [self.corrald, "--config", self.config_path, "--foreground"],
                                     stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("corrald exited: " + self.log())
            for line in self.log()[offset:].splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("msg") == "listening" and entry.get("component") == "corrald":
                    self.port = int(entry["address"].rsplit(":", 1)[1])
                    return
            time.sleep(0.05)
        raise RuntimeError("corrald did not start: " + self.log())

    def log(self):
        try:
            with open(self.log_path) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill9(self):
        self.stop(signal.SIGKILL)

    # ---- clients ----

    def admin(self, method, path, body=None):
        conn = UnixHTTPConnection(self.admin_socket)
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        body = json.loads(data) if data else None
        if isinstance(body, dict):
            if isinstance(body.get("secret"), str) and len(body["secret"]) >= 16:
                SECRETS.add(body["secret"])
            remember_token(body.get("token"))
        return resp.status, body

    def http(self, method, path, token=None, body=None, raw=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        hdrs = dict(headers or {})
        if token:
            hdrs["Authorization"] = "Bearer " + token
        payload = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, body=payload, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        ctype = resp.getheader("Content-Type", "")
        if "json" in ctype and data:
            return resp.status, json.loads(data)
        return resp.status, data

    def metrics(self):
        """GET /metrics, parsed (Scrape)."""
        status, text = self.http("GET", "/metrics")
        assert status == 200, (status, text)
        return Scrape(text.decode())

    def add_issuer(self, name):
        status, body = self.admin("POST", "/v1/admin/issuers", {"name": name})
        assert status == 201, (status, body)
        return body["secret"]

    def ws_url(self):
        return f"ws://127.0.0.1:{self.port}/v1/ws"

    # ---- cleanup ----

    def cgroups(self):
        """Directories under our cgroup parent in any hierarchy."""
        found = []
        for root, dirs, _ in os.walk(CGROUP_ROOT):
            rel = os.path.relpath(root, CGROUP_ROOT)
            parts = rel.split(os.sep)
            if self.cgroup_parent in rel and (parts[0] == "corral" or (len(parts) > 1 and parts[1] == "corral")):
                found.append(rel)
        return found

    def leaked_secrets(self):
        """Lines of the log that hold a secret (redacted), and the API key of the relay's config."""
        secrets = set(SECRETS)
        try:
            with open(self.config_path) as f:
                for line in f:
                    key, _, value = line.partition("=")
                    if key.strip() == "api_key_file":
                        with open(value.strip().strip('"')) as k:
                            secrets.add(k.read().strip())
        except OSError:
            pass
        found = []
        for line in self.log().splitlines():
            hits = [secret for secret in secrets if secret and secret in line]
            if hits:
                for secret in hits:
                    line = line.replace(secret, secret[:4] + "...[redacted]")
                found.append(line[:400])
        return found

    def cleanup(self):
        self.stop()
        leaked = self.leaked_secrets()
        self._cleanup()
        assert not leaked, "corrald logged secrets (issuer secrets, tokens or API keys):\n" + "\n".join(leaked[:10])

    def _cleanup(self):
        if self.proc and self.proc.poll() is not None and self.proc.returncode not in (0, -signal.SIGTERM,
                                                                                      -signal.SIGKILL):
            # It died by itself: what it said last is the only trace (the directory goes below).
            sys.stderr.write(f"corrald exited with {self.proc.returncode}; the end of its log:\n"
                             + self.log()[-8000:] + "\n")
        self.stop()
        # Whatever a failed test left: kill and remove our cgroups, deepest first.
        for rel in sorted(self.cgroups(), key=len, reverse=True):
            path = os.path.join(CGROUP_ROOT, rel)
            try:
                kill = os.path.join(path, "cgroup.kill")
                if os.path.exists(kill):
                    with open(kill, "w") as f:
                        f.write("1")
                else:
                    with open(os.path.join(path, "cgroup.procs")) as f:
                        for pid in f.read().split():
                            try:
                                os.kill(int(pid), signal.SIGKILL)
                            except ProcessLookupError:
                                pass
            except OSError:
                pass
        for rel in sorted(self.cgroups(), key=len, reverse=True):
            for _ in range(50):
                try:
                    os.rmdir(os.path.join(CGROUP_ROOT, rel))
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
        remove_corral_root_if_empty()
        shutil.rmtree(self.run_dir, ignore_errors=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


def remove_corral_root_if_empty():
    """The `corral` cgroup that the tests' daemons made their parents under: removed once no test
    uses it (rmdir refuses a cgroup with children or processes, so another test's stays)."""
    for path in [os.path.join(CGROUP_ROOT, "corral")] + [os.path.join(CGROUP_ROOT, h, "corral")
                                                        for h in os.listdir(CGROUP_ROOT)]:
        try:
            os.rmdir(path)
        except OSError:
            pass


class WsClient:
    """A protocol client over Python's websockets: requests by id, events in order."""

    def __init__(self, ws):
        self.ws = ws
        self.next_id = 0
        self.events = []
        self.channels = {}

    @classmethod
    async def connect(cls, url, token, how="header", **kwargs):
        if how == "header":
            ws = await websockets.connect(url, subprotocols=["corral.v1"],
                                          extra_headers={"Authorization": "Bearer " + token},
                                          max_size=None, **kwargs)
        elif how == "subprotocol":
            ws = await websockets.connect(url, subprotocols=["corral.v1", "bearer." + token], max_size=None, **kwargs)
        else:
            ws = await websockets.connect(url + "?token=" + token, max_size=None, **kwargs)
        return cls(ws)

    async def request(self, op, **fields):
        self.next_id += 1
        rid = self.next_id
        await self.ws.send(json.dumps({"id": rid, "op": op, **fields}))
        while True:
            message = await asyncio.wait_for(self.ws.recv(), 30)
            if isinstance(message, bytes):
                self.events.append(decode_frame(message))
                continue
            data = json.loads(message)
            if data.get("id") == rid:
                return data
            self.events.append(data)

    async def next_event(self, timeout=30):
        if self.events:
            return self.events.pop(0)
        message = await asyncio.wait_for(self.ws.recv(), timeout)
        if isinstance(message, bytes):
            return decode_frame(message)
        return json.loads(message)

    async def run(self, sandbox, argv, stdin=None, **fields):
        """exec, collect output until exit; returns (stdout, stderr, outcome, command id)."""
        reply = await self.request("exec", sandbox=sandbox, argv=argv, stdin=stdin is not None, **fields)
        assert reply["ok"], reply
        command = reply["result"]["command"]
        if stdin is not None:
            if stdin:
                await self.request("stdin", command=command, data=base64.b64encode(stdin).decode())
            await self.request("close_stdin", command=command)
        out, err = b"", b""
        while True:
            event = await self.next_event()
            if event.get("event") == "output":
                data = event["data"] if isinstance(event["data"], bytes) else base64.b64decode(event["data"])
                if event["fd"] == 1:
                    out += data
                else:
                    err += data
            elif event.get("event") == "exit":
                return out, err, event["outcome"], command

    async def close(self):
        await self.ws.close()


def decode_frame(message: bytes):
    kind, fd, channel, seq = struct.unpack(">BBIQ", message[:14])
    assert kind == 1, kind
    return {"event": "output", "fd": fd, "channel": channel, "seq": seq, "data": message[14:]}


class DaemonTestCase(unittest.TestCase):
    """Starts a daemon per test class; each test gets a fresh issuer and users."""

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("corrald needs root (namespaces, cgroups, mounts)")
        if not os.path.exists(CORRALD):
            raise unittest.SkipTest(f"{CORRALD} is not built")
        cls.daemon = Daemon()
        cls.daemon.extra_config = getattr(cls, "extra_config", "")
        cls.daemon.extra_api_config = getattr(cls, "extra_api_config", "")
        cls.daemon.extra_daemon_config = getattr(cls, "extra_daemon_config", "")
        cls.daemon.extra_sections = getattr(cls, "extra_sections", "")
        cls.daemon.stop_grace = getattr(cls, "stop_grace", 2)
        cls.daemon.state_dir = getattr(cls, "state_dir", cls.daemon.state_dir)  # a class may put it elsewhere
        try:
            cls.daemon.start()
            cls.secret = cls.daemon.add_issuer("acme")
        except Exception:
            cls.daemon.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        daemon = cls.daemon
        log = daemon.log()
        daemon.cleanup()
        leaked = daemon.cgroups()
        assert not leaked, f"leaked cgroups: {leaked}"
        cls.daemon_log = log

    def token(self, sub="alice", **claims):
        return mint("acme", self.secret, sub, **claims)

    def create_sandbox(self, token, **body):
        status, sandbox = self.daemon.http("POST", "/v1/sandboxes", token, body)
        self.assertEqual(status, 201, f"{sandbox}\n{self.daemon_errors()}")
        return sandbox

    def daemon_errors(self):
        """The daemon's error lines so far (an internal error's reason is only in the log)."""
        return "\n".join(line[:600] for line in self.daemon.log().splitlines() if '"level":"error"' in line)

    def run_async(self, coro):
        return asyncio.run(coro)

    def exec_once(self, token, sandbox, argv, timeout=60):
        """Runs one command over the WebSocket to its end: (its outcome, its command id)."""
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                reply = await c.request("exec", sandbox=sandbox, argv=argv)
                self.assertTrue(reply["ok"], reply)
                while True:
                    event = await c.next_event(timeout=timeout)
                    if event.get("event") == "exit":
                        return event["outcome"], reply["result"]["command"]
            finally:
                await c.close()
        return self.run_async(go())


# ---- helpers shared by the recovery, CLI and lifecycle tests ----

# A command that spins on one CPU until it is stopped (compute budgets and records).
SPIN = ["sh", "-c", "while :; do :; done"]

def wait_until(predicate, timeout=30, interval=0.05, what="the condition"):
    """Polls `predicate` until it returns something truthy; fails the test after `timeout`."""
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def sandbox_cgroups(daemon, sandbox_id):
    """Our cgroup directories (any hierarchy) that belong to one sandbox."""
    return [rel for rel in daemon.cgroups() if sandbox_id in rel.split(os.sep)]


def init_pids(daemon, sandbox_id):
    """Host pids in the sandbox's `init` cgroup (corral-init), read from every hierarchy that has it."""
    pids = set()
    for rel in sandbox_cgroups(daemon, sandbox_id):
        if rel.split(os.sep)[-1] != "init":
            continue
        try:
            with open(os.path.join(CGROUP_ROOT, rel, "cgroup.procs")) as f:
                pids.update(int(p) for p in f.read().split())
        except FileNotFoundError:
            pass
    return pids


def process_gone(pid):
    """True when `pid` no longer runs (gone, or a zombie nobody reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True
