"""Records that tell the truth, against a real corrald with real clients:

- a command's record (GET /v1/sandboxes/{id}/commands/{cid}) is final as soon as the kernel says
  its tree ended, whatever the attached clients do: a client that stopped reading holds the exit
  event back (it still follows all the output), never the record; wall_s is the command's own
  lifetime, not the time its output took to reach a slow client;
- a command's CPU and memory figures are read before its cgroup goes, on every path that ends
  it (the compute budget, a stop after the grace period, a destroy, its sandbox's init dying, a
  daemon restart that finds it gone), not only when it exits by itself;
- GET /v1/usage, `corral usage` and /metrics count CPU time up to the moment asked, not only
  what the meter (every 5 s) has debited, and never count it twice.
"""
import asyncio
import json
import os
import re
import signal
import subprocess
import threading
import time

from corral_e2e import (CGROUP_ROOT, CORRAL, SPIN, DaemonTestCase, UnixHTTPConnection, WsClient, init_pids, process_gone,
                        sandbox_cgroups, wait_until)

# Prints as fast as it can: a client that stops reading stalls it within a fraction of a second.
FLOOD = ["sh", "-c", "exec yes 0123456789abcdef0123456789abcdef0123456789abcdef"]
# Spins and ignores SIGTERM: a stop has to wait out its grace period (2 s here), then kill it.
STUBBORN = ["sh", "-c", "trap '' TERM; while :; do :; done"]
METER_INTERVAL_S = 5
# A second or more of spinning, on a 2-core host shared with builds (one run saw 0.1 s): at least
# this much CPU time. A figure lost with its cgroup reads exactly 0.
MIN_CPU_S = 0.02


def cpu_s(outcome):
    return outcome.get("cpu_user_s", 0) + outcome.get("cpu_sys_s", 0)


def sandbox_cpu_ms(daemon, sandbox):
    """The CPU time a sandbox's cgroup counted, in whole milliseconds, read from the host (v1
    cpuacct.usage, or v2 cpu.stat): the figure the compute meter debits."""
    for rel in sandbox_cgroups(daemon, sandbox):
        if rel.split(os.sep)[-1] != sandbox:
            continue
        path = os.path.join(CGROUP_ROOT, rel)
        if os.path.exists(os.path.join(path, "cpuacct.usage")):
            with open(os.path.join(path, "cpuacct.usage")) as f:
                return int(f.read()) // 1000000
        if os.path.exists(os.path.join(path, "cpu.stat")):
            with open(os.path.join(path, "cpu.stat")) as f:
                for line in f:
                    key, value = line.split()
                    if key == "usage_usec":
                        return int(value) // 1000
    raise AssertionError(f"no CPU figure for {sandbox} in {sandbox_cgroups(daemon, sandbox)}")


class SlowClient:
    """A WebSocket client that runs a command and then stops reading (the websockets library
    queues at most one message, so TCP pushes back on the daemon)."""

    def __init__(self, test, token, sandbox, argv):
        self.test, self.token, self.sandbox, self.argv = test, token, sandbox, argv

    async def start(self):
        self.client = await WsClient.connect(self.test.daemon.ws_url(), self.token, max_queue=1)
        self.started = time.monotonic()
        reply = await self.client.request("exec", sandbox=self.sandbox, argv=self.argv)
        self.test.assertTrue(reply["ok"], reply)
        self.command = reply["result"]["command"]
        # Stalled: the daemon's count of output bytes streamed stops moving.
        last, still_since = None, time.monotonic()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            out = self.test.daemon.metrics().sum("corral_stream_bytes_total", direction="out")
            if out != last:
                last, still_since = out, time.monotonic()
            elif time.monotonic() - still_since >= 0.6:
                return self
            await asyncio.sleep(0.1)
        self.test.fail("the output never stalled behind the slow client")

    async def drain(self):
        """Reads everything up to the exit event; returns (output events, exit event)."""
        outputs = []
        while True:
            event = await self.client.next_event(timeout=60)
            if event.get("event") == "output":
                outputs.append(event)
            elif event.get("event") == "exit":
                return outputs, event

    async def close(self):
        await self.client.close()


