"""corrald end to end: auth, sandboxes, commands over the WebSocket, isolation between users."""
import asyncio
import base64
import hashlib
import json
import os
import re
import struct
import time
import unittest

import websockets
import websockets.exceptions

from corral_e2e import DaemonTestCase, WsClient, mint


class HealthAndMetrics(DaemonTestCase):
    def test_healthz_needs_no_token(self):
        status, body = self.daemon.http("GET", "/healthz")
        self.assertEqual(status, 200)
        self.assertEqual(body["status"], "ok")
        self.assertEqual(body["protocol"], 1)

    def test_metrics_are_prometheus_text(self):
        status, body = self.daemon.http("GET", "/metrics")
        self.assertEqual(status, 200)
        text = body.decode()
        self.assertIn("# TYPE corral_auth_failures_total counter", text)
        self.assertIn('corral_sandboxes{state="running"}', text)
        self.assertIn("corral_http_request_duration_seconds_bucket", text)

    def test_the_dashboard_the_scrape_config_and_the_docs_name_only_metrics_corrald_exports(self):
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        # Some activity first: an answer, and a refused token.
        self.assertEqual(self.daemon.http("GET", "/healthz")[0], 200)
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", "not.a.token")[0], 401)
        scrape = self.daemon.metrics()
        exported = set(scrape.types)
        for name, kind in scrape.types.items():
            if kind == "histogram":
                exported |= {name + "_bucket", name + "_sum", name + "_count"}
        self.assertIn("corral_model_cost_usd_total", exported)  # (the parse itself works)

        def names(text):
            return set(re.findall(r"\bcorral_[a-z0-9_]+", text))

        # The Grafana dashboard: valid JSON, one query at least per panel, every metric real.
        with open(os.path.join(root, "dist", "grafana-dashboard.json")) as f:
            dashboard = json.load(f)
        panels = [p for p in dashboard["panels"] if p["type"] != "row"]
        exprs = [t["expr"] for p in panels for t in p["targets"]]
        self.assertTrue(all(p["targets"] for p in panels))
        used = set().union(*(names(e) for e in exprs))
        self.assertEqual(used - exported, set())
        # ... and it shows what an operator watches.
        for wanted in ("corral_sandboxes", "corral_commands_total", "corral_sessions_running", "corral_sessions_total",
                       "corral_model_tokens_total", "corral_model_cost_usd_total", "corral_budget_refusals_total",
                       "corral_egress_decisions_total", "corral_http_request_duration_seconds_bucket",
                       "corral_auth_failures_total"):
            self.assertIn(wanted, used)
        self.assertTrue(any(e.startswith("histogram_quantile(0.95") and "corral_http_request_duration" in e
                            for e in exprs))
        # The docs' lists of metrics: README's "Metrics" section and PROTOCOL.md's.
        with open(os.path.join(root, "README.md")) as f:
            readme = f.read()
        section = readme[readme.index("### Metrics"):]
        section = section[:section.index("\n#", 1)]
        with open(os.path.join(root, "docs", "PROTOCOL.md")) as f:
            protocol = f.read()
        protocol = protocol[protocol.index("### Health and metrics"):]
        protocol = protocol[:protocol.index("\n#", 1)]
        documented = names(section) | names(protocol)
        self.assertEqual(documented - exported, set())
        # Every metric corrald exports is in the README's table.
        self.assertEqual({n for n in scrape.types} - names(section), set())
        # The sample scrape config targets the default listener (dist/corrald.toml's api.listen).
        with open(os.path.join(root, "dist", "corrald.toml")) as f:
            default = re.search(r'^# listen = "([^"]+)"', f.read(), re.M).group(1)
        with open(os.path.join(root, "dist", "prometheus.yml")) as f:
            scrape_config = f.read()
        self.assertIn(f'targets: ["{default}"]', scrape_config)
        self.assertIn("metrics_path: /metrics", scrape_config)


