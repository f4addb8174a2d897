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
  rss OUT_JSON          corrald's VmRSS now
  destroy-all           destroy every sandbox of the daemon (cleanup; admin socket)
  report OUT_DIR RESULTS_MD   the "corrald (issue 3)" section of RESULTS_MD

Environment: BENCH_LOG (corrald's log), BENCH_ADMIN_SOCKET, BENCH_STATE_DIR, BENCH_RUN_DIR,
BENCH_CGROUP_PARENT (relative to the hierarchies' roots), BENCH_DAEMON_PID, BENCH_SANDBOX,
CORRAL (the CLI).
"""
import asyncio
import base64
import concurrent.futures
import hashlib
import hmac
import http.client
import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.dont_write_bytecode = True  # no bench/__pycache__ in the source tree
import results_md  # noqa: E402  (bench/results_md.py: the marker-delimited sections)
pct = results_md.pct

CGROUP_ROOT = "/sys/fs/cgroup"
HZ = os.sysconf("SC_CLK_TCK")
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


# ------------------------------------------------------------------------------- /proc, cgroups
def proc_cpu_ticks(pid, tid=None):
    """utime + stime of a process (or one of its threads), in clock ticks."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def proc_status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        m = re.search(rf"^{key}:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1)) if m else 0


def proc_pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            m = re.search(r"^Pss:\s+(\d+) kB", f.read(), re.M)
        return int(m.group(1)) if m else 0
    except OSError:
        return 0


def sched_ns(pid, tid):
    """(on-CPU ns, ns spent runnable but waiting for a CPU) of one thread: /proc/.../schedstat."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
            run, wait, _ = f.read().split()
        return int(run), int(wait)
    except (OSError, ValueError):
        return None


class CpuSampler:
    """CPU time of corrald (whole and its main, event-loop thread) and of other pids, as deltas;
    plus, from schedstat, how long corrald's event loop and this process's main thread were on a
    CPU and how long they waited for one (run-queue delay: a busy shared host)."""

    def __init__(self, daemon_pid, others=()):
        self.daemon_pid = daemon_pid
        self.others = dict(others)  # name -> pid

    def sample(self):
        s = {"t": time.monotonic(), "corrald": proc_cpu_ticks(self.daemon_pid),
             "corrald_main": proc_cpu_ticks(self.daemon_pid, self.daemon_pid)}
        for name, pid in self.others.items():
            try:
                s[name] = proc_cpu_ticks(pid)
            except OSError:
                s[name] = None
        s["sched"] = {"corrald_main": sched_ns(self.daemon_pid, self.daemon_pid),
                      "self": sched_ns(os.getpid(), threading.get_native_id())}
        return s

    @staticmethod
    def delta(a, b):
        wall = b["t"] - a["t"]
        out = {"wall_s": wall}
        for k in a:
            if k not in ("t", "sched") and a[k] is not None and b.get(k) is not None:
                out[k + "_cpu_s"] = (b[k] - a[k]) / HZ
        for k, before in a["sched"].items():
            after = b["sched"].get(k)
            if before and after:
                out[k + "_oncpu_s"] = (after[0] - before[0]) / 1e9
                out[k + "_runqueue_s"] = (after[1] - before[1]) / 1e9
        return out


def hierarchies():
    """The cgroup hierarchies' roots: [(name, path)] (one, "unified", on a v2 host)."""
    with open("/proc/self/mounts") as f:
        mounts = [line.split() for line in f]
    roots = []
    for dev, path, fstype, opts, *_ in mounts:
        if fstype == "cgroup2" and path == CGROUP_ROOT:
            return [("unified", path)]
        if fstype == "cgroup":
            roots.append((os.path.basename(path), path))
        elif fstype == "cgroup2":
            roots.append(("unified", path))
    return roots


def our_cgroups():
    """Every directory below the private cgroup parent, in every hierarchy (relative paths)."""
    parent = env("BENCH_CGROUP_PARENT")
    found = []
    for name, root in hierarchies():
        base = os.path.join(root, parent)
        for d, dirs, _ in os.walk(base):
            if d != base:
                found.append(os.path.relpath(d, CGROUP_ROOT))
    return found


def sandbox_init_pids(sid):
    """corral-init's host pids: the `init` cgroup of the sandbox (pids or memory hierarchy)."""
    parent = env("BENCH_CGROUP_PARENT")
    for name, root in hierarchies():
        if name not in ("pids", "memory", "unified"):
            continue
        path = os.path.join(root, parent, sid, "init", "cgroup.procs")
        try:
            with open(path) as f:
                return [int(p) for p in f.read().split()]
        except OSError:
            continue
    return []


