"""Any node answers any request: two corralds on one PostgreSQL store, with a cluster secret,
each reaching the other at its node.address. A request to node-a for what node-b holds is
forwarded to node-b with the client's own token and a hop mark, and node-b's answer is the
client's (X-Corral-Node names the node that answered): sandboxes, files, snapshots, forks, events
and the rest. Creates are placed on the node with more room. A marked request is never forwarded
again; a forged mark is refused; a dead node's sandboxes are `unavailable`, naming the node and
since when, while the other node's keep being served."""

import asyncio
import base64
import hashlib
import hmac
import http.client
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))

from corral_e2e import CORRAL, Daemon, WsClient, mint, wait_until  # noqa: E402
import test_images  # noqa: E402
import postgres  # noqa: E402

SECRET = "fleet-secret-" + "0123456789abcdef" * 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hop_mark(node, method, target, authorization, secret=SECRET, ms=None):
    """The X-Corral-Hop header a node sends with a request it forwards (api/hop.h)."""
    ms = int(time.time() * 1000) if ms is None else ms
    signed = "\n".join(["corral-hop-v1", node, str(ms), method, target,
                        hashlib.sha256(authorization.encode()).hexdigest()])
    mac = hmac.new(secret.encode(), signed.encode(), hashlib.sha256).hexdigest()
    return f"v1 {node} {ms} {mac}"


