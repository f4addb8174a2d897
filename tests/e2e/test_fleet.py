"""A fleet on one machine, through its front door only: a real PostgreSQL 15, three corrald nodes,
each in a network namespace this test makes (its own address on a bridge, its own loopback with
its own scripted model API behind its relay) and HAProxy on loopback in front, round-robin with
no stickiness. Every request below goes through HAProxy, so consecutive requests, and the
reconnects of a stream, land on different nodes: sandboxes spread over the nodes; exec with
streaming, a PTY, the file API, snapshots and forks work wherever the sandbox lives; an agent
session's events resume across a reconnect that lands on another node; kill -9 of a node leaves
the others serving and its sandboxes `unavailable`, and its restart brings them back; one user's
concurrent model calls on the three nodes spend exactly what the ledger says, within the fleet's
overspend bound (supervisor/relay/model_relay.h), with no budget hold left; PostgreSQL restarted
under load loses no acknowledged write."""

import asyncio
import base64
import ctypes
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))

from budget_calls import BUDGET, COST, FIND_KEY, USAGE, WORKERS, callers, messages, tally  # noqa: E402
from corral_e2e import Daemon, WsClient, mint, operator_key_file, relay_config, wait_until  # noqa: E402
import postgres  # noqa: E402
import scripted_model  # noqa: E402

NODES = ("node-1", "node-2", "node-3")
PORT = 7878
SECRET = "fleet-suite-secret-" + "f00dfeed" * 6
REAL_KEY = "sk-ant-e2e-fleet-operator-key"
_libc = ctypes.CDLL("libc.so.6", use_errno=True)
CLONE_NEWNET = 0x40000000


def sh(*argv):
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30)


def in_netns(name, fn):
    """fn() run on a thread inside network namespace `name` (sockets it makes stay there)."""
    result = {}

    def run():
        fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns " + name)
        finally:
            os.close(fd)
        result["value"] = fn()
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return result["value"]


