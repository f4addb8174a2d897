"""The warm pool ([pool] sizes): sandboxes made ahead and claimed by creates of their shape.

A claimed sandbox and a fresh one are alike in everything a user can observe: ids and uid range,
hostname, limits (the caller's, applied at the claim), files, egress, events, an agent session.
The pool refills after a claim, a reload drains or grows it, a restart (clean or after a crash)
leaves nothing of the old pool; creates of another shape, or with the pool empty, start afresh;
a create with the state dir's disk full fails with `unavailable` and says why, never `internal`.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

from agent_turns import AgentTurns
from corral_e2e import Daemon, DaemonTestCase, WsClient, operator_key_file, relay_config, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import scripted_model  # noqa: E402

REAL_KEY = "sk-ant-e2e-pool-operator-key"
_upstream = scripted_model.serve({"turns": []}, port=0)
_key_dir, _key_file = operator_key_file("corral-e2e-pool-", REAL_KEY)

# What a user sees of a sandbox from inside: everything but what must differ (its host uid range,
# read separately), what moves with time, and which CPUs it is pinned to (the uid slot spreads
# sandboxes over the host's CPUs, pooled or not: their count is compared).
LOOK = r"""
id -u; id -g; id -un; hostname; cat /etc/hostname; grep -c . /etc/hosts; nproc
tr ',' '\n' < /sys/devices/system/cpu/online | wc -l
for f in memory.max memory.limit_in_bytes pids.max memory/memory.limit_in_bytes pids/pids.max; do
  [ -r /sys/fs/cgroup/$f ] && echo "$f $(cat /sys/fs/cgroup/$f)"; done
ulimit -n; ulimit -u; df -B1M --output=size / | tail -1; df -B1M --output=size /tmp | tail -1
ls -la --time-style=+ /home/agent | awk '{print $1, $3, $4, $NF}'; ls -A /tmp | wc -l
env | grep -v '^\(HOSTNAME\|PWD\|SHLVL\|_\)=' | sort
cat /proc/1/cmdline | tr '\0' ' '; echo
"""


def egress_answer():
    """What the sandbox's egress proxy answers a CONNECT to a host no rule allows."""
    return ("python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', 7882)); "
            "s.sendall(b'CONNECT denied.example:443 HTTP/1.1\\r\\nHost: denied.example:443\\r\\n\\r\\n'); "
            "print(s.recv(200).split(b'\\r\\n')[0].decode())\"")


