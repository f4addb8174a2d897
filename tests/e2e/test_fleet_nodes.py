"""Two corralds on one PostgreSQL store, as two nodes of a fleet (on one host, each with its own
state dir, run dir and cgroup parent): both register and heartbeat (`corral admin node ls`), a
silent node is counted down, each recovers only its own sandboxes after a kill -9 (the other's keep
running), a user's list spans both nodes, a sandbox on the other node is `unavailable` here (until
requests are forwarded between nodes), and a drained node makes no new sandboxes, across a
restart, until undrained."""

import asyncio
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))

from corral_e2e import CORRAL, Daemon, WsClient, mint, wait_until  # noqa: E402
import postgres  # noqa: E402


class TwoNodes(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("corrald needs root (namespaces, cgroups, mounts)")
        why = postgres.available()
        if why:
            raise unittest.SkipTest(why)
        cls.pg = postgres.Postgres(fsync=False)
        cls.pg.start()
        url = cls.pg.create_database("fleet")
        cls.nodes = {}
        try:
            for name in ("node-a", "node-b"):
                daemon = Daemon()
                daemon.extra_sections = (f'[store]\nbackend = "postgresql"\nurl = "{url}"\n\n'
                                         f'[node]\nid = "{name}"\naddress = "127.0.0.1:1"\nheartbeat = 1\n'
                                         f'dead_after = 3\n')
                cls.nodes[name] = daemon
                daemon.start()
                if name == "node-a":
                    # Issuers are the fleet's, read by each node when it starts.
                    cls.secret = daemon.add_issuer("acme")
        except Exception:
            cls.tearDownClass()
            raise
        cls.a, cls.b = cls.nodes["node-a"], cls.nodes["node-b"]

    @classmethod
    def tearDownClass(cls):
        leaked = []
        for daemon in cls.nodes.values():
            daemon.cleanup()
            leaked += daemon.cgroups()
        cls.pg.stop()
        assert not leaked, f"leaked cgroups: {leaked}"

    def setUp(self):
        for daemon in self.nodes.values():
            if daemon.proc.poll() is not None:
                daemon.start()
        self.tok = mint("acme", self.secret, "nora")

    def node_list(self, daemon):
        done = subprocess.run([CORRAL, "admin", "node", "ls", "--json", "--admin-socket", daemon.admin_socket],
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(done.returncode, 0, done.stderr)
        return {node["id"]: node for node in json.loads(done.stdout)["nodes"]}

    def create(self, daemon, **body):
        status, sandbox = daemon.http("POST", "/v1/sandboxes", self.tok, body)
        self.assertEqual(status, 201, sandbox)
        return sandbox

    def run_on(self, daemon, sandbox, argv):
        async def go():
            client = await WsClient.connect(daemon.ws_url(), self.tok)
            try:
                return await client.run(sandbox, argv)
            finally:
                await client.close()
        return asyncio.run(go())

    def test_both_nodes_register_and_a_silent_one_is_down(self):
        nodes = self.node_list(self.a)
        self.assertEqual(sorted(nodes), ["node-a", "node-b"])
        self.assertTrue(nodes["node-a"]["alive"] and nodes["node-b"]["alive"], nodes)
        self.assertTrue(nodes["node-a"]["this"])
        self.assertFalse(nodes["node-b"]["this"])
        self.assertEqual(nodes["node-b"]["address"], "127.0.0.1:1")
        self.assertGreater(nodes["node-a"]["memory_total"], 0)
        # The table for people names both.
        table = subprocess.run([CORRAL, "admin", "node", "ls", "--admin-socket", self.b.admin_socket],
                               capture_output=True, text=True, timeout=30)
        self.assertIn("node-a", table.stdout)
        self.assertIn("alive (this)", table.stdout)
        self.assertRegex(table.stdout, r"node-a +127\.0\.0\.1:1 +alive +\d+/\d+ +\d+% +\d+s ago")
        self.b.kill9()
        wait_until(lambda: not self.node_list(self.a)["node-b"]["alive"], timeout=10, what="node-b counted down")
        self.assertTrue(self.node_list(self.a)["node-a"]["alive"])  # control
        self.b.start()
        wait_until(lambda: self.node_list(self.a)["node-b"]["alive"], timeout=10, what="node-b alive again")

    def test_each_node_recovers_its_own_sandboxes_only(self):
        on_a = self.create(self.a, name="on-a")
        on_b = self.create(self.b, name="on-b")
        # A user's list spans the fleet, from either node.
        for daemon in (self.a, self.b):
            status, listed = daemon.http("GET", "/v1/sandboxes", self.tok)
            self.assertEqual(status, 200)
            self.assertTrue({on_a["id"], on_b["id"]} <= {s["id"] for s in listed["sandboxes"]}, listed)
        # The other node's sandbox is not this node's to act on.
        status, body = self.b.http("GET", f"/v1/sandboxes/{on_a['id']}", self.tok)
        self.assertEqual(status, 503, body)
        self.assertIn("node-a", body["error"]["message"])
        # kill -9 of node-b and its restart: it adopts its own sandbox and leaves node-a's alone.
        self.b.kill9()
        self.b.start()
        out, _, _, _ = self.run_on(self.b, on_b["id"], ["echo", "b adopted"])
        self.assertEqual(out, b"b adopted\n")
        out, _, _, _ = self.run_on(self.a, on_a["id"], ["echo", "a untouched"])
        self.assertEqual(out, b"a untouched\n")
        status, body = self.a.http("GET", f"/v1/sandboxes/{on_a['id']}", self.tok)
        self.assertEqual((status, body["state"]), (200, "running"))
        for sandbox, daemon in ((on_a, self.a), (on_b, self.b)):
            status, _ = daemon.http("DELETE", f"/v1/sandboxes/{sandbox['id']}", self.tok)
            self.assertEqual(status, 200)

    def test_a_drained_node_makes_no_new_sandboxes_until_undrained(self):
        status, body = self.a.admin("POST", "/v1/admin/nodes/node-b/drain")
        self.addCleanup(self.a.admin, "POST", "/v1/admin/nodes/node-b/undrain")
        self.assertEqual((status, body), (200, {"id": "node-b", "drained": True, "moving_out": False}))
        # node-b learns it at its next heartbeat (what it made until then is removed again).
        def refused():
            status, body = self.b.http("POST", "/v1/sandboxes", self.tok, {})
            if status == 201:
                self.assertEqual(self.b.http("DELETE", f"/v1/sandboxes/{body['id']}", self.tok)[0], 200)
            return status == 503
        wait_until(refused, timeout=10, interval=0.3, what="node-b refusing creates")
        status, body = self.b.http("POST", "/v1/sandboxes", self.tok, {})
        self.assertEqual((status, body["error"]["code"]), (503, "unavailable"), body)
        self.assertIn("drained", body["error"]["message"])
        # Control: node-a still makes them.
        made = self.create(self.a)
        # Drained across a restart.
        self.b.stop()
        self.b.start()
        status, body = self.b.http("POST", "/v1/sandboxes", self.tok, {})
        self.assertEqual(status, 503, body)
        self.assertTrue(self.node_list(self.b)["node-b"]["drained"])
        self.assertFalse(self.node_list(self.b)["node-b"]["moving_out"])
        # Drained so that its stopped sandboxes move (the CLI's --move), and what is no drain.
        done = subprocess.run([CORRAL, "admin", "node", "drain", "--move", "node-b", "--admin-socket",
                               self.a.admin_socket], capture_output=True, text=True, timeout=30)
        self.assertEqual(done.returncode, 0, done.stderr)
        listed = self.node_list(self.a)["node-b"]
        self.assertEqual((listed["drained"], listed["moving_out"]), (True, True))
        table = subprocess.run([CORRAL, "admin", "node", "ls", "--admin-socket", self.a.admin_socket],
                               capture_output=True, text=True, timeout=30)
        self.assertIn("drained, moving out", table.stdout)
        for bad in ("/v1/admin/nodes/node-b/drain?move=maybe", "/v1/admin/nodes/node-b/undrain?move=true"):
            status, body = self.a.admin("POST", bad)
            self.assertEqual((status, body["error"]["code"]), (400, "bad_request"), bad)
        self.assertTrue(self.node_list(self.a)["node-b"]["moving_out"])  # unchanged by the refusals
        done = subprocess.run([CORRAL, "admin", "node", "undrain", "node-b", "--admin-socket", self.b.admin_socket],
                              capture_output=True, text=True, timeout=30)
        self.assertEqual(done.returncode, 0, done.stderr)
        again = self.create(self.b)
        status, body = self.a.admin("POST", "/v1/admin/nodes/no-such-node/drain")
        self.assertEqual(status, 404, body)
        for sandbox, daemon in ((made, self.a), (again, self.b)):
            self.assertEqual(daemon.http("DELETE", f"/v1/sandboxes/{sandbox['id']}", self.tok)[0], 200)


if __name__ == "__main__":
    unittest.main()