def sandbox_memory_bytes(sid):
    """The sandbox cgroup's memory usage (v1 memory.usage_in_bytes, v2 memory.current)."""
    parent = env("BENCH_CGROUP_PARENT")
    for name, root in hierarchies():
        for f in ("memory.usage_in_bytes", "memory.current"):
            path = os.path.join(root, parent, sid, f)
            if name in ("memory", "unified") and os.path.exists(path):
                with open(path) as fh:
                    return int(fh.read())
    return None


def our_loop_devices():
    state = env("BENCH_STATE_DIR")
    found = []
    for name in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                if f.read().startswith(state):
                    found.append(name)
        except OSError:
            pass
    return found


def our_mounts():
    state, run = env("BENCH_STATE_DIR"), env("BENCH_RUN_DIR")
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if state in line or run in line]


def leak_check():
    cgs = our_cgroups()
    return {"cgroups": cgs, "loop_devices": our_loop_devices(), "mounts": our_mounts()}


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


# ------------------------------------------------------------------------------- 2. streaming
async def run_exec(ws, argv, on_frame, timeout=None):
    """Runs argv in the bench sandbox on the open WebSocket `ws`; on_frame(message) sees each binary
    output frame. Returns the exit event's outcome."""
    await ws.send(json.dumps({"id": 1, "op": "exec", "sandbox": env("BENCH_SANDBOX"), "argv": argv}))
    command = None
    while True:
        message = await asyncio.wait_for(ws.recv(), timeout)
        if isinstance(message, bytes):
            on_frame(message)
            continue
        data = json.loads(message)
        if data.get("id") == 1:
            if not data.get("ok"):
                raise RuntimeError(f"exec {argv} refused: {data}")
            command = data["result"]["command"]
        elif data.get("event") == "exit" and data.get("command") == command:
            return data["outcome"]


def exec_ws_sync(argv, timeout=600):
    """Run argv in the bench sandbox over a WebSocket; returns (stdout, outcome)."""
    async def go():
        ws = await ws_connect()
        out = bytearray()

        def on_frame(message):
            if message[1] == 1:
                out.extend(message[FRAME_HEADER:])
        outcome = await run_exec(ws, argv, on_frame, timeout)
        await ws.close()
        return bytes(out), outcome
    return asyncio.run(go())


async def stream_websockets(path):
    """Python websockets (the library's defaults but no compression): count and drop output."""
    ws = await ws_connect()
    counted = {"bytes": 0, "messages": 0}

    def on_frame(message):
        counted["bytes"] += len(message) - FRAME_HEADER
        counted["messages"] += 1
    t0 = time.perf_counter()
    outcome = await run_exec(ws, ["cat", path], on_frame)
    t1 = time.perf_counter()
    await ws.close()
    return {"bytes": counted["bytes"], "seconds": t1 - t0, "messages": counted["messages"], "outcome": outcome}


