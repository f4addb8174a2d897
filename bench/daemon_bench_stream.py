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