class Auth(DaemonTestCase):
    def assert_unauthorized(self, token):
        status, body = self.daemon.http("GET", "/v1/sandboxes", token)
        self.assertEqual(status, 401)
        self.assertEqual(body, {"error": {"code": "unauthorized", "message": "unauthorized"}})

    def test_a_good_token_is_accepted(self):
        status, body = self.daemon.http("GET", "/v1/sandboxes", self.token())
        self.assertEqual(status, 200, body)
        self.assertEqual(body, {"sandboxes": []})

    def test_every_bad_token_gets_the_same_401(self):
        good = self.token()
        head, payload, sig = good.split(".")
        cases = {
            "missing": None,
            "alg none": mint("acme", self.secret, "alice", header={"alg": "none"}).rsplit(".", 1)[0] + ".",
            "alg HS512": mint("acme", self.secret, "alice", header={"alg": "HS512"}),
            "wrong issuer": mint("other", self.secret, "alice"),
            "wrong secret": mint("acme", "x" * 43, "alice"),
            "expired": mint("acme", self.secret, "alice", ttl=-3600),
            "too long lived": mint("acme", self.secret, "alice", ttl=30 * 24 * 3600),
            "tampered": head + "." + payload[:-2] + ("A" if payload[-2] != "A" else "B") + payload[-1] + "." + sig,
            "garbage": "not.a.token",
        }
        for name, token in cases.items():
            with self.subTest(name):
                self.assert_unauthorized(token)
        status, metrics = self.daemon.http("GET", "/metrics")
        failures = [l for l in metrics.decode().splitlines() if l.startswith("corral_auth_failures_total ")]
        self.assertGreaterEqual(int(failures[0].split()[1]), len(cases))

    def test_websocket_refuses_a_bad_token_before_the_upgrade(self):
        async def go():
            with self.assertRaises(websockets.exceptions.InvalidStatusCode) as caught:
                await WsClient.connect(self.daemon.ws_url(), "bad", how="subprotocol")
            self.assertEqual(caught.exception.status_code, 401)
            # Positive control: the same route with a good token, by each of the three ways.
            for how in ("header", "subprotocol", "query"):
                client = await WsClient.connect(self.daemon.ws_url(), self.token(), how=how)
                reply = await client.request("ping")
                self.assertTrue(reply["ok"], reply)
                await client.close()
        self.run_async(go())

    def test_a_removed_issuer_stops_working_at_once(self):
        secret = self.daemon.add_issuer("temp")
        token = mint("temp", secret, "bob")
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", token)[0], 200)
        status, _ = self.daemon.admin("DELETE", "/v1/admin/issuers/temp")
        self.assertEqual(status, 200)
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", token)[0], 401)

    def test_admin_routes_are_not_on_tcp(self):
        status, _ = self.daemon.http("GET", "/v1/admin/issuers", self.token())
        self.assertEqual(status, 404)
        status, body = self.daemon.admin("GET", "/v1/admin/issuers")
        self.assertEqual(status, 200)
        self.assertIn("acme", [i["name"] for i in body["issuers"]])
        self.assertNotIn("secret", json.dumps(body))

    def test_admin_requests_are_checked(self):
        for path, body, fragment in (("/v1/admin/issuers", {"name": 7}, "name"),
                                     ("/v1/admin/issuers", {"name": "ok-name", "secret": "x"}, "secret"),
                                     ("/v1/admin/tokens", {"issuer": "acme", "sub": ["x"]}, "sub"),
                                     ("/v1/admin/tokens", {"issuer": "acme", "sub": "x", "ttl": 60}, "ttl"),
                                     # Claims the daemon would refuse on use are refused at minting.
                                     ("/v1/admin/tokens", {"issuer": "acme", "sub": "x",
                                                           "limits": {"egress": {"domains": ["bad domain"]}}},
                                      "limits.egress"),
                                     ("/v1/admin/tokens", {"issuer": "acme", "sub": "x", "limits": {"pids": -1}},
                                      "limits.pids"),
                                     ("/v1/admin/tokens", {"issuer": "acme", "sub": "x",
                                                           "budget": {"window": "fortnight"}}, "window")):
            with self.subTest(body=body):
                status, reply = self.daemon.admin("POST", path, body)
                self.assertEqual(status, 400, reply)
                self.assertIn(fragment, reply["error"]["message"])
        # Positive control: the same routes with good bodies.
        status, reply = self.daemon.admin("POST", "/v1/admin/tokens", {"issuer": "acme", "sub": "x", "ttl_s": 60})
        self.assertEqual(status, 200, reply)
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", reply["token"])[0], 200)


