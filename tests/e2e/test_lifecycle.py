"""A sandbox's life on its own: the idle timeout stops a sandbox where nothing runs, and never one
where a command runs.

corrald looks for idle sandboxes every 5 seconds (kIdleSweep in supervisor/sandboxes/sandbox_manager.cc,
not configurable), so with idle_timeout_s = 2 a sandbox stops 2 to 7 seconds after its last
activity; the deadlines below leave room for that.
"""
import os
import sqlite3
import subprocess
import time
import unittest

from corral_e2e import CORRAL, DaemonTestCase, WsClient, wait_until

STOP_DEADLINE = 30  # seconds; a sweep is due every 5


class IdleTimeout(DaemonTestCase):
    def setUp(self):
        self.owner = self.token("idler")

    def state(self, sid):
        # Through the admin socket: an operator's look, which is no activity of the user's.
        status, body = self.daemon.admin("GET", "/v1/admin/sandboxes")
        self.assertEqual(status, 200, body)
        for sandbox in body["sandboxes"]:
            if sandbox["id"] == sid:
                return sandbox["state"]
        self.fail(f"{sid} is not listed: {body}")

    def create(self, **body):
        sandbox = self.create_sandbox(self.owner, **body)
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sandbox['id']}", self.owner)
        return sandbox

    def test_an_idle_sandbox_stops_and_a_busy_one_does_not(self):
        # The CLI's --idle-timeout reaches the daemon.
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        env.update(CORRAL_URL=f"http://127.0.0.1:{self.daemon.port}", CORRAL_TOKEN=self.owner)
        proc = subprocess.run([CORRAL, "sandbox", "create", "--name", "idle", "--idle-timeout", "2s"], env=env,
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        idle = proc.stdout.strip()
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{idle}", self.owner)
        status, sandbox = self.daemon.http("GET", f"/v1/sandboxes/{idle}", self.owner)
        self.assertEqual((status, sandbox["idle_timeout_s"], sandbox["state"]), (200, 2, "running"))

        # A sandbox with the same timeout and a command that runs until told to stop.
        busy = self.create(name="busy", idle_timeout_s=2)["id"]

        async def start_waiter():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            reply = await c.request("exec", sandbox=busy,
                                    argv=["sh", "-c", "while [ ! -e /home/agent/done ]; do sleep 0.1; done"])
            await c.close()  # the command does not need a client
            return reply
        reply = self.run_async(start_waiter())
        self.assertTrue(reply["ok"], reply)
        command = reply["result"]["command"]
        # Created after the command started: when this one has been stopped, a sweep ran at a time
        # when `busy` was past its timeout too, by its timestamps.
        later = self.create(name="later", idle_timeout_s=2)["id"]
        never = self.create(name="never", idle_timeout_s=0)["id"]

        wait_until(lambda: self.state(idle) == "stopped" and self.state(later) == "stopped", STOP_DEADLINE,
                   interval=0.25, what="the idle sandboxes to stop")
        self.assertEqual(self.state(busy), "running")
        self.assertEqual(self.state(never), "running")  # 0: never
        status, record = self.daemon.http("GET", f"/v1/sandboxes/{busy}/commands/{command}", self.owner)
        self.assertEqual((status, record["state"]), (200, "running"), record)

        # The command ends: now `busy` is idle too, and stops by itself.
        status, _ = self.daemon.http("PUT", f"/v1/sandboxes/{busy}/fs/write?path=/home/agent/done", self.owner,
                                     raw=b"")
        self.assertEqual(status, 200)
        wait_until(lambda: self.daemon.http("GET", f"/v1/sandboxes/{busy}/commands/{command}",
                                            self.owner)[1]["state"] == "exited", 10, interval=0.1,
                   what="the command to end")
        status, record = self.daemon.http("GET", f"/v1/sandboxes/{busy}/commands/{command}", self.owner)
        self.assertEqual((record["outcome"]["outcome"], record["outcome"].get("exit_code")), ("exited", 0), record)
        wait_until(lambda: self.state(busy) == "stopped", STOP_DEADLINE, interval=0.25,
                   what="the sandbox to stop once its command ended")
        self.assertEqual(self.state(never), "running")

        # Stopped by the timeout is stopped like any other: it starts again, with its files.
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{busy}/start", self.owner)
        self.assertEqual((status, body["state"]), (200, "running"), body)
        status, data = self.daemon.http("GET", f"/v1/sandboxes/{busy}/fs/stat?path=/home/agent/done", self.owner)
        self.assertEqual((status, data["type"]), (200, "file"), data)

    def test_a_timeout_above_the_tokens_cap_is_refused(self):
        capped = self.token("idler-capped", limits={"idle_timeout_s": 60})
        status, body = self.daemon.http("POST", "/v1/sandboxes", capped, {"idle_timeout_s": 61})
        self.assertEqual((status, body["error"]["code"]), (429, "limit_exceeded"), body)
        self.assertIn("idle_timeout_s", body["error"]["message"])
        # Positive control: at the cap.
        status, body = self.daemon.http("POST", "/v1/sandboxes", capped, {"idle_timeout_s": 60})
        self.assertEqual((status, body.get("idle_timeout_s")), (201, 60), body)
        self.daemon.http("DELETE", f"/v1/sandboxes/{body['id']}", capped)


class Activity(DaemonTestCase):
    """corrald keeps a running sandbox's last activity in memory and writes it to the store at
    most every 10 s (kActivityWrite): the API shows the newer value at once, and a daemon that
    stops writes what it holds."""

    def stored_last_active(self, sid):
        db = sqlite3.connect(f"file:{self.daemon.state_dir}/corrald.db?mode=ro", uri=True)
        try:
            return db.execute("SELECT last_active_at FROM sandboxes WHERE id = ?", (sid,)).fetchone()[0]
        finally:
            db.close()

    def api_last_active(self, token, sid):
        status, body = self.daemon.http("GET", f"/v1/sandboxes/{sid}", token)
        self.assertEqual(status, 200, body)
        return body["last_active_at"]

    def exec_true(self, token, sid):
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                return await c.run(sid, ["true"])
            finally:
                await c.close()
        _, _, outcome, _ = self.run_async(go())
        self.assertEqual(outcome.get("exit_code"), 0, outcome)

    def next_second(self, after):
        while time.time() < after + 1:
            time.sleep(0.05)

    def test_activity_is_current_in_the_api_and_written_at_shutdown(self):
        owner = self.token("active")
        sid = self.create_sandbox(owner)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", owner)
        created = self.api_last_active(owner, sid)
        # The first activity is written at once (nothing written for this sandbox yet).
        self.next_second(created)
        self.exec_true(owner, sid)
        first = self.api_last_active(owner, sid)
        self.assertGreater(first, created)
        self.assertGreater(self.stored_last_active(sid), created)
        # The next one, within 10 s: the API has it, the store not yet.
        self.next_second(first)
        self.exec_true(owner, sid)
        second = self.api_last_active(owner, sid)
        self.assertGreater(second, first)
        self.assertLess(self.stored_last_active(sid), second)
        # A daemon that stops writes it (SIGTERM; the sandbox runs on) and the next one shows it.
        self.daemon.stop()
        self.assertEqual(self.stored_last_active(sid), second)
        self.daemon.start()
        self.assertEqual(self.api_last_active(owner, sid), second)


if __name__ == "__main__":
    unittest.main()


class StopWithCommands(DaemonTestCase):
    """A stop while commands ignore SIGTERM: after the grace period (stop_grace = 2 here) they are
    killed with the sandbox, each ends `killed_by_request`, and the daemon goes on. (Ending many
    commands at once used to walk a map that each end shrank: a use after free that crashed
    corrald now and then.)"""

    def test_commands_that_ignore_sigterm_end_killed_by_request_and_the_daemon_lives(self):
        owner = self.token("stopper")
        sid = self.create_sandbox(owner)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", owner)
        stubborn = "trap '' TERM; echo up; while :; do sleep 0.1; done"

        async def start(n):
            c = await WsClient.connect(self.daemon.ws_url(), owner)
            ids = []
            for _ in range(n):
                reply = await c.request("exec", sandbox=sid, argv=["sh", "-c", stubborn])
                self.assertTrue(reply["ok"], reply)
                ids.append(reply["result"]["command"])
            await c.close()
            return ids

        for round_ in range(3):
            commands = self.run_async(start(6))
            for command in commands:
                wait_until(lambda: self.daemon.http("GET", f"/v1/sandboxes/{sid}/commands/{command}",
                                                    owner)[1]["state"] == "running",
                           10, interval=0.05, what=f"command {command} to run")
            status, body = self.daemon.http("POST", f"/v1/sandboxes/{sid}/stop", owner)
            self.assertEqual((status, body.get("state")), (200, "stopped"), body)
            self.assertIsNone(self.daemon.proc.poll(), self.daemon.log()[-3000:])
            for command in commands:
                status, record = self.daemon.http("GET", f"/v1/sandboxes/{sid}/commands/{command}", owner)
                self.assertEqual(status, 200, record)
                self.assertEqual((record["state"], record["outcome"]["outcome"]), ("exited", "killed_by_request"),
                                 f"round {round_}: {record}")
            # The positive control: the daemon still serves, and the sandbox starts again.
            status, body = self.daemon.http("POST", f"/v1/sandboxes/{sid}/start", owner)
            self.assertEqual((status, body.get("state")), (200, "running"), body)
