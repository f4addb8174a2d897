"""Compute budgets, usage reports, the ledger export, rate limits and concurrency caps, against a
real corrald with real sandboxes (no model needed: compute is the sandbox's cgroup CPU time).

The daemon meters every running sandbox's CPU time every 5 s (and when it stops), so a sandbox
that spins past its user's compute budget is stopped within one metering interval of it.
"""
import csv
import io
import json
import time
import unittest

import os
import subprocess

from corral_e2e import CORRAL, SPIN, DaemonTestCase, UnixHTTPConnection, WsClient, metric_delta, mint, wait_until

METER_INTERVAL_S = 5


class ComputeBudgets(DaemonTestCase):

    def usage(self, token):
        status, body = self.daemon.http("GET", "/v1/usage", token)
        self.assertEqual(status, 200, body)
        return body

    def test_a_sandbox_that_spends_the_compute_budget_is_stopped_and_cannot_start_again(self):
        token = self.token("spender", budget={"compute_s": 2, "window": "day"})
        before = self.daemon.metrics()
        sandbox = self.create_sandbox(token)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sandbox}", token)
        started = time.monotonic()
        outcome, _ = self.exec_once(token, sandbox, SPIN)
        elapsed = time.monotonic() - started
        self.assertEqual(outcome["outcome"], "budget_exhausted", outcome)
        # Stopped within a metering interval (and some slack) of spending 2 CPU-seconds.
        self.assertLess(elapsed, 2 + METER_INTERVAL_S + 5)
        # Its commands end first, then the stop finishes.
        wait_until(lambda: self.daemon.http("GET", f"/v1/sandboxes/{sandbox}", token)[1]["state"] == "stopped",
                   timeout=15, what="the sandbox stopped")
        # Nothing of it is left running.
        self.assertEqual([c for c in self.daemon.cgroups() if sandbox in c], [])
        # The ledger holds what it used: at least the budget, over by at most one interval of
        # one CPU (the sandbox's CPU limit).
        usage = self.usage(token)
        spent = usage["compute"]["spent_s"]
        self.assertGreaterEqual(spent, 2.0, usage)
        self.assertLessEqual(spent, 2.0 + METER_INTERVAL_S + 1, usage)
        self.assertEqual(usage["compute"]["budget_s"], 2.0)
        self.assertEqual(usage["compute"]["remaining_s"], 0.0)
        self.assertEqual(usage["window"]["name"], "day")
        self.assertEqual([s["sandbox"] for s in usage["sandboxes"]], [sandbox])
        # Until the window ends, it does not start again (and a new one does not start either).
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{sandbox}/start", token)
        self.assertEqual(status, 402, body)
        self.assertEqual(body["error"]["code"], "budget_exhausted")
        self.assertIn("CPU-seconds", body["error"]["message"])
        status, body = self.daemon.http("POST", "/v1/sandboxes", token, {})
        self.assertEqual((status, body["error"]["code"]), (402, "budget_exhausted"), body)
        # /metrics: the stop, and the two starts refused.
        after = self.daemon.metrics()
        self.assertEqual(metric_delta(before, after, "corral_budget_refusals_total", kind="compute_stop"), 1)
        self.assertEqual(metric_delta(before, after, "corral_budget_refusals_total", kind="compute"), 2)
        # Control: a newer token with a larger budget starts it again.
        richer = self.token("spender", budget={"compute_s": 3600, "window": "day"})
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{sandbox}/start", richer)
        self.assertEqual((status, body.get("state")), (200, "running"), body)

    def test_a_user_within_budget_is_metered_and_keeps_running(self):
        token = self.token("worker", budget={"compute_s": 3600, "window": "day"})
        before = self.daemon.metrics()
        sandbox = self.create_sandbox(token)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sandbox}", token)
        outcome, _ = self.exec_once(token, sandbox, ["timeout", "3"] + SPIN)
        self.assertEqual((outcome["outcome"], outcome.get("exit_code")), ("exited", 124), outcome)
        # Metered while it runs (every interval), not only when it stops: the ledger (the
        # operator's export) has it while the sandbox still runs.
        wait_until(lambda: self.ledger_ms("worker") >= 1000, timeout=METER_INTERVAL_S * 3,
                   what="the CPU time in the ledger")
        usage = self.usage(token)
        self.assertGreaterEqual(usage["compute"]["spent_s"] * 1000, self.ledger_ms("worker"), usage)
        self.assertLessEqual(usage["compute"]["spent_s"], 4.0, usage)
        self.assertAlmostEqual(usage["compute"]["remaining_s"], 3600 - usage["compute"]["spent_s"], places=3)
        status, row = self.daemon.http("GET", f"/v1/sandboxes/{sandbox}", token)
        self.assertEqual(row["state"], "running")
        # Positive control of the refusals' count: a user within budget is never counted.
        self.assertEqual(metric_delta(before, self.daemon.metrics(), "corral_budget_refusals_total"), 0)
        # No AI budget in the token: none to spend, nothing spent.
        self.assertIsNone(usage["ai"]["budget_usd"])
        self.assertEqual(usage["ai"]["spent_usd"], "0.000000")
        # Another user's usage is their own.
        self.assertEqual(self.usage(self.token("bystander"))["compute"]["spent_s"], 0)

    def test_the_operator_exports_the_ledger_as_csv_and_json_lines(self):
        token = self.token("exported", budget={"compute_s": 3600, "window": "day"})
        sandbox = self.create_sandbox(token)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sandbox}", token)
        self.exec_once(token, sandbox, ["timeout", "2"] + SPIN)
        self.assertGreater(self.usage(token)["compute"]["spent_s"], 0)
        # Stopped, nothing of it is left to debit: the report is the ledger.
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{sandbox}/stop", token)
        self.assertEqual(status, 200, body)
        spent_ms = round(self.usage(token)["compute"]["spent_s"] * 1000)

        status, headers, body = self.admin_raw("/v1/admin/usage?issuer=acme&user=exported&format=jsonl")
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["content-type"], "application/x-ndjson")
        rows = [json.loads(line) for line in body.decode().splitlines()]
        self.assertTrue(rows)
        self.assertEqual({(r["iss"], r["sub"], r["kind"], r["unit"], r["sandbox"]) for r in rows},
                         {("acme", "exported", "compute", "cpu_ms", sandbox)})
        self.assertEqual(sum(r["amount"] for r in rows), spent_ms)

        status, headers, body = self.admin_raw("/v1/admin/usage?issuer=acme&user=exported&format=csv")
        self.assertEqual(status, 200, body)
        self.assertTrue(headers["content-type"].startswith("text/csv"))
        table = list(csv.DictReader(io.StringIO(body.decode())))
        self.assertEqual([int(r["id"]) for r in table], [r["id"] for r in rows])
        self.assertEqual(sum(int(r["amount"]) for r in table), spent_ms)

        # Paging: one row at a time, the next page after the id in the header.
        if len(rows) > 1:
            status, headers, body = self.admin_raw("/v1/admin/usage?issuer=acme&user=exported&limit=1")
            self.assertEqual(len(body.decode().splitlines()), 1)
            self.assertEqual(int(headers["x-corral-next-after-id"]), rows[0]["id"])
        # Other users' rows are not in this user's export; every issuer's are in the whole one.
        status, _, body = self.admin_raw("/v1/admin/usage?issuer=acme&user=nobody")
        self.assertEqual((status, body), (200, b""))
        status, _, body = self.admin_raw("/v1/admin/usage")
        self.assertGreaterEqual(len(body.decode().splitlines()), len(rows))
        # Bad requests say what is wrong.
        status, _, body = self.admin_raw("/v1/admin/usage?user=exported")
        self.assertEqual(status, 400, body)
        status, _, body = self.admin_raw("/v1/admin/usage?format=xml")
        self.assertEqual(status, 400, body)
        # The export is the operator's: a user's token cannot reach it.
        status, _ = self.daemon.http("GET", "/v1/admin/usage", token)
        self.assertIn(status, (403, 404))

        # The same through the CLI: the user's report, and the operator's export to a file.
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        env.update(CORRAL_URL=f"http://127.0.0.1:{self.daemon.port}", CORRAL_TOKEN=token)
        proc = subprocess.run([CORRAL, "usage"], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn(f"compute  {spent_ms / 1000:.3f} CPU-s spent of 3600.000", proc.stdout)
        self.assertIn(sandbox, proc.stdout)
        out = os.path.join(self.daemon.tmp, "ledger.csv")
        proc = subprocess.run([CORRAL, "admin", "usage", "--admin-socket", self.daemon.admin_socket, "--issuer", "acme",
                               "--user", "exported", "--out", out], capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(out) as f:
            exported = list(csv.DictReader(f))
        self.assertEqual([int(r["id"]) for r in exported], [r["id"] for r in rows])
        proc = subprocess.run([CORRAL, "admin", "usage", "--admin-socket", self.daemon.admin_socket, "--user", "x"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--user needs --issuer", proc.stderr)

    def ledger_ms(self, sub):
        """What the ledger holds of the user's compute (the operator's export), in milliseconds."""
        status, _, body = self.admin_raw(f"/v1/admin/usage?issuer=acme&user={sub}")
        self.assertEqual(status, 200, body)
        return sum(json.loads(line)["amount"] for line in body.decode().splitlines())

    def admin_raw(self, path):
        conn = UnixHTTPConnection(self.daemon.admin_socket)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            headers = {k.lower(): v for k, v in response.getheaders()}
            return response.status, headers, response.read()
        finally:
            conn.close()


class RateLimitsAndCaps(DaemonTestCase):
    extra_api_config = "requests_per_minute = 5"
    extra_config = "max_sandboxes_per_issuer = 2"

    def test_a_user_above_the_rate_gets_429_and_others_do_not(self):
        carol = self.token("carol")
        for i in range(5):
            status, body = self.daemon.http("GET", "/v1/sandboxes", carol)
            self.assertEqual(status, 200, (i, body))
        conn_status, body = self.daemon.http("GET", "/v1/sandboxes", carol)
        self.assertEqual(conn_status, 429, body)
        self.assertEqual(body["error"]["code"], "rate_limited")
        self.assertIn("retry in", body["error"]["message"])
        # Control: another user is not slowed down by carol.
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", self.token("dave"))[0], 200)
        # A new token does not reset it: the user is the pair (iss, sub).
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", self.token("carol"))[0], 429)
        # The admin socket is exempt.
        for _ in range(10):
            self.assertEqual(self.daemon.admin("GET", "/v1/admin/sandboxes")[0], 200)

    def test_websocket_ops_count_but_pings_do_not(self):
        erin = self.token("erin")
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), erin)  # the upgrade is one request
            try:
                codes = []
                for _ in range(5):
                    reply = await c.request("attach", command="cmd_nonexistent")
                    codes.append(reply["error"]["code"])
                pings = [(await c.request("ping"))["ok"] for _ in range(20)]
                return codes, pings
            finally:
                await c.close()
        codes, pings = self.run_async(go())
        self.assertEqual(codes, ["not_found"] * 4 + ["rate_limited"])
        self.assertEqual(pings, [True] * 20)

    def test_an_issuers_users_share_its_sandbox_cap(self):
        made = []
        for sub in ("f1", "f2"):
            token = self.token(sub)
            made.append((token, self.create_sandbox(token, start=False)["id"]))
        for token, sid in made:
            self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", token)
        status, body = self.daemon.http("POST", "/v1/sandboxes", self.token("f3"), {"start": False})
        self.assertEqual(status, 429, body)
        self.assertEqual(body["error"]["code"], "limit_exceeded")
        self.assertIn("issuer acme", body["error"]["message"])
        # Control: another issuer's user is not counted against acme's cap.
        other_secret = self.daemon.add_issuer("globex")
        other = mint("globex", other_secret, "f1")
        status, body = self.daemon.http("POST", "/v1/sandboxes", other, {"start": False})
        self.assertEqual(status, 201, body)
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{body['id']}", other)


if __name__ == "__main__":
    unittest.main()