class Sandboxes(DaemonTestCase):
    def test_create_exec_stop_start_destroy(self):
        token = self.token("carol")
        sandbox = self.create_sandbox(token, name="dev", limits={"memory_bytes": 268435456, "cpus": 0.5})
        self.assertEqual(sandbox["state"], "running")
        self.assertEqual(sandbox["limits"]["memory_bytes"], 268435456)
        self.assertEqual(sandbox["limits"]["cpus"], 0.5)
        sid = sandbox["id"]

        async def run(argv, **kw):
            client = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                return await client.run(sid, argv, **kw)
            finally:
                await client.close()

        out, err, outcome, _ = self.run_async(run(["sh", "-c", "echo hi; echo oops >&2; id -un; exit 7"]))
        self.assertEqual(out, b"hi\nagent\n")
        self.assertEqual(err, b"oops\n")
        self.assertEqual(outcome["outcome"], "exited")
        self.assertEqual(outcome["exit_code"], 7)

        out, _, _, _ = self.run_async(run(["sh", "-c", "echo persisted > ~/file"]))
        status, stopped = self.daemon.http("POST", f"/v1/sandboxes/{sid}/stop", token)
        self.assertEqual((status, stopped["state"]), (200, "stopped"))
        status, started = self.daemon.http("POST", f"/v1/sandboxes/{sid}/start", token)
        self.assertEqual((status, started["state"]), (200, "running"))
        out, _, outcome, _ = self.run_async(run(["cat", "/home/agent/file"]))
        self.assertEqual(out, b"persisted\n")

        status, body = self.daemon.http("DELETE", f"/v1/sandboxes/{sid}", token)
        self.assertEqual((status, body["state"]), (200, "destroyed"))
        self.assertEqual(self.daemon.http("GET", f"/v1/sandboxes/{sid}", token)[0], 404)
        self.assertFalse(os.path.exists(os.path.join(self.daemon.state_dir, "sandboxes", sid)))

    def test_another_users_sandbox_is_not_found(self):
        alice, mallory = self.token("alice2"), self.token("mallory")
        sid = self.create_sandbox(alice)["id"]
        for method, path in [("GET", f"/v1/sandboxes/{sid}"), ("POST", f"/v1/sandboxes/{sid}/stop"),
                             ("DELETE", f"/v1/sandboxes/{sid}"), ("GET", f"/v1/sandboxes/{sid}/commands")]:
            with self.subTest(path=path, method=method):
                status, body = self.daemon.http(method, path, mallory)
                self.assertEqual(status, 404)
                self.assertEqual(body["error"]["code"], "not_found")
        # The same id from another issuer with the same sub is another user too.
        other_secret = self.daemon.add_issuer("globex")
        status, _ = self.daemon.http("GET", f"/v1/sandboxes/{sid}", mint("globex", other_secret, "alice2"))
        self.assertEqual(status, 404)

        async def exec_as(token):
            client = await WsClient.connect(self.daemon.ws_url(), token)
            reply = await client.request("exec", sandbox=sid, argv=["true"])
            await client.close()
            return reply
        reply = self.run_async(exec_as(mallory))
        self.assertFalse(reply["ok"])
        self.assertEqual(reply["error"]["code"], "not_found")
        # Positive control: the owner can.
        self.assertTrue(self.run_async(exec_as(alice))["ok"])
        self.daemon.http("DELETE", f"/v1/sandboxes/{sid}", alice)

    def test_limits_above_the_tokens_caps_are_refused(self):
        token = self.token("dave", limits={"memory_bytes": 300 << 20, "sandboxes": 1})
        status, body = self.daemon.http("POST", "/v1/sandboxes", token, {"limits": {"memory_bytes": 400 << 20}})
        self.assertEqual(status, 429)
        self.assertEqual(body["error"]["code"], "limit_exceeded")
        self.assertIn("memory_bytes", body["error"]["message"])
        sid = self.create_sandbox(token, limits={"memory_bytes": 200 << 20})["id"]
        status, body = self.daemon.http("POST", "/v1/sandboxes", token, {"start": False})
        self.assertEqual((status, body["error"]["code"]), (429, "limit_exceeded"))
        self.daemon.http("DELETE", f"/v1/sandboxes/{sid}", token)

    def test_bad_requests_name_the_field(self):
        token = self.token("erin")
        for body, field in [({"limits": {"memory_bytes": "lots"}}, "memory_bytes"),
                            ({"limits": {"bogus": 1}}, "bogus"), ({"image": 5}, "image"),
                            ({"cpus": 2}, "cpus")]:  # a limit outside "limits" is not silently dropped
            with self.subTest(field=field):
                status, reply = self.daemon.http("POST", "/v1/sandboxes", token, body)
                self.assertEqual(status, 400, reply)
                self.assertIn(field, reply["error"]["message"])
        status, reply = self.daemon.http("POST", "/v1/sandboxes", token, raw="{not json")
        self.assertEqual((status, reply["error"]["code"]), (400, "bad_request"))
        # A name is a label: at most 128 bytes, no control characters (a NUL could not be kept in
        # PostgreSQL's text, and none belongs in a label), on every store.
        for name in ["a\u0000b", "line\nbreak", "tab\there", "x" * 129]:
            with self.subTest(name=name[:20]):
                status, reply = self.daemon.http("POST", "/v1/sandboxes", token, {"name": name})
                self.assertEqual((status, reply["error"]["code"]), (400, "bad_request"), reply)
                self.assertIn("name", reply["error"]["message"])
        # Control: 128 bytes of UTF-8, quotes and spaces included, are a name.
        name = "caf\u00e9 'quoted' \"x\" " + "y" * (128 - 19)
        self.assertEqual(len(name.encode()), 128)
        sandbox = self.create_sandbox(token, name=name, start=False)
        self.assertEqual(sandbox["name"], name)
        # An image name of the right form that the daemon does not have (GET /v1/images) is not found.
        status, reply = self.daemon.http("POST", "/v1/sandboxes", token, {"image": "debian"})
        self.assertEqual((status, reply["error"]["code"]), (404, "not_found"), reply)
        self.assertIn("debian", reply["error"]["message"])

    def test_scopes_limit_what_a_token_may_do(self):
        reader = self.token("frank", scope="exec")
        status, body = self.daemon.http("POST", "/v1/sandboxes", reader, {})
        self.assertEqual((status, body["error"]["code"]), (403, "forbidden"))


