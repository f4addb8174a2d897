"""Load, bounded: 200 sandboxes alive at once (created, exec'd in and destroyed concurrently) and
1,000 WebSocket connections open at once, against one corrald. Nothing may fail and nothing may
leak (cgroups, loop devices, mounts, the daemon's descriptors). The figures go to stderr.
"""
import asyncio
import concurrent.futures
import os
import re
import resource
import sys
import time

from corral_e2e import DaemonTestCase, WsClient, wait_until

SANDBOXES = 200
USERS = 20            # 10 sandboxes each: the default per-user limit
CONNECTIONS = 1000    # 50 per user: under the default per-user limit of 64


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def report(line):
    print(f"[load] {line}", file=sys.stderr, flush=True)


class Load(DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        # The client side needs a descriptor per connection too.
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
        super().setUpClass()

    def daemon_fds(self):
        return len(os.listdir(f"/proc/{self.daemon.proc.pid}/fd"))

    def daemon_rss_kib(self):
        with open(f"/proc/{self.daemon.proc.pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))

    def loop_devices_of_ours(self):
        found = []
        for name in os.listdir("/sys/block"):
            try:
                with open(f"/sys/block/{name}/loop/backing_file") as f:
                    if f.read().startswith(self.daemon.tmp):
                        found.append(name)
            except OSError:
                pass
        return found

    def mounts_of_ours(self):
        with open("/proc/self/mountinfo") as f:
            return [line for line in f if self.daemon.tmp in line or self.daemon.run_dir in line]

    def metric(self, name):
        status, text = self.daemon.http("GET", "/metrics")
        self.assertEqual(status, 200)
        match = re.search(rf"^{name} (\S+)$", text.decode(), re.M)
        return float(match.group(1)) if match else None

    def test_200_sandboxes_at_once(self):
        tokens = [self.token(f"load-{u}") for u in range(USERS)]
        fds_before = self.daemon_fds()
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=64)

        async def http(*args):
            return await asyncio.get_running_loop().run_in_executor(pool, lambda: self.daemon.http(*args))

        async def create(i):
            start = time.monotonic()
            status, body = await http("POST", "/v1/sandboxes", tokens[i % USERS],
                                      {"name": f"load-{i}", "limits": {"memory_bytes": 64 << 20,
                                                                       "disk_bytes": 64 << 20}})
            self.assertEqual(status, 201, body)
            return body["id"], time.monotonic() - start

        async def run(i, sid):
            start = time.monotonic()
            client = await WsClient.connect(self.daemon.ws_url(), tokens[i % USERS])
            try:
                out, err, outcome, _ = await client.run(sid, ["sh", "-c", f"echo {i} > ~/n; cat ~/n; ulimit -n"])
            finally:
                await client.close()
            self.assertEqual((outcome["outcome"], outcome["exit_code"]), ("exited", 0), err)
            return out.decode(), time.monotonic() - start

        async def destroy(i, sid):
            start = time.monotonic()
            status, body = await http("DELETE", f"/v1/sandboxes/{sid}", tokens[i % USERS])
            self.assertEqual((status, body.get("state")), (200, "destroyed"), body)
            return time.monotonic() - start

        async def scenario():
            t0 = time.monotonic()
            created = await asyncio.gather(*(create(i) for i in range(SANDBOXES)))
            t1 = time.monotonic()
            ids = [sid for sid, _ in created]
            self.assertEqual(len(set(ids)), SANDBOXES)
            ran = await asyncio.gather(*(run(i, sid) for i, sid in enumerate(ids)))
            t2 = time.monotonic()
            rss_full = self.daemon_rss_kib()
            self.assertEqual(self.metric('corral_sandboxes{state="running"}'), SANDBOXES)
            destroyed = await asyncio.gather(*(destroy(i, sid) for i, sid in enumerate(ids)))
            t3 = time.monotonic()
            return created, ran, destroyed, (t1 - t0, t2 - t1, t3 - t2), rss_full

        created, ran, destroyed, phases, rss_full = self.run_async(scenario())
        pool.shutdown()
        # Each command saw its own sandbox (its own file) and the sandboxes' descriptor limit.
        open_files = min(65536, resource.getrlimit(resource.RLIMIT_NOFILE)[1])  # corrald's hard limit is ours
        for i, (out, _) in enumerate(ran):
            self.assertEqual(out, f"{i}\n{open_files}\n")

        create_s = [t for _, t in created]
        run_s = [t for _, t in ran]
        report(f"{SANDBOXES} sandboxes: create all {phases[0]:.1f} s (each p50 {percentile(create_s, 50):.2f} s, "
               f"max {max(create_s):.2f} s); exec in all {phases[1]:.1f} s (each p50 {percentile(run_s, 50) * 1000:.0f} ms, "
               f"max {max(run_s) * 1000:.0f} ms); destroy all {phases[2]:.1f} s (max {max(destroyed):.2f} s); "
               f"daemon RSS with {SANDBOXES} running: {rss_full / 1024:.1f} MiB")

        # Nothing left: rows, cgroups, loop devices, mounts, directories, descriptors.
        self.assertEqual(self.metric('corral_sandboxes{state="running"}'), 0)
        self.assertEqual(self.daemon.admin("GET", "/v1/admin/sandboxes")[1]["sandboxes"], [])
        wait_until(lambda: not self.daemon.cgroups(), 30, what="the sandboxes' cgroups to go")
        wait_until(lambda: not self.loop_devices_of_ours(), 30, what="the loop devices to detach")
        self.assertEqual(self.mounts_of_ours(), [])
        self.assertEqual(os.listdir(os.path.join(self.daemon.state_dir, "sandboxes")), [])
        wait_until(lambda: self.daemon_fds() <= fds_before + 2, 10,
                   what=f"the daemon's descriptors to come back to {fds_before}")

    def test_1000_websocket_connections_at_once(self):
        tokens = [self.token(f"conn-{u}") for u in range(USERS)]
        fds_before = self.daemon_fds()
        rss_before = self.daemon_rss_kib()

        async def scenario():
            gate = asyncio.Semaphore(100)  # how many handshakes are in flight at once

            async def connect(i):
                async with gate:
                    client = await WsClient.connect(self.daemon.ws_url(), tokens[i % USERS], open_timeout=60)
                    reply = await client.request("ping")
                    self.assertTrue(reply["ok"], reply)
                    return client

            t0 = time.monotonic()
            clients = await asyncio.gather(*(connect(i) for i in range(CONNECTIONS)))
            t1 = time.monotonic()
            open_now = await asyncio.to_thread(self.metric, "corral_websocket_connections")
            rss_open = self.daemon_rss_kib()
            # Every one of them still answers while all are open.
            replies = await asyncio.gather(*(c.request("ping") for c in clients))
            t2 = time.monotonic()
            await asyncio.gather(*(c.close() for c in clients))
            return t1 - t0, t2 - t1, open_now, rss_open, replies

        opened_s, pinged_s, open_now, rss_open, replies = self.run_async(scenario())
        self.assertTrue(all(r["ok"] for r in replies))
        self.assertEqual(open_now, CONNECTIONS)
        report(f"{CONNECTIONS} WebSocket connections: opened in {opened_s:.2f} s, a ping on each in "
               f"{pinged_s * 1000:.0f} ms; daemon RSS {rss_before / 1024:.1f} -> {rss_open / 1024:.1f} MiB "
               f"({(rss_open - rss_before) / CONNECTIONS:.1f} KiB per connection)")
        wait_until(lambda: self.metric("corral_websocket_connections") == 0, 10,
                   what="the connections to close")
        wait_until(lambda: self.daemon_fds() <= fds_before + 2, 10,
                   what=f"the daemon's descriptors to come back to {fds_before}")