class CommandRecords(DaemonTestCase):

    def record(self, token, sandbox, command):
        status, row = self.daemon.http("GET", f"/v1/sandboxes/{sandbox}/commands/{command}", token)
        self.assertEqual(status, 200, row)
        return row

    def wait_ended(self, token, sandbox, command, since, limit=1.5):
        """Polls the record until it is final; fails unless that took at most `limit` s after `since`."""
        deadline = since + limit + 3
        while True:
            row = self.record(token, sandbox, command)
            if row["state"] == "exited":
                break
            if time.monotonic() > deadline:
                self.fail(f"the record is still {row['state']} (ended_at {row.get('ended_at')}) "
                          f"{deadline - since:.1f} s after the command ended: {row}")
            time.sleep(0.05)
        elapsed = time.monotonic() - since
        self.assertLess(elapsed, limit, f"the record took {elapsed:.2f} s to be final: {row}")
        self.assertGreater(row["ended_at"], 0, row)
        return row

    def check_drained(self, outputs, exit_event, row):
        """The exit event follows every output event, the numbering has no gap, and it carries
        the stored outcome."""
        self.assertTrue(outputs, "no output before the exit")
        seqs = [e["seq"] for e in outputs]
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))), "a gap in the output")
        self.assertEqual(seqs[0], 1)
        self.assertEqual(exit_event["seq"], seqs[-1] + 1)
        self.assertEqual(exit_event["outcome"], row["outcome"])

    def sandbox(self, token, **body):
        sandbox = self.create_sandbox(token, **body)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sandbox}", token)
        return sandbox

    # ---- the record is final at the kernel's end ----

    def test_a_command_killed_while_a_slow_client_is_attached_is_final_at_once(self):
        token = self.token("slow-kill")
        sandbox = self.sandbox(token)

        async def go():
            slow = await SlowClient(self, token, sandbox, FLOOD).start()
            command = slow.command
            # Control: while it runs (stalled), its record says so.
            self.assertEqual(self.record(token, sandbox, command)["state"], "running")
            # A second connection kills it.
            other = await WsClient.connect(self.daemon.ws_url(), token)
            reply = await other.request("attach", command=command, after_seq=10**12)
            self.assertTrue(reply["ok"], reply)
            self.assertEqual(reply["result"]["state"], "running")
            reply = await other.request("signal", command=command, signal="KILL")
            self.assertTrue(reply["ok"], reply)
            killed = time.monotonic()
            # The slow client has not read a byte more, and the record is final anyway.
            row = self.wait_ended(token, sandbox, command, killed)
            outcome = row["outcome"]
            self.assertEqual((outcome["outcome"], outcome.get("signal")), ("killed_by_request", 9), row)
            # Its own lifetime: from the exec to the kill, not to the end of the client's stall.
            self.assertLess(outcome["wall_s"], killed - slow.started + 0.5, row)
            self.assertGreater(outcome["wall_s"], 0.5, row)  # it ran while the output stalled
            self.assertIn("peak_memory_bytes", outcome)
            # The outcome is what `signal` says too: it has exited.
            reply = await other.request("signal", command=command, signal="KILL")
            self.assertEqual((reply["ok"], reply["error"]["code"]), (False, "conflict"), reply)
            # A late attach says exited too.
            late = await WsClient.connect(self.daemon.ws_url(), token)
            reply = await late.request("attach", command=command, after_seq=10**12)
            self.assertEqual(reply["result"]["state"], "exited", reply)
            await late.close()
            # The client stalls on; the record does not move.
            await asyncio.sleep(2)
            self.assertEqual(self.record(token, sandbox, command), row)
            # The exit event still follows all the output, and carries the same outcome.
            outputs, exit_event = await slow.drain()
            self.check_drained(outputs, exit_event, row)
            self.assertGreater(sum(len(e["data"]) for e in outputs), 1 << 20)
            with self.assertRaises(asyncio.TimeoutError):
                await slow.client.next_event(timeout=0.5)  # nothing after the exit
            self.assertEqual(self.record(token, sandbox, command), row)
            await other.close()
            await slow.close()

        self.run_async(go())

    def test_a_stop_while_a_slow_client_is_attached_ends_the_record_without_waiting_for_it(self):
        token = self.token("slow-stop")
        sandbox = self.sandbox(token)

        async def go():
            slow = await SlowClient(self, token, sandbox, FLOOD).start()
            stopped = {}

            def stop():
                stopped["answer"] = self.daemon.http("POST", f"/v1/sandboxes/{sandbox}/stop", token)
                stopped["at"] = time.monotonic()

            asked = time.monotonic()
            thread = threading.Thread(target=stop)
            thread.start()
            # SIGTERM ends `yes` at once: the record is final, and the stop does not wait out its
            # grace period (2 s) for a client that is not reading.
            row = self.wait_ended(token, sandbox, slow.command, asked)
            thread.join(30)
            self.assertEqual(stopped["answer"][0], 200, stopped["answer"])
            self.assertEqual(stopped["answer"][1]["state"], "stopped")
            self.assertLess(stopped["at"] - asked, 1.9, "the stop waited for the slow client")
            outcome = row["outcome"]
            self.assertEqual((outcome["outcome"], outcome.get("signal")), ("killed_by_request", 15), row)
            self.assertLess(outcome["wall_s"], asked - slow.started + 0.5, row)
            # The output is still delivered in full, then the exit event.
            outputs, exit_event = await slow.drain()
            self.check_drained(outputs, exit_event, row)
            await slow.close()

        self.run_async(go())

    def test_a_main_process_that_exits_behind_a_slow_client_ends_with_its_leftovers(self):
        # The main process exits 3 after a second; its background `yes` is blocked on the full pipe.
        token = self.token("slow-exit")
        sandbox = self.sandbox(token)
        argv = ["sh", "-c", "yes 0123456789abcdef0123456789abcdef & sleep 1; exit 3"]

        async def go():
            slow = await SlowClient(self, token, sandbox, argv).start()
            row = self.wait_ended(token, sandbox, slow.command, slow.started, limit=1 + 1.5)
            outcome = row["outcome"]
            self.assertEqual((outcome["outcome"], outcome.get("exit_code")), ("exited", 3), row)
            self.assertLess(outcome["wall_s"], 2.5, row)
            self.assertGreaterEqual(outcome["wall_s"], 1.0, row)
            outputs, exit_event = await slow.drain()
            self.check_drained(outputs, exit_event, row)
            await slow.close()

        self.run_async(go())

    def test_control_a_reading_client_gets_its_output_and_the_same_record(self):
        token = self.token("fast")
        sandbox = self.sandbox(token)

        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            out, _, outcome, command = await c.run(sandbox, ["sh", "-c", "head -c 3000000 /dev/zero; exit 4"])
            await c.close()
            return out, outcome, command

        out, outcome, command = self.run_async(go())
        self.assertEqual(len(out), 3000000)
        self.assertEqual((outcome["outcome"], outcome["exit_code"]), ("exited", 4))
        self.assertEqual(self.record(token, sandbox, command)["outcome"], outcome)

    # ---- the figures are read before the cgroup goes ----

    def test_a_command_stopped_by_the_compute_budget_keeps_its_figures(self):
        token = self.token("budget-figures", budget={"compute_s": 1, "window": "day"})
        sandbox = self.sandbox(token)
        outcome, command = self.exec_once(token, sandbox, SPIN, timeout=60)
        self.assertEqual(outcome["outcome"], "budget_exhausted", outcome)
        # It spent the budget (1 s of the cgroup's exact CPU time) before the meter stopped it; the
        # user/system split is sampled by the kernel, so allow it to read lower.
        self.assertGreaterEqual(cpu_s(outcome), 0.5, outcome)
        self.assertGreater(outcome["peak_memory_bytes"], 0, outcome)
        self.assertEqual(self.record(token, sandbox, command)["outcome"], outcome)

    def end_while_running(self, token, sandbox, argv, end, after=1.0):
        """Runs `argv`, lets it work `after` seconds, calls `end(command)` (from a thread: it may
        block on the daemon), and returns the command's id and the outcome of its exit event."""
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                reply = await c.request("exec", sandbox=sandbox, argv=argv)
                self.assertTrue(reply["ok"], reply)
                command = reply["result"]["command"]
                await asyncio.sleep(after)
                await asyncio.get_running_loop().run_in_executor(None, end, command)
                while (event := await c.next_event(timeout=30)).get("event") != "exit":
                    pass
                return command, event["outcome"]
            finally:
                await c.close()
        return self.run_async(go())

    def assert_figures(self, outcome):
        self.assertGreater(cpu_s(outcome), MIN_CPU_S, outcome)
        self.assertGreater(outcome["peak_memory_bytes"], 0, outcome)

    def stop(self, token, sandbox):
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{sandbox}/stop", token)
        self.assertEqual(status, 200, body)

    def test_a_command_killed_after_the_stop_grace_keeps_its_figures(self):
        token = self.token("grace-figures")
        sandbox = self.sandbox(token)
        command, outcome = self.end_while_running(token, sandbox, STUBBORN, lambda _: self.stop(token, sandbox))
        self.assertEqual((outcome["outcome"], outcome.get("signal")), ("killed_by_request", 9), outcome)
        # A second of work, then the 2 s grace it spent spinning too.
        self.assert_figures(outcome)
        self.assertGreaterEqual(outcome["wall_s"], 2.5, outcome)
        self.assertEqual(self.record(token, sandbox, command)["outcome"], outcome)

    def test_a_command_of_a_destroyed_sandbox_keeps_its_figures(self):
        token = self.token("destroy-figures")
        sandbox = self.create_sandbox(token)["id"]

        def destroy(_):
            status, body = self.daemon.http("DELETE", f"/v1/sandboxes/{sandbox}", token)
            self.assertIn(status, (200, 204), body)

        _, outcome = self.end_while_running(token, sandbox, STUBBORN, destroy)
        self.assertEqual(outcome["outcome"], "killed_by_request", outcome)
        self.assert_figures(outcome)

    def test_a_command_whose_init_dies_keeps_its_figures(self):
        token = self.token("init-figures")
        sandbox = self.sandbox(token)

        def kill_init(_):
            (pid,) = init_pids(self.daemon, sandbox)
            os.kill(pid, signal.SIGKILL)  # from the host: the whole sandbox goes with it

        command, outcome = self.end_while_running(token, sandbox, SPIN, kill_init, after=1.5)
        self.assertEqual((outcome["outcome"], outcome.get("signal")), ("signaled", 9), outcome)
        self.assert_figures(outcome)
        self.assertEqual(self.record(token, sandbox, command)["outcome"], outcome)

    def test_control_commands_that_end_by_a_signal_keep_their_figures(self):
        # The paths that always read them: a KILL by request, and a stop whose SIGTERM ends it.
        token = self.token("signal-figures")
        sandbox = self.sandbox(token)

        async def kill(command):
            c = await WsClient.connect(self.daemon.ws_url(), token)
            self.assertTrue((await c.request("attach", command=command, after_seq=10**12))["ok"])
            self.assertTrue((await c.request("signal", command=command, signal="KILL"))["ok"])
            await c.close()

        _, killed = self.end_while_running(token, sandbox, SPIN, lambda command: asyncio.run(kill(command)))
        _, stopped = self.end_while_running(token, sandbox, SPIN, lambda _: self.stop(token, sandbox))
        self.assertEqual((killed["outcome"], killed["signal"]), ("killed_by_request", 9), killed)
        self.assertEqual((stopped["outcome"], stopped["signal"]), ("killed_by_request", 15), stopped)
        self.assert_figures(killed)
        self.assert_figures(stopped)

    # ---- usage up to the moment asked ----

    def test_usage_and_metrics_count_cpu_time_up_to_the_moment_asked_and_never_twice(self):
        token = self.token("live-usage", budget={"compute_s": 3600, "window": "day"})
        counted_before = self.daemon.metrics().get("corral_compute_cpu_seconds_total")
        sandbox = self.sandbox(token)

        def bracket():
            """(the sandbox cgroup's CPU ms before, the report's, the metric's, the cgroup's after)."""
            before = sandbox_cpu_ms(self.daemon, sandbox)
            status, usage = self.daemon.http("GET", "/v1/usage", token)
            self.assertEqual(status, 200, usage)
            counted = self.daemon.metrics().get("corral_compute_cpu_seconds_total")
            return before, round(usage["compute"]["spent_s"] * 1000), counted, sandbox_cpu_ms(self.daemon, sandbox)

        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            reply = await c.request("exec", sandbox=sandbox, argv=SPIN)  # spins on while we look
            self.assertTrue(reply["ok"], reply)
            await asyncio.sleep(0.5)
            # Every answer holds what the cgroup counted up to the moment asked: not less (the meter
            # debits every 5 s), not more (nothing twice), across two of the meter's debits.
            samples = []
            deadline = time.monotonic() + METER_INTERVAL_S * 2 + 1
            while time.monotonic() < deadline:
                samples.append(bracket())
                await asyncio.sleep(0.2)
            for before, spent, counted, after in samples:
                self.assertGreaterEqual(spent, before - 1, samples)  # whole milliseconds
                self.assertLessEqual(spent, after, samples)
                self.assertGreaterEqual(counted - counted_before + 0.002, before / 1000, samples)
            for earlier, later in zip(samples, samples[1:]):
                self.assertGreaterEqual(later[1], earlier[1], samples)
                self.assertGreaterEqual(later[2], earlier[2], "the counter went down")
            self.assertGreater(samples[-1][0], 1000, "the spinner barely ran")
            # The CLI's report too.
            env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
            env.update(CORRAL_URL=f"http://127.0.0.1:{self.daemon.port}", CORRAL_TOKEN=token)
            low = sandbox_cpu_ms(self.daemon, sandbox)
            proc = subprocess.run([CORRAL, "usage"], env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            shown = float(re.search(r"compute\s+([0-9.]+) CPU-s", proc.stdout).group(1))
            self.assertGreaterEqual(shown * 1000, low - 1, proc.stdout)
            # The ledger itself is debited every interval meanwhile (the operator's export).
            self.assertGreater(self.ledger_ms("live-usage"), 0)
            self.assertLessEqual(self.ledger_ms("live-usage"), sandbox_cpu_ms(self.daemon, sandbox))
            await c.close()
            return samples

        samples = self.run_async(go())
        # Stopped, nothing is left undebited: the report is the ledger, exactly, and nothing was
        # lost on the way (the counter did not go down either).
        self.stop(token, sandbox)
        status, usage = self.daemon.http("GET", "/v1/usage", token)
        spent = round(usage["compute"]["spent_s"] * 1000)
        self.assertEqual(spent, self.ledger_ms("live-usage"))
        self.assertGreaterEqual(spent, samples[-1][1])
        self.assertGreaterEqual(self.daemon.metrics().get("corral_compute_cpu_seconds_total"), samples[-1][2])
        # Another user's report holds none of it.
        status, other = self.daemon.http("GET", "/v1/usage", self.token("live-usage-bystander"))
        self.assertEqual((other["compute"]["spent_s"], other["sandboxes"]), (0, []))

    def ledger_ms(self, sub):
        """The user's compute debits in the ledger (the operator's export), in milliseconds."""
        conn = UnixHTTPConnection(self.daemon.admin_socket)
        try:
            conn.request("GET", f"/v1/admin/usage?issuer=acme&user={sub}&format=jsonl")
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        self.assertEqual(response.status, 200, body)
        rows = [json.loads(line) for line in body.decode().splitlines()]
        return sum(r["amount"] for r in rows if r["kind"] == "compute")

    # ---- last: a daemon restart ----

    def test_z_a_command_lost_across_a_restart_keeps_the_figures_its_cgroup_held(self):
        token = self.token("lost-figures")
        sandbox = self.sandbox(token)

        async def start():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            reply = await c.request("exec", sandbox=sandbox, argv=SPIN)
            self.assertTrue(reply["ok"], reply)
            await asyncio.sleep(1.5)
            return c, reply["result"]["command"]

        async def crash(c):
            (pid,) = init_pids(self.daemon, sandbox)
            self.daemon.kill9()
            try:
                await c.close()
            except Exception:
                pass
            os.kill(pid, signal.SIGKILL)  # while no daemon runs
            wait_until(lambda: process_gone(pid), 10, what=f"corral-init {pid} to die")
            return sandbox_cpu_ms(self.daemon, sandbox)  # all it will ever have counted

        c, command = self.run_async(start())
        final_ms = self.run_async(crash(c))
        self.daemon.start()
        row = self.record(token, sandbox, command)
        self.assertEqual((row["state"], row["outcome"]["outcome"]), ("exited", "lost"), row)
        self.assertGreater(cpu_s(row["outcome"]), MIN_CPU_S, row)
        self.assertGreater(row["outcome"]["peak_memory_bytes"], 0, row)
        # Its last CPU time went to the ledger before its cgroup went, too: all of it.
        self.assertEqual(sandbox_cgroups(self.daemon, sandbox), [])
        self.assertEqual(self.ledger_ms("lost-figures"), final_ms)
