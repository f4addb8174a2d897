"""Operating corrald: `corral admin stop-all` (the package's prerm) stops the sandboxes at once, not
one grace period after the other."""
import asyncio
import json
import os
import subprocess
import time
import unittest

from corral_e2e import CORRAL, DaemonTestCase, WsClient, wait_until

STUBBORN = "trap '' TERM; echo up; while :; do sleep 0.1; done"


def start_commands(url, token, sandboxes, argv):
    """One command in each sandbox, over one WebSocket that is then closed (they run on)."""
    async def go():
        client = await WsClient.connect(url, token)
        ids = {}
        for sid in sandboxes:
            reply = await client.request("exec", sandbox=sid, argv=argv)
            assert reply["ok"], reply
            ids[sid] = reply["result"]["command"]
        await client.close()
        return ids
    return asyncio.run(go())


def admin_cli(daemon, *args):
    env = {"PATH": "/usr/bin:/bin", "CORRAL_ADMIN_SOCKET": daemon.admin_socket}
    return subprocess.run([CORRAL, "admin", *args], env=env, capture_output=True, text=True, timeout=300)


class StopAllConcurrently(DaemonTestCase):
    """Six sandboxes, each running a command that ignores SIGTERM: every stop waits out
    sandbox.stop_grace before it kills. One after the other that was 6 graces; at once, one."""
    stop_grace = 4

    def test_six_stubborn_sandboxes_stop_in_about_one_grace_period(self):
        if not os.path.exists(CORRAL):
            self.skipTest(f"{CORRAL} is not built")
        owner = self.token("operator")
        sandboxes = [self.create_sandbox(owner)["id"] for _ in range(6)]
        for sid in sandboxes:
            self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", owner)
        # A seventh, stopped already: stop-all leaves it alone.
        idle = self.create_sandbox(owner)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{idle}", owner)
        self.assertEqual(self.daemon.http("POST", f"/v1/sandboxes/{idle}/stop", owner)[0], 200)
        commands = start_commands(self.daemon.ws_url(), owner, sandboxes, ["sh", "-c", STUBBORN])
        for sid, command in commands.items():
            wait_until(lambda: self.daemon.http("GET", f"/v1/sandboxes/{sid}/commands/{command}",
                                                owner)[1]["state"] == "running",
                       20, what=f"command {command} to run")

        started = time.monotonic()
        proc = admin_cli(self.daemon, "stop-all", "--json")
        elapsed = time.monotonic() - started
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(sorted(json.loads(proc.stdout)["stopped"]), sorted(sandboxes))
        for sid, command in commands.items():
            status, row = self.daemon.http("GET", f"/v1/sandboxes/{sid}", owner)
            self.assertEqual((status, row["state"]), (200, "stopped"), row)
            # Each command outlived its SIGTERM and was killed at the end of the grace period.
            status, record = self.daemon.http("GET", f"/v1/sandboxes/{sid}/commands/{command}", owner)
            self.assertEqual((record["state"], record["outcome"]["outcome"]), ("exited", "killed_by_request"), record)
        grace = self.stop_grace
        print(f"\nstop-all: 6 sandboxes with SIGTERM-ignoring commands, stop_grace {grace} s: {elapsed:.2f} s")
        # The control: the grace period was waited out (the commands did ignore SIGTERM) ...
        self.assertGreaterEqual(elapsed, grace * 0.9)
        # ... once, not six times (24 s): well under two graces.
        self.assertLess(elapsed, grace * 1.6)
        # Nothing left to stop: a second run stops nothing and succeeds.
        proc = admin_cli(self.daemon, "stop-all", "--json")
        self.assertEqual((proc.returncode, json.loads(proc.stdout)["stopped"]), (0, []), proc.stderr)



if __name__ == "__main__":
    unittest.main()
