"""daemon_bench's streaming phase (see daemon_bench.py): `cat` of a STREAM_BYTES file in the bench
sandbox to the CLI, to a Python websockets client and to a raw-socket client.
"""
import asyncio
import base64
import json
import os
import socket
import struct
import subprocess
import sys
import time

from daemon_bench_client import (FRAME_HEADER, env, env_int, host_port, loadavg, parse_size,
                                 write_json, ws_connect)
from daemon_bench_proc import CpuSampler, sandbox_init_pids


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
    s, rest = raw_ws_handshake()
    t0 = time.perf_counter()
    payload = json.dumps({"id": 1, "op": "exec", "sandbox": env("BENCH_SANDBOX"),
                          "argv": ["cat", path]}).encode()
    raw_ws_send_text(s, payload)
    reader = RawFrameReader(s, rest)
    outcome = reader.read_until_exit()
    t1 = time.perf_counter()
    s.close()
    st = reader.st
    return {"bytes": st["data_bytes"], "seconds": t1 - t0, "outcome": outcome,
            "frames": st["frames"], "data_frames": st["data_frames"], "messages": st["messages"],
            "max_frame": st["max_frame"]}


def raw_ws_handshake():
    """Connects to corrald and upgrades to its WebSocket by hand. Returns (socket, the bytes
    that came after the 101 response's headers)."""
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
    return s, rest


def raw_ws_send_text(s, payload):
    """Sends payload (under 64 KiB) as one masked text frame."""
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    length = bytes([0x80 | len(payload)]) if len(payload) < 126 else \
        bytes([0x80 | 126]) + struct.pack(">H", len(payload))
    s.sendall(bytes([0x81]) + length + mask + masked)


class RawFrameReader:
    """Reads the daemon's frames into a 1 MiB buffer with recv_into, parsing only their headers
    and the text messages (skipping binary payloads), until the exit event of the command that
    the exec with id 1 started. Counts frames and messages in `st`."""

    def __init__(self, sock, rest):
        self.sock = sock
        self.buf = bytearray(1 << 20)
        self.view = memoryview(self.buf)
        self.buf[:len(rest)] = rest
        self.lo, self.hi = 0, len(rest)  # unparsed bytes: buf[lo:hi]
        self.remaining = 0             # payload bytes of the current frame still to come
        self.control = False           # the current frame is a control frame (ping, pong, close)
        self.opcode = 0                # of the current message (continuations keep the first's)
        self.text = None               # a text message's payload, else None
        self.message_bytes = 0
        self.st = {"frames": 0, "data_frames": 0, "messages": 0, "data_bytes": 0, "max_frame": 0}
        self.command = self.outcome = None
        self.fin = False
        self.opcode_ctl = 0

    def read_until_exit(self):
        """Returns the exit event's outcome."""
        while self.outcome is None:
            self.parse_buffered()
            if self.outcome is not None:
                break
            if self.lo == self.hi:
                self.lo = self.hi = 0
            elif len(self.buf) - self.hi < 64:
                self.buf[:self.hi - self.lo] = self.buf[self.lo:self.hi]
                self.hi, self.lo = self.hi - self.lo, 0
            got = self.sock.recv_into(self.view[self.hi:])
            if got == 0:
                raise RuntimeError("the daemon closed the connection before the exit event")
            self.hi += got
        return self.outcome

    def parse_buffered(self):
        """Consumes what buf[lo:hi] holds: payload bytes of the current frame, then headers."""
        buf = self.buf
        while True:
            if self.remaining:
                take = min(self.remaining, self.hi - self.lo)
                if take == 0:
                    break
                if self.text is not None and not self.control:
                    self.text += buf[self.lo:self.lo + take]
                self.lo += take
                self.remaining -= take
                if self.remaining == 0:
                    self.end_frame(self.fin)
                continue
            if self.hi - self.lo < 2:
                break
            b0, b1 = buf[self.lo], buf[self.lo + 1] & 0x7f
            need = 2 + (2 if b1 == 126 else 8 if b1 == 127 else 0)
            if self.hi - self.lo < need:
                break
            size = b1 if b1 < 126 else struct.unpack_from(">H" if b1 == 126 else ">Q", buf,
                                                          self.lo + 2)[0]
            self.lo += need
            self.start_frame(b0, size)
            if self.outcome is not None:
                break

    def start_frame(self, b0, size):
        """After a frame header: its FIN bit and opcode (first byte b0), its payload size."""
        self.fin, op = bool(b0 & 0x80), b0 & 0x0f
        st = self.st
        st["frames"] += 1
        self.control = op >= 8
        if self.control:
            self.opcode_ctl = op
        else:
            st["data_frames"] += 1
            st["max_frame"] = max(st["max_frame"], size)
            if op != 0:
                self.opcode = op
                self.text = bytearray() if op == 1 else None
            self.message_bytes += size
        self.remaining = size
        if size == 0:
            self.end_frame(self.fin)

    def end_frame(self, fin):
        if self.control:
            if self.opcode_ctl == 8:
                raise RuntimeError("the daemon closed the connection")
            return
        if not fin:
            return
        self.st["messages"] += 1
        if self.opcode == 2:
            self.st["data_bytes"] += self.message_bytes - FRAME_HEADER
        elif self.opcode == 1:
            data = json.loads(bytes(self.text))
            if data.get("id") == 1:
                if not data.get("ok"):
                    raise RuntimeError(f"exec refused: {data}")
                self.command = data["result"]["command"]
            elif data.get("event") == "exit" and data.get("command") == self.command:
                self.outcome = data["outcome"]
        self.text = None
        self.message_bytes = 0


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