def stream_raw(path):
    """A minimal client on a plain socket: the handshake by hand, then recv_into a 1 MiB buffer,
    parsing only frame headers and skipping payloads. What the daemon delivers to a client that
    costs little; it also counts the WebSocket frames that carry the output messages."""
    host, port = host_port()
    s = socket.create_connection((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /v1/ws HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
               f"Sec-WebSocket-Protocol: corral.v1\r\n"
               f"Authorization: Bearer {env('CORRAL_TOKEN')}\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            raise RuntimeError("connection closed during the handshake")
        head += chunk
    head, rest = head.split(b"\r\n\r\n", 1)
    if not head.startswith(b"HTTP/1.1 101"):
        raise RuntimeError(f"handshake refused: {head[:200]!r}")
    t0 = time.perf_counter()
    payload = json.dumps({"id": 1, "op": "exec", "sandbox": env("BENCH_SANDBOX"),
                          "argv": ["cat", path]}).encode()
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    length = bytes([0x80 | len(payload)]) if len(payload) < 126 else \
        bytes([0x80 | 126]) + struct.pack(">H", len(payload))
    s.sendall(bytes([0x81]) + length + mask + masked)

    buf = bytearray(1 << 20)
    view = memoryview(buf)
    buf[:len(rest)] = rest
    lo, hi = 0, len(rest)          # unparsed bytes: buf[lo:hi]
    remaining = 0                  # payload bytes of the current frame still to come
    control = False                # the current frame is a control frame (ping, pong, close)
    opcode = 0                     # of the current message (continuations keep the first's)
    text = None                    # a text message's payload, else None
    message_bytes = 0
    st = {"frames": 0, "data_frames": 0, "messages": 0, "data_bytes": 0, "max_frame": 0}
    command = outcome = None

    def end_frame(fin):
        nonlocal text, message_bytes, command, outcome
        if control:
            if opcode_ctl == 8:
                raise RuntimeError("the daemon closed the connection")
            return
        if not fin:
            return
        st["messages"] += 1
        if opcode == 2:
            st["data_bytes"] += message_bytes - FRAME_HEADER
        elif opcode == 1:
            data = json.loads(bytes(text))
            if data.get("id") == 1:
                if not data.get("ok"):
                    raise RuntimeError(f"exec refused: {data}")
                command = data["result"]["command"]
            elif data.get("event") == "exit" and data.get("command") == command:
                outcome = data["outcome"]
        text = None
        message_bytes = 0

    fin = False
    opcode_ctl = 0
    while outcome is None:
        while True:
            if remaining:
                take = min(remaining, hi - lo)
                if take == 0:
                    break
                if text is not None and not control:
                    text += buf[lo:lo + take]
                lo += take
                remaining -= take
                if remaining == 0:
                    end_frame(fin)
                continue
            if hi - lo < 2:
                break
            b0, b1 = buf[lo], buf[lo + 1] & 0x7f
            need = 2 + (2 if b1 == 126 else 8 if b1 == 127 else 0)
            if hi - lo < need:
                break
            size = b1 if b1 < 126 else struct.unpack_from(">H" if b1 == 126 else ">Q", buf, lo + 2)[0]
            lo += need
            fin, op = bool(b0 & 0x80), b0 & 0x0f
            st["frames"] += 1
            control = op >= 8
            if control:
                opcode_ctl = op
            else:
                st["data_frames"] += 1
                st["max_frame"] = max(st["max_frame"], size)
                if op != 0:
                    opcode = op
                    text = bytearray() if op == 1 else None
                message_bytes += size
            remaining = size
            if size == 0:
                end_frame(fin)
            if outcome is not None:
                break
        if outcome is not None:
            break
        if lo == hi:
            lo = hi = 0
        elif len(buf) - hi < 64:
            buf[:hi - lo] = buf[lo:hi]
            hi, lo = hi - lo, 0
        got = s.recv_into(view[hi:])
        if got == 0:
            raise RuntimeError("the daemon closed the connection before the exit event")
        hi += got
    t1 = time.perf_counter()
    s.close()
    return {"bytes": st["data_bytes"], "seconds": t1 - t0, "outcome": outcome,
            "frames": st["frames"], "data_frames": st["data_frames"], "messages": st["messages"],
            "max_frame": st["max_frame"]}


def stream_cli(path, outcome_file):
    corral = env("CORRAL")
    t0 = time.perf_counter()
    p = subprocess.Popen([corral, "exec", "--outcome-json", outcome_file, env("BENCH_SANDBOX"), "--",
                          "cat", path], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    t1 = time.perf_counter()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"corral exec cat exited {p.returncode}")
    with open(outcome_file) as f:
        outcome = json.load(f)
    return {"seconds": t1 - t0, "outcome": outcome, "client_cpu_s": ru.ru_utime + ru.ru_stime,
            "client_user_s": ru.ru_utime, "client_sys_s": ru.ru_stime}


def cli_byte_count(path):
    """Not timed: the CLI's stdout carries every byte (read here through a pipe)."""
    p = subprocess.Popen([env("CORRAL"), "exec", env("BENCH_SANDBOX"), "--", "cat", path],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    n = 0
    while True:
        chunk = p.stdout.read1(1 << 20)
        if not chunk:
            break
        n += len(chunk)
    if p.wait() != 0:
        raise RuntimeError(f"corral exec cat exited {p.returncode}")
    return n


def cmd_stream(out_json):
    sid = env("BENCH_SANDBOX")
    size = parse_size(env("STREAM_BYTES", "1G"))
    repeat = env_int("STREAM_REPEAT", 3)
    daemon_pid = int(env("BENCH_DAEMON_PID"))
    out_dir = os.path.dirname(os.path.abspath(out_json))
    # The file goes into the home directory, on the sandbox's disk: /tmp is a tmpfs of at most
    # min(disk, 1 GiB) that also holds /run.
    made, outcome = exec_ws_sync(["sh", "-c", f"head -c {size} /dev/zero > big && pwd"])
    if outcome.get("exit_code") != 0:
        raise RuntimeError(f"cannot create the {size}-byte file: {outcome}")
    path = made.decode().strip() + "/big"
    # Read it in the sandbox (to /dev/null, no client): warms the page cache; the second read
    # is the floor of what `cat` alone costs.
    floor = []
    for _ in range(2):
        _, o = exec_ws_sync(["sh", "-c", f"cat {path} > /dev/null"])
        floor.append(o)
    init = sandbox_init_pids(sid)
    counted = cli_byte_count(path)
    if counted != size:
        raise RuntimeError(f"the CLI delivered {counted} bytes, not {size}")
    runs = {"cli": [], "websockets": [], "raw": []}
    load0 = loadavg()
    for i in range(repeat):
        for kind in runs:
            cpu = CpuSampler(daemon_pid, {"corral_init": init[0]} if init else {})
            a = cpu.sample()
            own0 = os.times()
            if kind == "cli":
                r = stream_cli(path, os.path.join(out_dir, "stream-cli-outcome.json"))
            elif kind == "websockets":
                r = asyncio.run(stream_websockets(path))
            else:
                r = stream_raw(path)
            own1 = os.times()
            b = cpu.sample()
            r.update(CpuSampler.delta(a, b))
            if kind != "cli":
                r["client_user_s"] = own1.user - own0.user
                r["client_sys_s"] = own1.system - own0.system
                r["client_cpu_s"] = r["client_user_s"] + r["client_sys_s"]
                if r["bytes"] != size:
                    raise RuntimeError(f"{kind}: {r['bytes']} bytes, not {size}")
            o = r["outcome"]
            if o.get("outcome") != "exited" or o.get("exit_code") != 0:
                raise RuntimeError(f"{kind}: cat did not exit 0: {o}")
            r["cat_cpu_s"] = (o.get("cpu_user_s") or 0) + (o.get("cpu_sys_s") or 0)
            r["mb_s"] = size / r["seconds"] / 1e6
            runs[kind].append(r)
            print(f"stream {kind:10s} run {i + 1}: {r['mb_s']:7.0f} MB/s ({r['seconds']:.2f} s)",
                  file=sys.stderr)
    write_json(out_json, {"bytes": size, "path": path, "repeat": repeat, "floor": floor,
                          "loadavg_start": load0, "loadavg_end": loadavg(),
                          "cli_bytes_checked": counted, "runs": runs})


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


# ------------------------------------------------------------------------------- report
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
    L = results_md.report_head("corrald (issue 3): exec round trip, streaming, idle sandboxes", meta,
                               "`bench/daemon.sh` (against a private corrald it starts)")
    L.append("")

    # ---- 1. exec
    ws = load(out_dir, "exec-ws.json")
    lean = load(out_dir, "exec-lean.json")
    if ws is not None:
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
        L.append("Where the WebSocket round trip goes: the `exec` reply arrived after p50 "
                 f"{ws['reply']['p50_ms']:.2f} ms (Python client); the command's `wall_s` in its outcome "
                 "(from corrald's request to corral-init until corrald has read the command's cgroup "
                 "figures) "
                 f"was p50 {ws['outcome_wall']['p50_ms']:.2f} ms; "
                 f"corrald used {ws['corrald_cpu_ms_per_exec']:.2f} ms of CPU per exec (utime+stime, "
                 f"all threads) and the Python client {ws['client_cpu_ms_per_exec']:.2f} ms.\n"
                 if ws.get("outcome_wall") else "")

    # ---- 2. streaming
    sm = load(out_dir, "stream.json")
    if sm is not None:
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
        names = {"cli": "`corral exec SB -- cat big > /dev/null` (the CLI)",
                 "websockets": "Python websockets, frames dropped",
                 "raw": "raw socket, payloads skipped (diagnostic)"}
        best = {}

        def share(b, k):
            return f"{100 * b[k] / b['wall_s']:.0f}" if b.get(k) is not None else "–"

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
        L.append("")
        L.append(f"**Target: ≥ 1 GB/s.** The CLI: {best['cli']['mb_s']:.0f} MB/s, "
                 f"{yes(best['cli']['mb_s'] >= 1000)}. Python websockets: "
                 f"{best['websockets']['mb_s']:.0f} MB/s, {yes(best['websockets']['mb_s'] >= 1000)}. "
                 f"(The raw-socket client, the daemon's delivery to a client that only parses frame "
                 f"headers: {best['raw']['mb_s']:.0f} MB/s.)\n")
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
        L.append("")

    # ---- 3. idle sandboxes
    idle = load(out_dir, "idle.json")
    rs, re_ = load(out_dir, "rss-start.json"), load(out_dir, "rss-end.json")
    if idle is not None:
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
    results_md.write_section(results_md_path, "daemon", "\n".join(L))
    print("\n".join(L))


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