class Forwarding(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("corrald needs root (namespaces, cgroups, mounts)")
        why = postgres.available()
        if why:
            raise unittest.SkipTest(why)
        cls.pg = postgres.Postgres(fsync=False)
        cls.pg.start()
        url = cls.pg.create_database("forwarding")
        cls.secret_dir = tempfile.mkdtemp(prefix="corral-e2e-secret-")
        secret_file = os.path.join(cls.secret_dir, "cluster-secret")
        with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(SECRET + "\n")
        cls.nodes = {}
        cls.ports = {name: free_port() for name in ("node-a", "node-b")}
        try:
            for name in ("node-a", "node-b"):
                daemon = Daemon()
                daemon.extra_config = "max_sandboxes_per_user = 40"
                daemon.extra_sections = (f'[store]\nbackend = "postgresql"\nurl = "{url}"\n\n'
                                         f'[node]\nid = "{name}"\naddress = "127.0.0.1:{cls.ports[name]}"\n'
                                         f'heartbeat = 1\ndead_after = 3\n'
                                         f'cluster_secret_file = "{secret_file}"\n')
                cls.nodes[name] = daemon
                daemon.start(port=cls.ports[name])
                if name == "node-a":
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
        for name in os.listdir(cls.secret_dir):
            os.unlink(os.path.join(cls.secret_dir, name))
        os.rmdir(cls.secret_dir)
        assert not leaked, f"leaked cgroups: {leaked}"

    def setUp(self):
        for name, daemon in self.nodes.items():
            if daemon.proc.poll() is not None:
                daemon.start(port=self.ports[name])
        self.tok = mint("acme", self.secret, "nora")
        self.auth = "Bearer " + self.tok

    def call(self, daemon, method, path, body=None, raw=None, headers=None):
        """(status, body, headers) of one request, with the user's token."""
        conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=60)
        hdrs = {"Authorization": self.auth, **(headers or {})}
        payload = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, body=payload, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if "json" in resp.getheader("Content-Type", "") and data:
            data = json.loads(data)
        return resp.status, data, {k.lower(): v for k, v in resp.getheaders()}

    def on_b(self, **body):
        """A sandbox that node-b holds, made through node-a (node-a drained meanwhile)."""
        return self.placed_on("node-b", "node-a", **body)

    def placed_on(self, node, other, **body):
        """A sandbox that `node` holds, made through node-a (`other` drained meanwhile)."""
        status, drained = self.a.admin("POST", f"/v1/admin/nodes/{other}/drain")
        self.assertEqual(status, 200, drained)
        try:
            status, sandbox, headers = self.call(self.a, "POST", "/v1/sandboxes", body)
        finally:
            self.assertEqual(self.a.admin("POST", f"/v1/admin/nodes/{other}/undrain")[0], 200)
        self.assertEqual(status, 201, sandbox)
        self.assertEqual(headers.get("x-corral-node", "node-a"), node, headers)
        self.addCleanup(self.destroy, sandbox["id"])
        return sandbox

    def destroy(self, sid):
        """Cleanup: the sandbox destroyed through whichever node answers (a test may leave one down)."""
        for daemon in (self.a, self.b):
            try:
                if self.call(daemon, "DELETE", f"/v1/sandboxes/{sid}")[0] in (200, 404):
                    return
            except OSError:
                continue

    def test_what_the_other_node_holds_is_served_through_this_one(self):
        sandbox = self.on_b()
        sid = sandbox["id"]
        # node-b's own view: its sandbox, answered without forwarding.
        status, direct, headers = self.call(self.b, "GET", f"/v1/sandboxes/{sid}")
        self.assertEqual((status, direct["state"]), (200, "running"))
        self.assertNotIn("x-corral-node", headers)
        # Through node-a: the same sandbox, node-b's answer.
        status, through, headers = self.call(self.a, "GET", f"/v1/sandboxes/{sid}")
        self.assertEqual((status, through["id"], through["state"]), (200, sid, "running"), through)
        self.assertEqual(headers["x-corral-node"], "node-b")
        # Files: written through node-a, read on node-b and through node-a.
        status, _, _ = self.call(self.a, "PUT", f"/v1/sandboxes/{sid}/fs/write?path=/home/agent/hello.txt",
                                 raw=b"hello from node-a\n")
        self.assertEqual(status, 200)
        for daemon in (self.a, self.b):
            status, data, _ = self.call(daemon, "GET", f"/v1/sandboxes/{sid}/fs/read?path=/home/agent/hello.txt")
            self.assertEqual((status, data), (200, b"hello from node-a\n"))
        status, listed, _ = self.call(self.a, "GET", f"/v1/sandboxes/{sid}/fs/list?path=/home/agent")
        self.assertEqual(status, 200, listed)
        self.assertIn("hello.txt", [entry["name"] for entry in listed["entries"]])
        # A file that is not there: node-b's not_found, as it is.
        status, missing, _ = self.call(self.a, "GET", f"/v1/sandboxes/{sid}/fs/read?path=/home/agent/nothing")
        self.assertEqual((status, missing["error"]["code"]), (404, "not_found"), missing)
        # Egress rules, events, stop and start.
        status, rules, _ = self.call(self.a, "GET", f"/v1/sandboxes/{sid}/egress")
        self.assertEqual(status, 200, rules)
        self.assertEqual(self.call(self.a, "POST", f"/v1/sandboxes/{sid}/stop")[0], 200)
        status, stopped, _ = self.call(self.b, "GET", f"/v1/sandboxes/{sid}")
        self.assertEqual(stopped["state"], "stopped")
        self.assertEqual(self.call(self.a, "POST", f"/v1/sandboxes/{sid}/start")[0], 200)
        status, events, _ = self.call(self.a, "GET", f"/v1/sandboxes/{sid}/events")
        self.assertEqual(status, 200, events)
        self.assertIn("sandbox.stopped", [event["type"] for event in events["events"]])
        # A snapshot, a sandbox from it and a fork: all where the files are, on node-b.
        status, snapshot, headers = self.call(self.a, "POST", f"/v1/sandboxes/{sid}/snapshot")
        self.assertEqual((status, headers["x-corral-node"]), (201, "node-b"), snapshot)
        status, got, headers = self.call(self.a, "GET", f"/v1/snapshots/{snapshot['id']}")
        self.assertEqual((status, got["id"], headers["x-corral-node"]), (200, snapshot["id"], "node-b"))
        status, restored, headers = self.call(self.a, "POST", "/v1/sandboxes", {"snapshot": snapshot["id"]})
        self.assertEqual((status, headers.get("x-corral-node")), (201, "node-b"), restored)
        status, forked, headers = self.call(self.a, "POST", f"/v1/sandboxes/{sid}/fork")
        self.assertEqual((status, headers.get("x-corral-node")), (201, "node-b"), forked)
        for made in (restored, forked):
            status, data, _ = self.call(self.a, "GET", f"/v1/sandboxes/{made['id']}/fs/read?path=/home/agent/hello.txt")
            self.assertEqual((status, data), (200, b"hello from node-a\n"))
            self.assertEqual(self.call(self.a, "DELETE", f"/v1/sandboxes/{made['id']}")[0], 200)
        self.assertEqual(self.call(self.a, "DELETE", f"/v1/snapshots/{snapshot['id']}")[0], 200)
        # Destroyed through node-a: gone on node-b.
        self.assertEqual(self.call(self.a, "DELETE", f"/v1/sandboxes/{sid}")[0], 200)
        status, gone, _ = self.call(self.b, "GET", f"/v1/sandboxes/{sid}")
        self.assertEqual(status, 404, gone)

    def test_websocket_ops_go_to_the_node_that_holds_the_sandbox(self):
        there = self.on_b()["id"]
        here = self.placed_on("node-a", "node-b")["id"]

        async def go():
            client = await WsClient.connect(self.a.ws_url(), self.tok)
            try:
                # One connection to node-a, commands on both nodes' sandboxes.
                out, err, outcome, on_b = await client.run(there, ["sh", "-c", "cat; echo err >&2"], stdin=b"hi b\n")
                self.assertEqual((out, err, outcome["exit_code"]), (b"hi b\n", b"err\n", 0))
                out, _, _, on_a = await client.run(here, ["echo", "on a"])
                self.assertEqual(out, b"on a\n")
                # Binary stdin frames, on the forwarded stream's own channel number.
                reply = await client.request("exec", sandbox=there, argv=["cat"], stdin=True)
                self.assertTrue(reply["ok"], reply)
                channel, command = reply["result"]["channel"], reply["result"]["command"]
                self.assertGreaterEqual(channel, 1 << 31)
                await client.ws.send(struct.pack(">BBIQ", 2, 0, channel, 0) + b"framed\n")
                self.assertTrue((await client.request("close_stdin", command=command))["ok"])
                got = b""
                while True:
                    event = await client.next_event()
                    self.assertEqual(event.get("channel"), channel, event)
                    if event.get("event") == "exit":
                        break
                    got += event["data"]
                self.assertEqual(got, b"framed\n")
                # The sandbox's event log, replayed through node-a.
                reply = await client.request("sandbox.watch", sandbox=there)
                self.assertTrue(reply["ok"], reply)
                event = await client.next_event()
                self.assertEqual((event.get("event"), event.get("sandbox")), ("sandbox", there), event)
                return on_b, on_a
            finally:
                await client.close()
        on_b, on_a = asyncio.run(go())
        # Each command is its node's.
        self.assertEqual(self.call(self.b, "GET", f"/v1/sandboxes/{there}/commands/{on_b}")[0], 200)
        self.assertEqual(self.call(self.a, "GET", f"/v1/sandboxes/{here}/commands/{on_a}")[0], 200)

    def test_a_stream_resumes_through_another_node(self):
        there = self.on_b()["id"]
        script = "for i in 1 2 3 4 5 6; do echo line$i; sleep 0.3; done"

        async def first_part():
            client = await WsClient.connect(self.a.ws_url(), self.tok)
            try:
                reply = await client.request("exec", sandbox=there, argv=["sh", "-c", script], output="json")
                self.assertTrue(reply["ok"], reply)
                event = await client.next_event()
                self.assertEqual(base64.b64decode(event["data"]), b"line1\n")
                return reply["result"]["command"], event["seq"]
            finally:
                await client.close()

        async def rest(daemon, command, after):
            client = await WsClient.connect(daemon.ws_url(), self.tok)
            try:
                reply = await client.request("attach", command=command, after_seq=after, output="json")
                self.assertTrue(reply["ok"], reply)
                out, seqs = b"", []
                while True:
                    event = await client.next_event()
                    seqs.append(event["seq"])
                    if event.get("event") == "exit":
                        return out, seqs, event["outcome"]
                    out += base64.b64decode(event["data"])
            finally:
                await client.close()
        command, seq = asyncio.run(first_part())
        # The reconnect lands on node-b itself: the same stream, from the next seq, nothing twice.
        out, seqs, outcome = asyncio.run(rest(self.b, command, seq))
        self.assertEqual(out, b"".join(b"line%d\n" % i for i in range(2, 7)))
        self.assertEqual(seqs[0], seq + 1)
        self.assertEqual(seqs, sorted(set(seqs)))
        self.assertEqual(outcome["exit_code"], 0)
        # And through node-a again, from the start: the whole output (node-b's seqs).
        out, _, _ = asyncio.run(rest(self.a, command, 0))
        self.assertEqual(out, b"".join(b"line%d\n" % i for i in range(1, 7)))

    def test_issuers_and_revocations_made_on_one_node_hold_on_every_node(self):
        # An issuer added on node-a: its tokens verify on node-b within a heartbeat or two.
        secret = self.a.add_issuer("globex")
        token = mint("globex", secret, "gus", jti="gus-1")
        status, _, _ = self.call(self.a, "GET", "/v1/sandboxes", headers={"Authorization": "Bearer " + token})
        self.assertEqual(status, 200)
        wait_until(lambda: self.call(self.b, "GET", "/v1/sandboxes", headers={"Authorization": "Bearer " + token})[0]
                   == 200, timeout=10, interval=0.2, what="node-b taking the new issuer's token")
        other = mint("globex", secret, "gus", jti="gus-2")  # control: not revoked

        async def open_on_b(tok):
            client = await WsClient.connect(self.b.ws_url(), tok)
            self.assertTrue((await client.request("ping"))["ok"])
            return client

        async def revoke_and_watch():
            revoked_ws, kept_ws = await open_on_b(token), await open_on_b(other)
            try:
                # The revocation, on node-a: node-b's open connection with that token ends (1008).
                status, body = self.a.admin("POST", "/v1/admin/revocations", {"jti": "gus-1", "issuer": "globex"})
                self.assertEqual(status, 201, body)
                with self.assertRaises(Exception):
                    await asyncio.wait_for(revoked_ws.ws.recv(), 15)
                self.assertEqual(revoked_ws.ws.close_code, 1008)
                self.assertTrue((await kept_ws.request("ping"))["ok"])
            finally:
                await revoked_ws.close()
                await kept_ws.close()
        asyncio.run(revoke_and_watch())
        status, _, _ = self.call(self.b, "GET", "/v1/sandboxes", headers={"Authorization": "Bearer " + token})
        self.assertEqual(status, 401)
        status, _, _ = self.call(self.b, "GET", "/v1/sandboxes", headers={"Authorization": "Bearer " + other})
        self.assertEqual(status, 200)
        # The issuer removed on node-a: node-b refuses its tokens too.
        self.assertEqual(self.a.admin("DELETE", "/v1/admin/issuers/globex")[0], 200)
        wait_until(lambda: self.call(self.b, "GET", "/v1/sandboxes", headers={"Authorization": "Bearer " + other})[0]
                   == 401, timeout=10, interval=0.2, what="node-b refusing the removed issuer's token")

    def test_an_image_runs_on_the_nodes_that_imported_it(self):
        if shutil.which("umoci") is None or not os.path.exists(test_images.BUSYBOX):
            self.skipTest("umoci or busybox-static is not installed (dist/install-deps.sh)")
        work = tempfile.mkdtemp(prefix="corral-e2e-fleet-image-")
        self.addCleanup(shutil.rmtree, work, True)
        test_images.umoci_layout(work, "busybox", test_images.busybox_entries())

        def import_on(daemon):
            done = subprocess.run([CORRAL, "image", "import", "busybox", "--name", "busybox:fleet", "--json",
                                   "--admin-socket", daemon.admin_socket], cwd=work, capture_output=True, text=True,
                                  timeout=120)
            self.assertEqual(done.returncode, 0, done.stderr)
            return json.loads(done.stdout)
        imported = import_on(self.a)
        # node-b has the catalog's record but not the layers: a sandbox of it there says so.
        self.assertEqual(self.a.admin("POST", "/v1/admin/nodes/node-a/drain")[0], 200)
        try:
            status, body, headers = self.call(self.a, "POST", "/v1/sandboxes", {"image": "busybox:fleet"})
        finally:
            self.assertEqual(self.a.admin("POST", "/v1/admin/nodes/node-a/undrain")[0], 200)
        self.assertEqual((status, headers.get("x-corral-node")), (503, "node-b"), body)
        self.assertIn("import or pull it here", body["error"]["message"])
        # Imported on node-b too (the same image: one record), it runs on either.
        self.assertEqual(import_on(self.b)["digest"], imported["digest"])
        for placed, other in (("node-a", "node-b"), ("node-b", "node-a")):
            sid = self.placed_on(placed, other, image="busybox:fleet")["id"]
            status, data, _ = self.call(self.a, "GET", f"/v1/sandboxes/{sid}/fs/read?path=/etc/rootfile")
            self.assertEqual((status, data), (200, b"root's\n"), placed)
        self.addCleanup(lambda: self.a.admin("DELETE", f"/v1/images/{imported['digest']}"))

    def test_another_users_sandbox_is_not_found_through_any_node(self):
        sandbox = self.on_b()
        other = "Bearer " + mint("acme", self.secret, "mallory")
        for daemon in (self.a, self.b):
            status, body, _ = self.call(daemon, "GET", f"/v1/sandboxes/{sandbox['id']}",
                                        headers={"Authorization": other})
            self.assertEqual(status, 404, body)
        status, _, _ = self.call(self.a, "GET", f"/v1/sandboxes/{sandbox['id']}")
        self.assertEqual(status, 200)  # control: its owner's

    def test_creates_are_spread_over_the_nodes(self):
        placed = {}
        for _ in range(16):
            status, sandbox, headers = self.call(self.a, "POST", "/v1/sandboxes", {"start": False})
            self.assertEqual(status, 201, sandbox)
            node = headers.get("x-corral-node", "node-a")
            placed[node] = placed.get(node, 0) + 1
            self.addCleanup(self.destroy, sandbox["id"])
        # Both have the same room (one host): each create goes to either; all 16 on one is 2^-15.
        self.assertEqual(sorted(placed), ["node-a", "node-b"], placed)

    def test_a_marked_request_is_never_forwarded_again(self):
        sid = self.on_b()["id"]
        target = f"/v1/sandboxes/{sid}"
        # As if node-b had forwarded it to node-a (catalogs disagreeing): node-a answers itself.
        mark = hop_mark("node-b", "GET", target, self.auth)
        status, body, headers = self.call(self.a, "GET", target, headers={"X-Corral-Hop": mark})
        self.assertEqual((status, body["error"]["code"]), (503, "unavailable"), body)
        self.assertIn("node-b", body["error"]["message"])
        self.assertNotIn("x-corral-node", headers)
        # Control: the same kind of mark on node-b, which holds it, is served there.
        mark = hop_mark("node-a", "GET", target, self.auth)
        status, body, _ = self.call(self.b, "GET", target, headers={"X-Corral-Hop": mark})
        self.assertEqual((status, body["id"]), (200, sid), body)

    def test_forged_marks_are_refused(self):
        sid = self.on_b()["id"]
        target = f"/v1/sandboxes/{sid}"
        forged = {
            "wrong secret": hop_mark("node-a", "GET", target, self.auth, secret="x" * 48),
            "other target": hop_mark("node-a", "GET", "/v1/sandboxes", self.auth),
            "other method": hop_mark("node-a", "DELETE", target, self.auth),
            "other token": hop_mark("node-a", "GET", target, "Bearer " + mint("acme", self.secret, "eve")),
            "too old": hop_mark("node-a", "GET", target, self.auth, ms=int(time.time() * 1000) - 120_000),
            "malformed": "v1 node-a",
            "empty": "",
        }
        for what, mark in forged.items():
            with self.subTest(what):
                status, body, _ = self.call(self.b, "GET", target, headers={"X-Corral-Hop": mark})
                self.assertEqual((status, body["error"]["code"]), (401, "unauthorized"), body)
        status, body, _ = self.call(self.b, "GET", target, headers={"X-Corral-Hop": hop_mark("node-a", "GET", target, self.auth)})
        self.assertEqual(status, 200, body)  # control

    def test_the_nodes_own_routes_take_a_nodes_mark_alone(self):
        """The routes a drain's move uses (PUT|POST /v1/internal/moves/ID) take a request another
        node marked and nothing else: a user's token, a mark beside it, a forged mark or none are
        refused before any byte is written; a node may hand over only what the catalog says it
        holds."""
        sid = self.on_b(start=False)["id"]
        part = b"x" * 1000
        digest = hashlib.sha256(part).hexdigest()
        target = f"/v1/internal/moves/{sid}?offset=0&sha256={digest}"

        def put(headers):
            conn = http.client.HTTPConnection("127.0.0.1", self.a.port, timeout=60)
            conn.request("PUT", target, body=part, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            conn.close()
            return resp.status, json.loads(data) if data else None
        refused = {
            "no mark": {},
            "a user's token": {"Authorization": self.auth},
            "a mark beside a token": {"Authorization": self.auth,
                                      "X-Corral-Hop": hop_mark("node-b", "PUT", target, self.auth)},
            "wrong secret": {"X-Corral-Hop": hop_mark("node-b", "PUT", target, "", secret="x" * 48)},
            "other target": {"X-Corral-Hop": hop_mark("node-b", "PUT", target.replace("offset=0", "offset=1"), "")},
        }
        for what, headers in refused.items():
            with self.subTest(what):
                status, body = put(headers)
                self.assertEqual((status, body["error"]["code"]), (401, "unauthorized"), body)
        staged = os.path.join(self.a.state_dir, "moves", sid + ".in.tar")
        self.assertFalse(os.path.exists(staged))
        # Control: node-b's own mark is taken, and the part written.
        status, body = put({"X-Corral-Hop": hop_mark("node-b", "PUT", target, "")})
        self.assertEqual((status, body), (200, {"bytes": 1000}), body)
        self.assertEqual(os.path.getsize(staged), 1000)
        # A part that does not match its hash, or not at the end of what came: refused.
        bad = f"/v1/internal/moves/{sid}?offset=1000&sha256={'0' * 64}"
        conn = http.client.HTTPConnection("127.0.0.1", self.a.port, timeout=60)
        conn.request("PUT", bad, body=part, headers={"X-Corral-Hop": hop_mark("node-b", "PUT", bad, "")})
        self.assertEqual(conn.getresponse().status, 400)
        conn.close()
        gap = f"/v1/internal/moves/{sid}?offset=5000&sha256={digest}"
        conn = http.client.HTTPConnection("127.0.0.1", self.a.port, timeout=60)
        conn.request("PUT", gap, body=part, headers={"X-Corral-Hop": hop_mark("node-b", "PUT", gap, "")})
        self.assertEqual(conn.getresponse().status, 410)  # stream_gap: not where the file ends
        conn.close()
        self.assertEqual(os.path.getsize(staged), 1000)
        # The whole: only from the node that holds it, and only a stopped one (this one never ran).
        whole = f"/v1/internal/moves/{sid}?bytes=1000&sha256={digest}&kind=image&uid_base=0"
        for signer, why in (("node-a", "on node node-b"), ("node-b", "created")):
            conn = http.client.HTTPConnection("127.0.0.1", self.a.port, timeout=60)
            conn.request("POST", whole, headers={"X-Corral-Hop": hop_mark(signer, "POST", whole, "")})
            resp = conn.getresponse()
            body = json.loads(resp.read())
            conn.close()
            self.assertEqual((resp.status, body["error"]["code"]), (409, "conflict"), body)
            self.assertIn(why, body["error"]["message"])
        status, body, headers = self.call(self.a, "GET", f"/v1/sandboxes/{sid}")
        self.assertEqual((status, headers.get("x-corral-node")), (200, "node-b"), body)  # still node-b's

    def test_a_dead_nodes_sandboxes_are_unavailable_and_come_back(self):
        on_b = self.on_b()
        on_a = self.placed_on("node-a", "node-b", start=False)
        self.b.kill9()
        def dead():
            status, body, _ = self.call(self.a, "GET", f"/v1/sandboxes/{on_b['id']}")
            return status == 503 and "not heard from since" in body["error"]["message"]
        wait_until(dead, timeout=15, interval=0.3, what="node-b's sandbox unavailable")
        status, body, headers = self.call(self.a, "GET", f"/v1/sandboxes/{on_b['id']}")
        self.assertEqual(body["error"]["code"], "unavailable")
        self.assertIn("node-b", body["error"]["message"])
        self.assertEqual(headers.get("retry-after"), "1")
        # A WebSocket op on it: the same answer, on a connection that goes on serving.
        async def exec_on_dead():
            client = await WsClient.connect(self.a.ws_url(), self.tok)
            try:
                return await client.request("exec", sandbox=on_b["id"], argv=["true"])
            finally:
                await client.close()
        refused = asyncio.run(exec_on_dead())  # on_a is started=False: nothing runs there
        self.assertEqual((refused["ok"], refused["error"]["code"]), (False, "unavailable"), refused)
        self.assertIn("node-b", refused["error"]["message"])
        # The rest of the fleet serves, and places creates on the live node only.
        status, body, _ = self.call(self.a, "GET", f"/v1/sandboxes/{on_a['id']}")
        self.assertEqual(status, 200, body)
        status, made, headers = self.call(self.a, "POST", "/v1/sandboxes", {"start": False})
        self.assertEqual((status, headers.get("x-corral-node", "node-a")), (201, "node-a"), made)
        self.assertEqual(self.call(self.a, "DELETE", f"/v1/sandboxes/{made['id']}")[0], 200)
        # node-b back: its sandbox adopted, served through node-a again.
        self.b.start(port=self.ports["node-b"])
        wait_until(lambda: self.call(self.a, "GET", f"/v1/sandboxes/{on_b['id']}")[0] == 200, timeout=15,
                   interval=0.3, what="node-b's sandbox served again")


class ClusterSecretFile(unittest.TestCase):
    """corrald refuses to start on a cluster secret another user could read, or one too short."""

    def start_with(self, text, mode):
        if os.geteuid() != 0:
            self.skipTest("corrald needs root (namespaces, cgroups, mounts)")
        daemon = Daemon()
        self.addCleanup(daemon.cleanup)
        path = os.path.join(daemon.tmp, "cluster-secret")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT, mode), "w") as f:
            f.write(text)
        os.chmod(path, mode)
        daemon.extra_sections = f'[node]\ncluster_secret_file = "{path}"\n'
        try:
            daemon.start()
        except RuntimeError as e:
            return str(e)
        return None

    def test_a_readable_or_short_secret_is_refused(self):
        refused = self.start_with(SECRET, 0o644)
        self.assertIsNotNone(refused)
        self.assertIn("node.cluster_secret_file", refused)
        self.assertIn("must belong to root and be readable by it alone", refused)
        refused = self.start_with("short", 0o600)
        self.assertIsNotNone(refused)
        self.assertIn("at least 32 bytes", refused)
        self.assertIsNone(self.start_with(SECRET, 0o600))  # control


if __name__ == "__main__":
    unittest.main()