class Commands(DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.owner = mint("acme", cls.secret, "grace")
        status, sandbox = cls.daemon.http("POST", "/v1/sandboxes", cls.owner, {})
        assert status == 201, sandbox
        cls.sid = sandbox["id"]

    async def client(self):
        return await WsClient.connect(self.daemon.ws_url(), self.owner)

    def test_stdin_reaches_the_command(self):
        async def go():
            c = await self.client()
            out, _, outcome, _ = await c.run(self.sid, ["sh", "-c", "tr a-z A-Z"], stdin=b"hello\n")
            await c.close()
            return out, outcome
        out, outcome = self.run_async(go())
        self.assertEqual(out, b"HELLO\n")
        self.assertEqual(outcome["outcome"], "exited")

    def test_input_faster_than_the_command_reads_is_held_back_not_dropped(self):
        # 24 MiB of binary stdin frames, sent as fast as the socket takes them, to a command
        # that reads nothing for 2 s: six times what the daemon holds for it (4 MiB). The daemon
        # stops reading this client instead of dropping input, so every byte arrives.
        data = os.urandom(24 << 20)

        async def go():
            c = await self.client()
            reply = await c.request("exec", sandbox=self.sid, argv=["sh", "-c", "sleep 2; sha256sum"], stdin=True)
            self.assertTrue(reply["ok"], reply)
            channel, command = reply["result"]["channel"], reply["result"]["command"]
            started = time.monotonic()
            for offset in range(0, len(data), 256 << 10):
                await c.ws.send(struct.pack(">BBIQ", 2, 0, channel, 0) + data[offset:offset + (256 << 10)])
            sent_s = time.monotonic() - started
            closed = await c.request("close_stdin", command=command)
            self.assertTrue(closed["ok"], closed)
            out, errors = b"", []
            while True:
                event = await c.next_event(60)
                if event.get("event") == "output":
                    out += event["data"]
                elif event.get("event") == "error":
                    errors.append(event)
                elif event.get("event") == "exit":
                    await c.close()
                    return out, errors, event["outcome"], sent_s

        out, errors, outcome, sent_s = self.run_async(go())
        self.assertEqual(errors, [])
        self.assertEqual(out.decode().split()[0], hashlib.sha256(data).hexdigest())
        self.assertEqual((outcome["outcome"], outcome["exit_code"]), ("exited", 0))
        # The client was held back while the command slept (unpaused, 24 MiB go out in a blink).
        self.assertGreater(sent_s, 1.0)

    def test_a_signal_ends_the_command_with_its_outcome(self):
        async def go():
            c = await self.client()
            reply = await c.request("exec", sandbox=self.sid, argv=["sleep", "30"])
            command = reply["result"]["command"]
            await asyncio.sleep(0.3)
            self.assertTrue((await c.request("signal", command=command, signal="TERM"))["ok"])
            while True:
                event = await c.next_event()
                if event.get("event") == "exit":
                    await c.close()
                    return event["outcome"]
        outcome = self.run_async(go())
        self.assertEqual(outcome["outcome"], "signaled")
        self.assertEqual(outcome["signal"], 15)

    def test_a_signal_sent_right_after_exec_is_not_lost(self):
        """The command's process starts with PID 1's dispositions (which ignore SIGTERM) until it
        resets them: a signal in that window must stay pending, not be discarded. 20 times
        exec and signal back to back; each ends signaled, none sleeps its 30 s."""
        async def go():
            c = await self.client()
            outcomes = []
            for _ in range(20):
                reply = await c.request("exec", sandbox=self.sid, argv=["sleep", "30"])
                command = reply["result"]["command"]
                self.assertTrue((await c.request("signal", command=command, signal="TERM"))["ok"])
                while True:
                    event = await c.next_event(timeout=20)
                    if event.get("event") == "exit" and event["command"] == command:
                        outcomes.append((event["outcome"]["outcome"], event["outcome"].get("signal")))
                        break
            await c.close()
            return outcomes
        self.assertEqual(self.run_async(go()), [("signaled", 15)] * 20)

    def test_a_command_that_ends_at_once_keeps_its_output(self):
        """A command's exit comes on init's control socket, its start (the sync socket's EOF) on
        another: a command that writes and exits at once may be reported ended before the daemon
        has seen it start. Its output must still come out, every time: 100 commands, four at a
        time, each checked byte for byte (stdout and stderr)."""
        async def client_runs(first):
            c = await self.client()
            results = []
            for i in range(first, first + 25):
                out, err, outcome, _ = await c.run(self.sid, ["sh", "-c", f"echo out{i}; echo err{i} >&2"])
                results.append((out.decode(), err.decode(), outcome["outcome"]))
            await c.close()
            return results

        async def go():
            # Four clients at once, each with its own commands' events.
            parts = await asyncio.gather(*(client_runs(first) for first in (0, 25, 50, 75)))
            return [result for part in parts for result in part]
        self.assertEqual(self.run_async(go()), [(f"out{i}\n", f"err{i}\n", "exited") for i in range(100)])

    def test_a_missing_program_is_a_setup_failure(self):
        async def go():
            c = await self.client()
            result = await c.run(self.sid, ["/no/such/program"])
            await c.close()
            return result
        _, err, outcome, _ = self.run_async(go())
        self.assertEqual(outcome["outcome"], "setup_failed")
        self.assertEqual(outcome["errno"], "ENOENT")

    def test_a_setup_failure_is_one_every_time(self):
        """The child says why it failed on the sync socket and exits; init reports the exit on
        its control socket, which the daemon may read first. The outcome must wait for the first:
        100 missing programs, four clients at a time, each a setup failure with ENOENT, beside
        100 commands that exit 127 by themselves (an exit, not a setup failure)."""
        async def client_runs(first):
            c = await self.client()
            results = []
            for i in range(first, first + 25):
                argv = ["/no/such/program"] if i % 2 == 0 else ["sh", "-c", "exit 127"]
                _, _, outcome, _ = await c.run(self.sid, argv)
                results.append((outcome["outcome"], outcome.get("errno"), outcome.get("exit_code")))
            await c.close()
            return results

        async def go():
            parts = await asyncio.gather(*(client_runs(first) for first in (0, 25, 50, 75)))
            return [result for part in parts for result in part]
        expected = [("setup_failed", "ENOENT", None) if i % 2 == 0 else ("exited", None, 127) for i in range(100)]
        self.assertEqual(self.run_async(go()), expected)

    def test_json_output_mode_and_the_command_record(self):
        async def go():
            c = await self.client()
            result = await c.run(self.sid, ["printf", "\\x00\\xff"], output="json")
            await c.close()
            return result
        out, _, outcome, command = self.run_async(go())
        self.assertEqual(out, b"\x00\xff")
        status, record = self.daemon.http("GET", f"/v1/sandboxes/{self.sid}/commands/{command}", self.owner)
        self.assertEqual(status, 200)
        self.assertEqual(record["state"], "exited")
        self.assertEqual(record["outcome"]["outcome"], "exited")
        self.assertEqual(record["argv"], ["printf", "\\x00\\xff"])

    def test_a_pty_command_sees_a_terminal_of_the_asked_size(self):
        async def go():
            c = await self.client()
            result = await c.run(self.sid, ["sh", "-c", "tty; stty size"], pty={"rows": 40, "cols": 120})
            await c.close()
            return result
        out, _, outcome, _ = self.run_async(go())
        self.assertIn(b"/dev/pts/", out)
        self.assertIn(b"40 120", out)

    def test_resume_after_reconnect_replays_what_was_missed(self):
        async def go():
            c = await self.client()
            reply = await c.request("exec", sandbox=self.sid, argv=["sh", "-c", "for i in 1 2 3 4 5; do echo $i; sleep 0.2; done"])
            command = reply["result"]["command"]
            first = await c.next_event()
            self.assertEqual(first["seq"], 1)
            await c.close()  # the client goes away mid-stream
            await asyncio.sleep(1.5)
            c2 = await self.client()
            reply = await c2.request("attach", command=command, after_seq=first["seq"])
            self.assertTrue(reply["ok"], reply)
            out, seqs = first["data"], [first["seq"]]
            while True:
                event = await c2.next_event()
                if event.get("event") == "exit":
                    seqs.append(event["seq"])
                    break
                out += event["data"]
                seqs.append(event["seq"])
            await c2.close()
            return out, seqs
        out, seqs = self.run_async(go())
        self.assertEqual(out, b"1\n2\n3\n4\n5\n")
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)))

    def test_a_slow_reader_slows_the_command_not_the_daemon(self):
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner, max_queue=1, read_limit=2 ** 16)
            reply = await c.request("exec", sandbox=self.sid, argv=["yes"])
            command = reply["result"]["command"]
            await asyncio.sleep(3)  # read nothing
            rss_before = daemon_rss(self.daemon.proc.pid)
            await asyncio.sleep(2)
            rss_after = daemon_rss(self.daemon.proc.pid)
            c2 = await self.client()
            await c2.request("attach", command=command, after_seq=10 ** 9)
            self.assertTrue((await c2.request("signal", command=command, signal="KILL"))["ok"])
            await c.ws.close()
            await c2.close()
            return rss_before, rss_after
        before, after = self.run_async(go())
        # The daemon stopped reading `yes`: its memory did not grow with the output.
        self.assertLess(after - before, 16 << 20, (before, after))


