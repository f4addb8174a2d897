"""Operating corrald: `corral admin stop-all` (the package's prerm) stops the sandboxes at once, not
one grace period after the other; and a sandbox keeps running, managed where it is, when the next
corrald puts sandboxes elsewhere (the upgrade to systemd's scope: tests/package/ checks that one
under a real systemd)."""
import asyncio
import json
import os
import subprocess
import time
import unittest

from corral_e2e import (CGROUP_ROOT, CORRAL, CORRALD, Daemon, DaemonTestCase, WsClient, mint, process_gone,
                        wait_until)

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



def main_hierarchy():
    """Where corrald reads a process's cgroup: the v2 mount, or the v1 memory hierarchy."""
    if os.path.exists(os.path.join(CGROUP_ROOT, "cgroup.controllers")):
        return CGROUP_ROOT
    return os.path.join(CGROUP_ROOT, "memory")


def procs(rel):
    try:
        with open(os.path.join(main_hierarchy(), rel, "cgroup.procs")) as f:
            return {int(p) for p in f.read().split()}
    except FileNotFoundError:
        return None


class TwoParentDaemon(Daemon):
    """A corrald whose cgroup parent changes between starts: its cleanup covers both."""

    def __init__(self):
        super().__init__()
        self.parents = [self.cgroup_parent + "-a", self.cgroup_parent + "-b"]

    def cgroups(self):
        found = []
        for parent in self.parents:
            self.cgroup_parent = parent
            found += super().cgroups()
        return found


class ParentChange(unittest.TestCase):
    """A running sandbox stays in the cgroup it was started in when the next corrald has another
    parent (an upgrade from corral/<id> to systemd's scope; here daemon.cgroup_parent changes):
    it is adopted and managed there (its commands' cgroups too) until it stops; started again, it
    is under the new parent. What tests/package/ checks under systemd, with any parent."""

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("corrald needs root (namespaces, cgroups, mounts)")
        if not os.path.exists(CORRALD):
            self.skipTest(f"{CORRALD} is not built")
        self.daemon = TwoParentDaemon()
        self.addCleanup(self.daemon.cleanup)

    def api(self, method, path, body=None):
        return self.daemon.http(method, path, self.owner, body)

    def running(self, sid, command):
        return self.api("GET", f"/v1/sandboxes/{sid}/commands/{command}")[1]["state"] == "running"

    def test_a_running_sandbox_is_managed_where_it_runs_until_it_stops(self):
        daemon = self.daemon
        old_parent, new_parent = daemon.parents
        daemon.cgroup_parent = old_parent
        daemon.start()
        self.owner = mint("acme", daemon.add_issuer("acme"), "alice")
        status, row = self.api("POST", "/v1/sandboxes", {})
        self.assertEqual(status, 201, row)
        sid = row["id"]
        self.addCleanup(lambda: daemon.proc.poll() is None and self.api("DELETE", f"/v1/sandboxes/{sid}"))
        init = procs(f"{old_parent}/{sid}/init")
        self.assertTrue(init, f"no init at {old_parent}/{sid}/init")
        first = start_commands(daemon.ws_url(), self.owner, [sid], ["sh", "-c", STUBBORN])[sid]
        wait_until(lambda: self.running(sid, first), 20, what="the command to run")

        daemon.stop()
        daemon.cgroup_parent = new_parent
        daemon.start()
        self.assertEqual(self.api("GET", f"/v1/sandboxes/{sid}")[1]["state"], "running")
        self.assertEqual(procs(f"{old_parent}/{sid}/init"), init)
        self.assertTrue(self.running(sid, first))
        self.assertIn('"msg":"adopted where it runs, not under the current cgroup parent"', daemon.log())
        # A new command of the adopted sandbox: its cgroup beside the first, under the old parent.
        second = start_commands(daemon.ws_url(), self.owner, [sid], ["sh", "-c", STUBBORN])[sid]
        wait_until(lambda: self.running(sid, second), 20, what="the second command to run")
        busy = [name for name in os.listdir(os.path.join(main_hierarchy(), old_parent, sid))
                if name.startswith("cmd-") and procs(f"{old_parent}/{sid}/{name}")]
        self.assertEqual(len(busy), 2, busy)
        self.assertIsNone(procs(f"{new_parent}/{sid}"))
        # Stopped, it leaves the old parent (every hierarchy); started, it is under the new one.
        status, row = self.api("POST", f"/v1/sandboxes/{sid}/stop")
        self.assertEqual((status, row["state"]), (200, "stopped"), row)
        for record in (first, second):
            self.assertEqual(self.api("GET", f"/v1/sandboxes/{sid}/commands/{record}")[1]["outcome"]["outcome"],
                             "killed_by_request")
        self.assertTrue(all(process_gone(pid) for pid in init))
        self.assertEqual([rel for rel in daemon.cgroups() if sid in rel], [])
        status, row = self.api("POST", f"/v1/sandboxes/{sid}/start")
        self.assertEqual((status, row["state"]), (200, "running"), row)
        self.assertTrue(procs(f"{new_parent}/{sid}/init"))
        self.assertIsNone(procs(f"{old_parent}/{sid}"))

if __name__ == "__main__":
    unittest.main()