class Pool(DaemonTestCase, AgentTurns):
    upstream = _upstream
    real_key = REAL_KEY

    @classmethod
    def setUpClass(cls):
        cls.extra_config = relay_config(_upstream.port, _key_file) + """
[egress]
enabled = true
domains = ["allowed.example"]

[pool]
sizes = { host = 2 }
"""
        super().setUpClass()

    def setUp(self):
        self.set_pool("{ host = 2 }")

    # ---- helpers ----

    def pooled(self):
        return int(self.daemon.metrics().get("corral_sandboxes", state="pooled"))

    def pool_ready(self):
        return int(self.daemon.metrics().get("corral_pool_ready"))

    def set_pool(self, sizes):
        """Rewrites [pool] sizes, reloads, and waits for the pool to hold them."""
        with open(self.daemon.config_path) as f:
            text = f.read()
        start = text.index("[pool]")
        with open(self.daemon.config_path, "w") as f:
            f.write(text[:start] + f"[pool]\nsizes = {sizes}\n")
        before = self.daemon.log().count('"config reloaded"')
        os.kill(self.daemon.proc.pid, signal.SIGHUP)
        wait_until(lambda: self.daemon.log().count('"config reloaded"') > before, what="the reload")
        want = sum(int(part.split("=")[1]) for part in sizes.strip("{} ").split(",") if "=" in part)
        wait_until(lambda: self.pooled() == want, timeout=60, what=f"{want} pooled sandboxes")
        wait_until(lambda: self.pool_ready() == want, timeout=60, what=f"{want} pooled sandboxes started")
        wait_until(lambda: len(self.pool_cgroups()) == want, timeout=30, what="the pool's cgroups")

    def pool_cgroups(self):
        """Sandbox ids with a cgroup that no user owns (listed to the admin: the pool's)."""
        status, body = self.daemon.admin("GET", "/v1/admin/sandboxes")
        self.assertEqual(status, 200, body)
        owned = {s["id"] for s in body["sandboxes"]}
        ids = {rel.split("/")[-1] for rel in self.daemon.cgroups() if rel.split("/")[-1].startswith("sb_")}
        return ids - owned

    def claimed(self, sid):
        """Whether the daemon logged this sandbox as claimed from the pool."""
        for line in self.daemon.log().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("msg") == "created from the pool" and entry.get("sandbox") == sid:
                return True
        return False

    def in_sandbox(self, token, sid, script):
        """A shell script's stdout in the sandbox (it must exit 0)."""
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                return await c.run(sid, ["sh", "-c", script])
            finally:
                await c.close()
        out, err, outcome, _ = self.run_async(go())
        self.assertEqual((outcome["outcome"], outcome.get("exit_code")), ("exited", 0), (outcome, err))
        return out.decode()

    def look(self, token, sid):
        return self.in_sandbox(token, sid, LOOK)

    def create(self, token, **body):
        sandbox = self.create_sandbox(token, **body)
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sandbox['id']}", token)
        return sandbox

    # ---- tests ----

    def test_a_claimed_sandbox_is_alike_a_fresh_one(self):
        self.owner = self.token("alike", budget={"ai_usd": 5, "window": "day"})
        request = {"name": "twin", "limits": {"memory_bytes": 300 << 20, "pids": 100}, "idle_timeout_s": 600,
                   "egress": {"domains": ["allowed.example", "*.allowed.example"]}}
        pooled_ids = self.pool_cgroups()
        claimed = self.create(self.owner, **request)
        self.assertIn(claimed["id"], pooled_ids)
        self.assertTrue(self.claimed(claimed["id"]))
        self.set_pool("{ host = 0 }")  # the next one is made afresh
        fresh = self.create(self.owner, **request)
        self.assertFalse(self.claimed(fresh["id"]))
        self.assertNotIn(fresh["id"], pooled_ids)

        # The API's view: every field but the id and the times is the same.
        views = []
        for sandbox in (claimed, fresh):
            status, row = self.daemon.http("GET", f"/v1/sandboxes/{sandbox['id']}", self.owner)
            self.assertEqual(status, 200, row)
            views.append({k: v for k, v in row.items() if k not in ("id", "created_at", "updated_at", "last_active_at")})
        self.assertEqual(views[0], views[1])
        self.assertEqual(views[0]["state"], "running")
        self.assertEqual(views[0]["limits"]["memory_bytes"], 300 << 20)

        # From inside: the same user, hostname, limits (the caller's, not the pool's defaults), files.
        looks = [self.look(self.owner, s["id"]) for s in (claimed, fresh)]
        self.assertEqual(looks[0], looks[1])
        self.assertIn(str(300 << 20), looks[0])  # memory limit
        self.assertIn(" 100\n", looks[0])       # pids limit
        self.assertTrue(looks[0].startswith("1000\n1000\nagent\ncorral\ncorral\n"), looks[0])

        # Its own uid range and files: nothing shared with the fresh one or the other pooled one.
        maps = [self.in_sandbox(self.owner, s["id"], "cat /proc/self/uid_map") for s in (claimed, fresh)]
        self.assertNotEqual(maps[0], maps[1])
        self.in_sandbox(self.owner, claimed["id"], "echo mine > /home/agent/only-here")
        self.assertEqual(self.in_sandbox(self.owner, fresh["id"], "ls /home/agent/only-here 2>&1 | grep -c 'No such'"),
                         "1\n")

        # Egress: the caller's rules, served by the proxy in both.
        for sandbox in (claimed, fresh):
            self.assertEqual(self.in_sandbox(self.owner, sandbox["id"], egress_answer()).split(" ")[1], "403")
            status, events = self.daemon.http("GET", f"/v1/sandboxes/{sandbox['id']}/events", self.owner)
            self.assertEqual(status, 200, events)
            kinds = [e["type"] for e in events["events"]]
            self.assertEqual(kinds[:2], ["sandbox.created", "sandbox.started"], kinds)
            self.assertIn("egress", kinds)

        # An agent session works in both, metered to the caller.
        for sandbox in (claimed, fresh):
            output, row = self.one_turn_with_bash(sandbox["id"], "echo hi > ~/hello.txt; hostname")
            self.assertIn("corral", output)

    def test_the_pool_refills_after_claims_and_is_never_listed(self):
        token = self.token("refill")
        first = self.create(token, limits={"memory_bytes": 2 << 30})  # above the pool's default
        second = self.create(token)
        self.assertTrue(self.claimed(first["id"]) and self.claimed(second["id"]))
        limit = "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
        self.assertEqual(self.in_sandbox(token, first["id"], limit), f"{2 << 30}\n")
        self.assertEqual(self.in_sandbox(token, second["id"], limit), f"{512 << 20}\n")  # the default
        # "pooled" counts those still starting (no cgroup yet); the ready ones have theirs.
        wait_until(lambda: self.pooled() == 2 and self.pool_ready() == 2, timeout=60, what="the pool refilled")
        # Nobody's until claimed: not in the user's list, nor the admin's.
        status, mine = self.daemon.http("GET", "/v1/sandboxes", token)
        self.assertEqual({s["id"] for s in mine["sandboxes"]}, {first["id"], second["id"]})
        pooled = self.pool_cgroups()
        self.assertEqual(len(pooled), 2)
        for sid in pooled:
            # Not reachable by id, even by the admin (positive control: the claimed ones are).
            self.assertEqual(self.daemon.http("GET", f"/v1/sandboxes/{sid}", token)[0], 404)
            self.assertEqual(self.daemon.admin("GET", f"/v1/sandboxes/{sid}")[0], 404)
        self.assertEqual(self.daemon.admin("GET", f"/v1/sandboxes/{first['id']}")[0], 200)

    def test_other_shapes_and_an_empty_pool_start_afresh(self):
        token = self.token("shapes")
        other_disk = self.create(token, limits={"disk_bytes": 128 << 20})
        two_cpus = self.create(token, limits={"cpus": 1.5})
        stopped = self.create(token, start=False)
        for sandbox in (other_disk, two_cpus, stopped):
            self.assertFalse(self.claimed(sandbox["id"]))
        self.assertEqual(self.pooled(), 2)
        self.assertEqual(self.in_sandbox(token, two_cpus["id"], "nproc"), "2\n")
        self.set_pool("{ host = 0 }")
        empty = self.create(token)
        self.assertFalse(self.claimed(empty["id"]))
        self.assertEqual(self.in_sandbox(token, empty["id"], "echo up"), "up\n")

    def test_a_reload_drains_and_grows_the_pool(self):
        before = self.pool_cgroups()
        self.set_pool("{ host = 0 }")
        self.assertEqual(self.pool_cgroups(), set())
        self.set_pool("{ host = 3 }")
        after = self.pool_cgroups()
        self.assertEqual(len(after), 3)
        self.assertFalse(before & after)

    def test_a_restart_leaves_nothing_of_the_old_pool(self):
        token = self.token("restart")
        kept = self.create(token)
        wait_until(lambda: len(self.pool_cgroups()) == 2, timeout=60, what="the pool refilled")
        for how in (signal.SIGTERM, signal.SIGKILL):
            old = self.pool_cgroups()
            self.assertEqual(len(old), 2)
            self.daemon.stop(how)
            if how == signal.SIGTERM:
                # A clean stop destroys the pool (a user's sandbox keeps running).
                left = {rel.split("/")[-1] for rel in self.daemon.cgroups()}
                self.assertFalse(old & left, left)
                self.assertIn(kept["id"], left)
            self.daemon.start()
            wait_until(lambda: self.pooled() == 2, timeout=60, what="a new pool")
            wait_until(lambda: not (old & self.pool_cgroups()) and len(self.pool_cgroups()) == 2, timeout=30,
                       what="the old pool gone")
            self.assertFalse(old & {rel.split("/")[-1] for rel in self.daemon.cgroups()})
            # The user's sandbox was adopted, untouched.
            self.assertEqual(self.in_sandbox(token, kept["id"], "echo still"), "still\n")

    def test_a_stop_while_the_pool_fills_leaves_none_of_it(self):
        """A clean stop destroys the pool, the sandboxes still starting for it too: eight asked
        for, and the daemon stopped as soon as the reload is in; none of the pool is left."""
        status, body = self.daemon.admin("GET", "/v1/admin/sandboxes")
        self.assertEqual(status, 200, body)
        owned = {s["id"] for s in body["sandboxes"]}
        with open(self.daemon.config_path) as f:
            text = f.read()
        with open(self.daemon.config_path, "w") as f:
            f.write(text[:text.index("[pool]")] + "[pool]\nsizes = { host = 8 }\n")
        before = self.daemon.log().count('"config reloaded"')
        os.kill(self.daemon.proc.pid, signal.SIGHUP)
        wait_until(lambda: self.daemon.log().count('"config reloaded"') > before, what="the reload")
        self.daemon.stop(signal.SIGTERM)
        left = {rel.split("/")[-1] for rel in self.daemon.cgroups() if rel.split("/")[-1].startswith("sb_")}
        self.assertEqual(left - owned, set())
        self.daemon.start()  # for the other tests (setUp sets the pool back to 2)


