"""One user's AI budget across two nodes (two corralds on one PostgreSQL store, on one host): a
model call in flight on one node makes a call near the edge of the budget wait on the other;
concurrent calls through both nodes spend what the ledger says, within the bound of
supervisor/relay/model_relay.h (the budget plus one call, less a micro-dollar), no hold left; a
node killed with a call in flight leaves its hold until it starts again.

The model calls are the agent's own (Claude Code, in a session on each node, against the
scripted Messages API server) and, mostly, curl's from inside each sandbox with the session's
placeholder key, as an agent's tool could make them.
"""

import asyncio
import json
import os
import shutil
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))

from budget_calls import BODY, BUDGET, COST, FIND_KEY, USAGE, WORKERS, callers, curl, messages, tally  # noqa: E402
from corral_e2e import (Daemon, UnixHTTPConnection, WsClient, mint, operator_key_file, relay_config,  # noqa: E402
                        wait_until)
import postgres  # noqa: E402
import scripted_model  # noqa: E402

REAL_KEY = "sk-ant-e2e-fleet-budgets-operator-key"


class FleetBudgets(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("corrald needs root (namespaces, cgroups, mounts)")
        if not shutil.which("claude"):
            raise unittest.SkipTest("Claude Code is not installed (dist/install-deps.sh installs it)")
        why = postgres.available()
        if why:
            raise unittest.SkipTest(why)
        cls.upstream = scripted_model.serve({"turns": []}, port=0)
        cls.key_dir, key_file = operator_key_file("corral-e2e-fleet-budgets-", REAL_KEY)
        cls.pg = postgres.Postgres(fsync=False)
        cls.pg.start()
        url = cls.pg.create_database("fleetbudgets")
        cls.nodes = []
        try:
            for name in ("node-a", "node-b"):
                daemon = Daemon()
                daemon.extra_sections = (relay_config(cls.upstream.port, key_file)
                                         + f'\n[store]\nbackend = "postgresql"\nurl = "{url}"\n\n'
                                         f'[node]\nid = "{name}"\naddress = "127.0.0.1:1"\n')
                cls.nodes.append(daemon)
                daemon.start()
                if name == "node-a":
                    cls.secret = daemon.add_issuer("acme")  # the fleet's; node-b reads it at its start
        except Exception:
            cls.tearDownClass()
            raise
        cls.a, cls.b = cls.nodes

    @classmethod
    def tearDownClass(cls):
        leaked = []
        for daemon in cls.nodes:
            daemon.cleanup()
            leaked += daemon.cgroups()
        cls.pg.stop()
        cls.upstream.shutdown()
        cls.upstream.server_close()
        shutil.rmtree(cls.key_dir, ignore_errors=True)
        assert not leaked, f"leaked cgroups: {leaked}"

    def play(self, turns):
        self.upstream.script = scripted_model.Script({"turns": turns})

    def sh(self, daemon, sandbox, script):
        async def go():
            client = await WsClient.connect(daemon.ws_url(), self.tok)
            try:
                return await client.run(sandbox, ["sh", "-c", script])
            finally:
                await client.close()
        out, err, outcome, _ = asyncio.run(go())
        self.assertEqual(outcome.get("exit_code"), 0, (out, err, outcome))
        return out.decode()

    def both(self, scripts):
        """Runs one script in each node's sandbox at once; their outputs."""
        async def one(daemon, sandbox, script):
            client = await WsClient.connect(daemon.ws_url(), self.tok)
            try:
                out, err, outcome, _ = await client.run(sandbox, ["sh", "-c", script])
                self.assertEqual(outcome.get("exit_code"), 0, (out, err, outcome))
                return out.decode()
            finally:
                await client.close()

        async def go():
            return await asyncio.gather(*(one(d, s, script) for (d, s), script in zip(self.sandboxes, scripts)))
        return asyncio.run(go())

    def agent_key(self, daemon, sandbox):
        """Starts a session in the sandbox (one turn of the agent's) and returns its key."""
        status, session = daemon.http("POST", f"/v1/sandboxes/{sandbox}/sessions", self.tok, {"prompt": "hi"})
        self.assertEqual(status, 201, session)
        wait_until(lambda: daemon.http("GET", f"/v1/sessions/{session['id']}", self.tok)[1].get("state") == "ready",
                   timeout=120, what="the agent's first turn")
        key = self.sh(daemon, sandbox, FIND_KEY).strip()
        self.assertTrue(key, "no agent process with a key")
        return key

    def sessions(self, sub):
        """A sandbox with an agent's session on each node, for `sub` (USD 0.30 a day): the keys."""
        self.tok = mint("acme", self.secret, sub, budget={"ai_usd": BUDGET / 1e6, "window": "day"})
        self.play([{"text": "ok", "usage": USAGE, "repeat": 1000}])
        self.sandboxes = []
        keys = []
        for daemon in (self.a, self.b):
            status, sandbox = daemon.http("POST", "/v1/sandboxes", self.tok, {})
            self.assertEqual(status, 201, sandbox)
            self.addCleanup(daemon.http, "DELETE", f"/v1/sandboxes/{sandbox['id']}", self.tok)
            self.sandboxes.append((daemon, sandbox["id"]))
            keys.append(self.agent_key(daemon, sandbox["id"]))
        return keys

    def holds(self, node):
        return int(self.pg.psql(f"SELECT COUNT(*) FROM budget_holds WHERE node_id = '{node}'", database="fleetbudgets"))

    def test_a_node_killed_with_a_call_in_flight_releases_its_hold_when_it_starts_again(self):
        keys = self.sessions("survivor")
        (a, on_a), (b, on_b) = self.sandboxes
        # node-a dies (kill -9) while a call of the user's that may cost more than the budget is in
        # flight there (6 s upstream).
        self.play([{"text": "slow", "usage": USAGE, "delay": 6}, {"text": "ok", "usage": USAGE, "repeat": 1000}])
        dear = BODY.replace('"max_tokens":100', '"max_tokens":1000000')

        async def call_then_kill():
            client = await WsClient.connect(a.ws_url(), self.tok)
            reply = await client.request("exec", sandbox=on_a, argv=["sh", "-c", curl(keys[0], dear)])
            self.assertTrue(reply["ok"], reply)
            for _ in range(100):
                if self.holds("node-a") == 1:
                    break
                await asyncio.sleep(0.1)
            self.assertEqual(self.holds("node-a"), 1)  # admitted: in flight
            a.kill9()
            await client.ws.close()
        asyncio.run(call_then_kill())
        # Its hold outlives it: node-b's calls at the edge wait for a call that will never be priced.
        self.assertEqual(self.sh(b, on_b, curl(keys[1])), "429")
        self.assertEqual(self.holds("node-a"), 1)
        # node-a starts again and releases what its last run held: node-b's call goes ahead.
        a.start()
        self.assertEqual(self.holds("node-a"), 0)
        self.assertEqual(self.sh(b, on_b, curl(keys[1])), "200")

    def test_one_users_calls_on_two_nodes_share_one_budget(self):
        earlier = len(messages(self.upstream.requests))  # other tests' users'
        keys = self.sessions("spender")
        (a, on_a), (b, on_b) = self.sandboxes

        # A call in flight on node-a (4 s upstream) that may cost more than the whole budget (it
        # goes ahead: nothing else is in flight) makes node-b's call wait: the holds are the
        # fleet's (with a node's own holds, node-b would have held nothing and let it through).
        self.play([{"text": "slow", "usage": USAGE, "delay": 4}, {"text": "ok", "usage": USAGE, "repeat": 1000}])
        dear = BODY.replace('"max_tokens":100', '"max_tokens":1000000')
        waited = self.both([curl(keys[0], dear), f"sleep 1.5; {curl(keys[1])}"])
        self.assertEqual(waited, ["200", "429"])
        self.assertEqual(self.sh(b, on_b, curl(keys[1])), "200")  # control: priced, nothing in flight
        status, usage = a.http("GET", "/v1/usage", self.tok)
        print(f"\nbefore the callers: {usage['ai']['calls']} calls, USD {usage['ai']['spent_usd']} spent")

        # Both nodes' callers at once, until the budget is spent.
        self.play([{"text": "ok", "usage": USAGE, "delay": 0.3, "repeat": 100000}])
        before = len(messages(self.upstream.requests))
        outputs = self.both([callers(keys[0]), callers(keys[1])])
        made = len(messages(self.upstream.requests)) - before
        answered = []
        for node, out in zip(("node-a", "node-b"), outputs):
            last, calls = tally(out)
            self.assertEqual(len(last), WORKERS, out)
            # Each caller stopped on a refusal: the budget spent (403), or the session it belonged
            # to ended for that (401); at least one on each node saw the budget spent.
            self.assertTrue(set(last.values()) <= {"403", "401"}, (node, last))
            self.assertIn("403", last.values(), (node, out))
            answered.append(calls)
            self.assertGreater(answered[-1], 0, (node, out))
        self.assertEqual(sum(answered), made)  # every 200 was a call upstream, and nothing else was

        # The ledger: every call that went upstream (the agents' own too), priced once; the
        # budget spent, by less than one of the callers' calls (the last ones admitted).
        rows = self.ledger()
        self.assertEqual(len(rows), len(messages(self.upstream.requests)) - earlier)
        spent = sum(row["amount"] for row in rows)
        status, usage = a.http("GET", "/v1/usage", self.tok)
        self.assertEqual(status, 200, usage)
        self.assertEqual(round(float(usage["ai"]["spent_usd"]) * 1e6), spent)
        self.assertEqual(usage["ai"]["calls"], len(rows))
        self.assertGreaterEqual(spent, BUDGET)
        self.assertLessEqual(spent, BUDGET - 1 + COST)
        self.assertTrue({on_a, on_b} <= {row["sandbox"] for row in rows}, rows[-5:])
        self.assertEqual(self.holds("node-a") + self.holds("node-b"), 0)
        print(f"two nodes, {2 * WORKERS} callers: {sum(answered)} calls answered ({answered[0]} on node-a, "
              f"{answered[1]} on node-b), spent {spent} of {BUDGET} micro-dollars (bound {BUDGET - 1 + COST})")

    def ledger(self):
        """The user's AI rows of the operator's export (JSON lines), oldest first."""
        conn = UnixHTTPConnection(self.a.admin_socket)
        conn.request("GET", "/v1/admin/usage?issuer=acme&user=spender&format=jsonl")
        response = conn.getresponse()
        data = response.read()
        conn.close()
        self.assertEqual(response.status, 200, data)
        return [row for row in (json.loads(line) for line in data.decode().splitlines()) if row["kind"] == "ai"]


if __name__ == "__main__":
    unittest.main()