class FleetNet:
    """A bridge in the root namespace and one namespace per node on it, uniquely named."""

    def __init__(self, count):
        tag = str(os.getpid() % 100000)
        self.bridge = f"crlb{tag}"
        self.net = f"10.231.{20 + os.getpid() % 200}"
        self.namespaces = [f"corral-fleet-{tag}-{i}" for i in range(count)]
        self.addresses = [f"{self.net}.{11 + i}" for i in range(count)]
        self.veths = [f"crlv{tag}{i}" for i in range(count)]

    def up(self):
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{self.net}.1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for ns, veth, address in zip(self.namespaces, self.veths, self.addresses):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "link", "set", veth, "master", self.bridge, "up")
            sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def down(self):
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Fleet(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("corrald needs root (namespaces, cgroups, mounts)")
        for why in (postgres.available(), None if shutil.which("haproxy") else
                    "HAProxy is not installed (dist/install-deps.sh installs it)"):
            if why:
                raise unittest.SkipTest(why)
        cls.tmp = tempfile.mkdtemp(prefix="corral-e2e-fleet-")
        cls.net = FleetNet(len(NODES))
        cls.nodes, cls.models, cls.haproxy, cls.pg = {}, {}, None, None
        try:
            cls.net.up()
            cls.pg = postgres.Postgres(fsync=True)
            cls.pg.start()
            url = cls.pg.create_database("fleet")
            secret_file = os.path.join(cls.tmp, "cluster-secret")
            with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(SECRET)
            cls.key_dir, key_file = operator_key_file("corral-e2e-fleet-key-", REAL_KEY)
            for name, ns, address in zip(NODES, cls.net.namespaces, cls.net.addresses):
                model = in_netns(ns, lambda: scripted_model.serve({"turns": []}, port=0))
                cls.models[name] = model
                daemon = Daemon()
                daemon.wrapper = ["nsenter", f"--net=/run/netns/{ns}"]
                daemon.listen_host = address
                daemon.extra_config = "max_sandboxes_per_user = 40"
                # The load below is not about rate limits (each node counts what it is asked).
                daemon.extra_api_config = "requests_per_minute = 1000000"
                daemon.extra_sections = (relay_config(model.port, key_file) +
                                         f'\n[store]\nbackend = "postgresql"\nurl = "{url}"\n\n'
                                         f'[node]\nid = "{name}"\naddress = "{address}:{PORT}"\n'
                                         f'heartbeat = 1\ndead_after = 3\ncluster_secret_file = "{secret_file}"\n')
                cls.nodes[name] = daemon
                daemon.start(port=PORT)
                if name == NODES[0]:
                    cls.secret = daemon.add_issuer("acme")
            cls.front = free_port()
            cls.start_haproxy()
        except Exception:
            cls.tearDownClass()
            raise

    @classmethod
    def start_haproxy(cls):
        config = os.path.join(cls.tmp, "haproxy.cfg")
        servers = "\n".join(f"    server {name} {address}:{PORT} check inter 500ms fall 2 rise 1"
                            for name, address in zip(NODES, cls.net.addresses))
        with open(config, "w") as f:
            f.write(f"""global
    log stderr format short local0 warning
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout tunnel 1h
    retries 3
    option redispatch
    retry-on conn-failure empty-response
frontend corral
    bind 127.0.0.1:{cls.front}
    default_backend nodes
backend nodes
    balance roundrobin
    option httpchk GET /healthz
{servers}
""")
        with open(os.path.join(cls.tmp, "haproxy.log"), "w") as log:
            cls.haproxy = subprocess.Popen(["haproxy", "-db", "-f", config], stdout=subprocess.DEVNULL, stderr=log)
        wait_until(lambda: cls.front_up(), timeout=20, interval=0.2, what="HAProxy serving")

    @classmethod
    def front_up(cls):
        conn = http.client.HTTPConnection("127.0.0.1", cls.front, timeout=5)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    @classmethod
    def tearDownClass(cls):
        leaked = []
        if cls.haproxy is not None:
            cls.haproxy.terminate()
            cls.haproxy.wait(10)
        for daemon in cls.nodes.values():
            daemon.cleanup()
            leaked += daemon.cgroups()
        for model in cls.models.values():
            model.shutdown()
            model.server_close()
        if cls.pg is not None:
            cls.pg.stop()
        cls.net.down()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        shutil.rmtree(getattr(cls, "key_dir", cls.tmp), ignore_errors=True)
        assert not leaked, f"leaked cgroups: {leaked}"

    def setUp(self):
        for name, daemon in self.nodes.items():
            if daemon.proc.poll() is not None:
                daemon.start(port=PORT)
        # A user per test: each has its own request rate and sandbox count.
        self.tok = mint("acme", self.secret, self._testMethodName[5:45], budget={"ai_usd": 5, "window": "day"})

    # ---- through the front door ----

    def call(self, method, path, body=None, raw=None, token=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.front, timeout=60)
        payload = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, body=payload, headers={"Authorization": "Bearer " + (token or self.tok)})
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if "json" in resp.getheader("Content-Type", "") and data:
            data = json.loads(data)
        return resp.status, data

    def ws(self):
        return WsClient.connect(f"ws://127.0.0.1:{self.front}/v1/ws", self.tok)

    def where(self, must=True):
        """Sandbox id -> node, from the fleet's catalog (any node's admin socket); None when
        the catalog cannot be read and not `must`."""
        status, body = self.nodes[NODES[0]].admin("GET", "/v1/admin/sandboxes")
        if status != 200 and not must:
            sys.stderr.write(f"  catalog: {status} {body}\n")
            return None
        self.assertEqual(status, 200, body)
        return {s["id"]: s["node"] for s in body["sandboxes"]}

    def on(self, node, **body):
        """A sandbox made through the front door on `node` (the others drained meanwhile)."""
        admin = self.nodes[node]
        others = [n for n in NODES if n != node]
        for other in others:
            self.assertEqual(admin.admin("POST", f"/v1/admin/nodes/{other}/drain")[0], 200)
        try:
            status, sandbox = self.call("POST", "/v1/sandboxes", body)
        finally:
            for other in others:
                self.assertEqual(admin.admin("POST", f"/v1/admin/nodes/{other}/undrain")[0], 200)
        self.assertEqual(status, 201, sandbox)
        self.assertEqual(self.where()[sandbox["id"]], node)
        self.addCleanup(self.destroy, sandbox["id"])
        return sandbox

    def destroy(self, sid):
        try:
            self.call("DELETE", f"/v1/sandboxes/{sid}")
        except OSError:
            pass

    # ---- the tests ----

    def test_sandboxes_spread_over_the_nodes(self):
        made = []
        for _ in range(12):
            status, sandbox = self.call("POST", "/v1/sandboxes", {"start": False})
            self.assertEqual(status, 201, sandbox)
            made.append(sandbox["id"])
            self.addCleanup(self.destroy, sandbox["id"])
        where = self.where()
        nodes = {where[sid] for sid in made}
        # Equal room on one host: each create goes to one of a random two; all twelve on one
        # node would be (1/3)^11.
        self.assertGreaterEqual(len(nodes), 2, nodes)

    def test_everything_works_wherever_the_sandbox_lives(self):
        for node in NODES:
            with self.subTest(node):
                self.everything_on(node)

    def everything_on(self, node):
        sid = self.on(node)["id"]
        status, _ = self.call("PUT", f"/v1/sandboxes/{sid}/fs/write?path=/home/agent/f.txt", raw=b"on " + node.encode())
        self.assertEqual(status, 200)
        for _ in range(3):  # three requests: three front nodes
            self.assertEqual(self.call("GET", f"/v1/sandboxes/{sid}/fs/read?path=/home/agent/f.txt"),
                             (200, b"on " + node.encode()))

        async def streams():
            client = await self.ws()
            try:
                out, _, outcome, _ = await client.run(sid, ["sh", "-c", "cat /home/agent/f.txt; cat"], stdin=b"+in")
                self.assertEqual((out, outcome["exit_code"]), (b"on " + node.encode() + b"+in", 0))
                reply = await client.request("exec", sandbox=sid, argv=["stty", "size"],
                                             pty={"rows": 33, "cols": 101})
                self.assertTrue(reply["ok"], reply)
                got = b""
                while True:
                    event = await client.next_event()
                    if event.get("event") == "exit":
                        break
                    got += event["data"]
                self.assertIn(b"33 101", got)
            finally:
                await client.close()
        asyncio.run(streams())
        status, snapshot = self.call("POST", f"/v1/sandboxes/{sid}/snapshot")
        self.assertEqual(status, 201, snapshot)
        status, forked = self.call("POST", f"/v1/sandboxes/{sid}/fork")
        self.assertEqual(status, 201, forked)
        self.addCleanup(self.destroy, forked["id"])
        status, restored = self.call("POST", "/v1/sandboxes", {"snapshot": snapshot["id"]})
        self.assertEqual(status, 201, restored)
        self.addCleanup(self.destroy, restored["id"])
        where = self.where()
        self.assertEqual((where[forked["id"]], where[restored["id"]]), (node, node))
        for made in (forked["id"], restored["id"]):
            self.assertEqual(self.call("GET", f"/v1/sandboxes/{made}/fs/read?path=/home/agent/f.txt"),
                             (200, b"on " + node.encode()))
        self.assertEqual(self.call("DELETE", f"/v1/snapshots/{snapshot['id']}")[0], 200)

    def run_in(self, sid, script, **fields):
        """A shell script's stdout in the sandbox, through the front door (it must exit 0)."""
        async def go():
            client = await self.ws()
            try:
                out, err, outcome, _ = await client.run(sid, ["sh", "-c", script], **fields)
                self.assertEqual(outcome["exit_code"], 0, (out, err))
                return out.decode()
            finally:
                await client.close()
        return asyncio.run(go())

    def test_a_drain_that_moves_takes_a_stopped_sandbox_with_its_files_to_another_node(self):
        node = NODES[0]
        admin = self.nodes[node]
        stopped, running = self.on(node)["id"], self.on(node)["id"]
        # Files of every kind the layer keeps: data (20 MiB, in an image of 1 GiB: holes mostly),
        # the agent's owner, modes, a symlink, a hard link, and a whiteout (a file of the host's
        # image deleted in the sandbox).
        made = self.run_in(stopped, "set -e; cd /home/agent; echo moved-data > keep; chmod 0640 keep; "
                                    "head -c 20971520 /dev/urandom > blob; ln -s keep link; ln blob blob2; "
                                    "mkdir -p d/e; touch d/e/f; sha256sum blob | cut -d' ' -f1; id -u")
        blob_sha, uid = made.split()
        self.assertEqual(self.run_in(stopped, "rm /etc/debian_version && echo gone", user="root"), "gone\n")
        status, snapshot = self.call("POST", f"/v1/sandboxes/{stopped}/snapshot")
        self.assertEqual(status, 201, snapshot)
        self.addCleanup(self.call, "DELETE", f"/v1/snapshots/{snapshot['id']}")
        status, body = self.call("POST", f"/v1/sandboxes/{stopped}/stop")
        self.assertEqual(status, 200, body)
        files = os.path.join(admin.state_dir, "sandboxes", stopped)
        self.assertTrue(os.path.isdir(files))

        def snapshot_files():
            """The nodes whose disk holds the snapshot."""
            return [name for name, daemon in self.nodes.items()
                    if any(os.path.exists(os.path.join(daemon.state_dir, "snapshots", snapshot["id"] + suffix))
                           for suffix in (".img", ".layer"))]
        self.assertEqual(snapshot_files(), [node])

        self.addCleanup(lambda: admin.admin("POST", f"/v1/admin/nodes/{node}/undrain"))
        status, body = admin.admin("POST", f"/v1/admin/nodes/{node}/drain?move=true")
        self.assertEqual((status, body.get("moving_out")), (200, True), body)
        wait_until(lambda: self.where()[stopped] != node, timeout=60, what="the stopped sandbox moved")
        now = self.where()
        to = now[stopped]
        self.assertIn(to, NODES)
        # The running one stays where it runs (positive control: it is served there as before).
        self.assertEqual(now[running], node)
        self.assertEqual(self.run_in(running, "echo here"), "here\n")
        # The old node's copy goes once the catalog says the sandbox moved.
        wait_until(lambda: not os.path.exists(files), timeout=30, what="the old node's copy removed")
        self.assertTrue(os.path.isdir(os.path.join(self.nodes[to].state_dir, "sandboxes", stopped)))

        # Started on its new node through the front door: the same files, owners and modes.
        status, body = self.call("POST", f"/v1/sandboxes/{stopped}/start")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.where()[stopped], to)
        got = self.run_in(stopped, "cd /home/agent; cat keep; stat -c '%U %a' keep; readlink link; "
                                   "stat -c %h blob; sha256sum blob2 | cut -d' ' -f1; ls d/e; "
                                   "ls /etc/debian_version 2>&1 >/dev/null | grep -c 'No such'; id -u")
        self.assertEqual(got.split("\n"), ["moved-data", "agent 640", "keep", "2", blob_sha, "f", "1", uid, ""])
        status, events = self.call("GET", f"/v1/sandboxes/{stopped}/events")
        self.assertEqual(status, 200, events)
        moved = [e for e in events["events"] if e["type"] == "sandbox.moved"]
        self.assertEqual(len(moved), 1, events)
        self.assertIn(f'"to":"{to}"', json.dumps(moved[0], separators=(",", ":")))
        moves = [json.loads(line) for line in admin.log().splitlines()
                 if line.startswith("{") and '"msg":"moved"' in line and stopped in line]
        self.assertEqual(len(moves), 1, moves)
        sys.stderr.write(f"\n  moved {stopped} ({int(moves[0]['bytes']) >> 20} MiB of tar) in {moves[0]['ms']} ms\n")

        # Its snapshot moved too (after the sandboxes), and a sandbox made of it, where it is now,
        # has the files it was taken with.
        wait_until(lambda: snapshot_files() not in ([node], []), timeout=60, what="the snapshot moved")
        wait_until(lambda: len(snapshot_files()) == 1, timeout=30, what="the old node's snapshot removed")
        (holder,) = snapshot_files()
        self.assertNotEqual(holder, node)
        status, restored = self.call("POST", "/v1/sandboxes", {"snapshot": snapshot["id"]})
        self.assertEqual(status, 201, restored)
        self.addCleanup(self.destroy, restored["id"])
        self.assertEqual(self.where()[restored["id"]], holder)
        self.assertEqual(self.run_in(restored["id"], "cat /home/agent/keep; sha256sum /home/agent/blob | cut -d' ' -f1"),
                         f"moved-data\n{blob_sha}\n")

    @unittest.skipUnless(shutil.which("claude"), "Claude Code is not installed (dist/install-deps.sh installs it)")
    def test_a_sessions_events_resume_through_another_node(self):
        node = NODES[1]
        sid = self.on(node)["id"]
        model = self.models[node]
        model.script = scripted_model.Script({"turns": [
            {"text": "Writing it.",
             "tool_use": {"name": "Bash", "input": {"command": "echo fleet > made.txt", "description": "write"}},
             "usage": {"input_tokens": 900, "output_tokens": 30}},
            {"text": "done", "usage": {"input_tokens": 950, "output_tokens": 4}},
        ]})
        model.requests.clear()
        status, session = self.call("POST", f"/v1/sandboxes/{sid}/sessions", {"prompt": "write made.txt"})
        self.assertEqual(status, 201, session)

        async def attach(after, until):
            client = await self.ws()
            try:
                reply = await client.request("session.attach", session=session["id"], after_seq=after)
                self.assertTrue(reply["ok"], reply)
                events = []
                while not until(events):
                    events.append(await client.next_event(timeout=120))
                return events
            finally:
                await client.close()
        first = asyncio.run(attach(0, lambda events: len(events) >= 2))
        last = first[-1]["seq"]
        done = lambda events: any(e.get("kind") == "agent" and e["data"].get("type") == "result" for e in events)
        rest = asyncio.run(attach(last, done))
        self.assertEqual(rest[0]["seq"], last + 1, rest[0])
        seqs = [e["seq"] for e in first + rest]
        self.assertEqual(seqs, sorted(set(seqs)))
        self.assertEqual(self.call("GET", f"/v1/sandboxes/{sid}/fs/read?path=/home/agent/made.txt"), (200, b"fleet\n"))
        # The model calls went through node-2's relay, with the operator's key.
        self.assertGreaterEqual(len([r for r in model.requests if r.get("kind") == "main"]), 2)

    @unittest.skipUnless(shutil.which("claude"), "Claude Code is not installed (dist/install-deps.sh installs it)")
    def test_one_users_model_calls_on_three_nodes_spend_what_the_ledger_says(self):
        # The user's AI budget is small (USD 0.30 a day), so that the calls run into it.
        sub = self._testMethodName[5:45]
        self.tok = mint("acme", self.secret, sub, budget={"ai_usd": BUDGET / 1e6, "window": "day"})
        for model in self.models.values():
            model.script = scripted_model.Script({"turns": [{"text": "ok", "usage": USAGE, "repeat": 1000}]})
            model.requests.clear()
        # A sandbox on each node, and an agent's session in each (its first turn), all through
        # the front door, wherever each request lands.
        sandboxes = {node: self.on(node)["id"] for node in NODES}
        sessions = {}
        for node, sid in sandboxes.items():
            status, session = self.call("POST", f"/v1/sandboxes/{sid}/sessions", {"prompt": "hi"})
            self.assertEqual(status, 201, session)
            sessions[node] = session["id"]
        for node, session in sessions.items():
            wait_until(lambda: self.call("GET", f"/v1/sessions/{session}")[1].get("state") == "ready",
                       timeout=120, interval=0.2, what=f"the agent's first turn on {node}")
        keys = [key.strip() for key in self.shells([(sandboxes[node], FIND_KEY) for node in NODES])]
        self.assertTrue(all(keys), "no agent process with a key")
        self.assertEqual(len(set(keys)), len(NODES))
        agents = {node: len(messages(self.models[node].requests)) for node in NODES}
        self.assertTrue(all(agents.values()), agents)  # each agent's turn was a call through its node's relay

        # The three sandboxes' callers at once (WORKERS each), on three exec streams through the
        # front door, until the budget is spent; meanwhile, the fleet's holds of the user's calls.
        for model in self.models.values():
            model.script = scripted_model.Script({"turns": [{"text": "ok", "usage": USAGE, "delay": 0.3,
                                                             "repeat": 100000}]})
        held, done = set(), threading.Event()

        def watch():
            while not done.is_set():
                held.update(self.holds(sub).split())
        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            outputs = self.shells([(sandboxes[node], callers(key)) for node, key in zip(NODES, keys)])
        finally:
            done.set()
            watcher.join()
        made = {node: len(messages(self.models[node].requests)) - agents[node] for node in NODES}
        for node, out in zip(NODES, outputs):
            last, admitted = tally(out)
            self.assertEqual(len(last), WORKERS, out)
            # Each caller stopped on a refusal: the budget spent (403), or the session it belonged
            # to ended for that (401); at least one on each node saw the budget spent.
            self.assertTrue(set(last.values()) <= {"403", "401"}, (node, last))
            self.assertIn("403", last.values(), (node, out))
            # Every 200 was a call to that node's model API, and nothing else was; each node's
            # callers were admitted.
            self.assertEqual(admitted, made[node], (node, out))
            self.assertGreater(admitted, 0, (node, out))

        # The ledger, read through the front door (so from each node in turn), is the same on
        # every node, and is what the three model APIs answered: each call (the agents' first
        # turns' too, all answered with USAGE) priced once, at COST; each session's calls those
        # of its node's model API.
        answered = {node: messages(self.models[node].requests) for node in NODES}
        self.assertEqual({r["kind"] for node in NODES for r in answered[node]}, {"main"})
        usage = [self.usage() for _ in NODES]
        self.assertEqual(usage[1:], usage[:-1])
        spent, calls, by_session = usage[0]
        self.assertEqual(spent, COST * sum(len(answered[node]) for node in NODES))
        self.assertEqual(calls, sum(len(answered[node]) for node in NODES))
        self.assertEqual(by_session, {sessions[node]: len(answered[node]) for node in NODES})
        # Within the bound (the budget plus one call, less a micro-dollar), and at least the budget:
        # the calls really ran into it (a call is refused 403 once the ledger has the budget spent).
        self.assertGreaterEqual(spent, BUDGET)
        self.assertLessEqual(spent, BUDGET - 1 + COST)
        # No hold left (the control: while the calls were in flight, the same query saw holds of
        # every node's).
        self.assertEqual(self.holds(sub), "")
        self.assertEqual(held, set(NODES))
        sys.stderr.write(f"\n  three nodes, {len(NODES) * WORKERS} callers: {sum(made.values())} calls answered "
                         f"({', '.join(f'{made[node]} on {node}' for node in NODES)}), spent {spent} of {BUDGET} "
                         f"micro-dollars (bound {BUDGET - 1 + COST})\n")

    def shells(self, scripts):
        """Runs (sandbox, script)s at once, each on a WebSocket of its own through the front door
        (forwarded to the sandbox's node from whichever node it lands on); their outputs."""
        async def one(sid, script):
            client = await self.ws()
            try:
                out, err, outcome, _ = await client.run(sid, ["sh", "-c", script])
            finally:
                await client.close()
            self.assertEqual(outcome.get("exit_code"), 0, (out, err, outcome))
            return out.decode()

        async def go():
            return await asyncio.gather(*(one(sid, script) for sid, script in scripts))
        return asyncio.run(go())

    def usage(self):
        """The user's AI spending (micro-dollars), calls, and calls by session (GET /v1/usage)."""
        status, usage = self.call("GET", "/v1/usage")
        self.assertEqual(status, 200, usage)
        return (round(float(usage["ai"]["spent_usd"]) * 1e6), usage["ai"]["calls"],
                {s["session"]: s["calls"] for s in usage["sessions"]})

    def holds(self, sub):
        """The nodes of the user's budget holds in the fleet's store, one a line."""
        return self.pg.psql(f"SELECT node_id FROM budget_holds WHERE iss = 'acme' AND sub = '{sub}'", database="fleet")

    def test_a_killed_node_leaves_the_fleet_serving_and_comes_back(self):
        victim = NODES[2]
        lost = self.on(victim, start=False)["id"]
        kept = self.on(NODES[0], start=False)["id"]
        self.nodes[victim].kill9()

        def unavailable():
            status, body = self.call("GET", f"/v1/sandboxes/{lost}")
            return status == 503 and "not heard from since" in body["error"]["message"]
        wait_until(unavailable, timeout=20, interval=0.3, what="the killed node's sandbox unavailable")
        for _ in range(4):  # whichever node answers
            status, body = self.call("GET", f"/v1/sandboxes/{lost}")
            self.assertEqual(status, 503, body)
            self.assertIn(victim, body["error"]["message"])
            self.assertEqual(self.call("GET", f"/v1/sandboxes/{kept}")[0], 200)
        # New sandboxes go to the live nodes only.
        for _ in range(4):
            status, made = self.call("POST", "/v1/sandboxes", {"start": False})
            self.assertEqual(status, 201, made)
            self.addCleanup(self.destroy, made["id"])
            self.assertNotEqual(self.where()[made["id"]], victim)
        self.nodes[victim].start(port=PORT)
        wait_until(lambda: self.call("GET", f"/v1/sandboxes/{lost}")[0] == 200, timeout=20, interval=0.3,
                   what="the node's sandbox served again")

    def test_postgres_restarted_under_load_loses_no_acknowledged_write(self):
        acknowledged, destroyed, refused, errors = [], [], [], []
        stop = threading.Event()

        def answer(method, path, body=None, gone_ok=False):
            try:
                status, reply = self.call(method, path, body)
            except OSError as e:
                errors.append(str(e))
                return None
            if status == 503:
                refused.append(reply)
            elif status == 404 and gone_ok:
                return {}
            elif status not in (200, 201):
                errors.append((status, reply))
            return reply if status in (200, 201) else None

        def load():
            # Creates and destroys: each acknowledged one must hold after the restart.
            while not stop.is_set():
                made = answer("POST", "/v1/sandboxes", {"start": False})
                if made is None:
                    continue
                acknowledged.append(made["id"])
                self.addCleanup(self.destroy, made["id"])
                # A destroy refused (503: the node asked has not reconnected yet) is asked again,
                # as a client heeding Retry-After would; one that went through before its answer
                # was lost (a commit cut off) finds the sandbox gone.
                for attempt in range(50):
                    if answer("DELETE", f"/v1/sandboxes/{made['id']}", gone_ok=attempt > 0) is not None:
                        destroyed.append(made["id"])
                        break
                    if errors:
                        return
                    time.sleep(0.2)
        workers = [threading.Thread(target=load) for _ in range(3)]
        for worker in workers:
            worker.start()
        time.sleep(1)
        self.pg.restart()
        time.sleep(2)
        stop.set()
        for worker in workers:
            worker.join(60)
        sys.stderr.write(f"\n  PostgreSQL restarted under load: {len(acknowledged)} creates and {len(destroyed)} "
                         f"destroys acknowledged, {len(refused)} refused (503)\n")
        self.assertEqual(errors, [])
        self.assertGreater(len(acknowledged), 0)
        for body in refused:
            self.assertEqual(body["error"]["code"], "unavailable", body)
        # Every acknowledged create is in the catalog, and reachable through the front door.
        def readable():
            where = self.where(must=False)
            return where is not None and (where,)  # an empty catalog (every create destroyed) too
        (where,) = wait_until(readable, timeout=20, interval=0.5, what="the catalog readable")
        kept = [sid for sid in acknowledged if sid not in destroyed]
        self.assertEqual([sid for sid in kept if sid not in where], [])
        self.assertEqual([sid for sid in destroyed if sid in where], [])
        self.assertGreater(len(destroyed), 0)
        for sid in kept:
            self.assertEqual(self.call("GET", f"/v1/sandboxes/{sid}")[0], 200)


if __name__ == "__main__":
    unittest.main()