class DiskFull(DaemonTestCase):
    """The state dir on a small tmpfs of the test's own; creates with too little room left."""

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("corrald needs root")
        cls.mount = tempfile.mkdtemp(prefix="corral-e2e-diskfull-")
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400M,mode=0700", "tmpfs", cls.mount], check=True)
        cls.addClassCleanup(os.rmdir, cls.mount)
        cls.addClassCleanup(subprocess.run, ["umount", "-l", cls.mount], check=False)
        cls.extra_daemon_config = ""
        cls.extra_config = "\n[pool]\nsizes = { host = 1 }\n"
        original = Daemon.__init__

        def on_tmpfs(self):
            original(self)
            self.state_dir = os.path.join(cls.mount, "state")
        Daemon.__init__ = on_tmpfs
        try:
            super().setUpClass()
        finally:
            Daemon.__init__ = original

    def test_a_create_with_the_disk_full_says_so(self):
        token = self.token("full")
        wait_until(lambda: int(self.daemon.metrics().get("corral_pool_ready")) == 1, timeout=60,
                   what="the pool")
        filler = os.path.join(self.mount, "filler")
        free = os.statvfs(self.mount)
        subprocess.run(["fallocate", "-l", str(free.f_bavail * free.f_frsize - (8 << 20)), filler], check=True)
        try:
            # The pooled one is claimed: it needs no new disk.
            status, body = self.daemon.http("POST", "/v1/sandboxes", token, {})
            self.assertEqual(status, 201, body)
            self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{body['id']}", token)
            # The next needs a layer: refused as unavailable, with the reason.
            status, body = self.daemon.http("POST", "/v1/sandboxes", token, {})
            self.assertEqual(status, 503, body)
            self.assertEqual(body["error"]["code"], "unavailable")
            self.assertIn("free", body["error"]["message"])
        finally:
            os.unlink(filler)
        # Control: with room again, a create works.
        status, body = self.daemon.http("POST", "/v1/sandboxes", token, {})
        self.assertEqual(status, 201, body)
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{body['id']}", token)


def tearDownModule():
    _upstream.shutdown()
    _upstream.server_close()
    shutil.rmtree(_key_dir, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