class Files(DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.owner = mint("acme", cls.secret, "heidi")
        status, sandbox = cls.daemon.http("POST", "/v1/sandboxes", cls.owner, {})
        assert status == 201, sandbox
        cls.sid = sandbox["id"]

    def fs(self, method, op, token=None, body=None, **query):
        from urllib.parse import urlencode
        return self.daemon.http(method, f"/v1/sandboxes/{self.sid}/fs/{op}?{urlencode(query)}",
                                token or self.owner, raw=body)

    def test_write_read_list_and_the_owner_inside(self):
        status, reply = self.fs("PUT", "write", body=b"data\x00\x01", path="/home/agent/f.bin")
        self.assertEqual((status, reply["size"]), (200, 6))
        status, data = self.fs("GET", "read", path="/home/agent/f.bin")
        self.assertEqual((status, data), (200, b"data\x00\x01"))
        status, listing = self.fs("GET", "list", path="/home/agent")
        self.assertIn("f.bin", [e["name"] for e in listing["entries"]])

        async def owner():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            out, _, _, _ = await c.run(self.sid, ["stat", "-c", "%U", "/home/agent/f.bin"])
            await c.close()
            return out
        self.assertEqual(self.run_async(owner()), b"agent\n")

    def test_paths_never_leave_the_sandbox(self):
        with open("/etc/hostname", "rb") as f:
            host_hostname = f.read()
        status, data = self.fs("GET", "read", path="/../../../etc/hostname")
        self.assertEqual(status, 200)
        self.assertEqual(data.strip(), b"corral")
        self.assertNotEqual(data, host_hostname)
        for path in ["/proc/1/environ", "/proc/self/status", "/sys/kernel/notes", "/dev/zero"]:
            with self.subTest(path=path):
                status, reply = self.fs("GET", "read", path=path)
                self.assertIn(status, (400, 403, 404), reply)
        status, reply = self.fs("GET", "read", path="relative/path")
        self.assertEqual(status, 400)

    def test_another_user_cannot_touch_the_files(self):
        status, reply = self.fs("GET", "read", token=self.token("ivan"), path="/etc/hostname")
        self.assertEqual((status, reply["error"]["code"]), (404, "not_found"))


def daemon_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


if __name__ == "__main__":
    unittest.main()
