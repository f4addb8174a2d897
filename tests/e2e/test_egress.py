"""corrald end to end: the egress proxy on each sandbox's loopback.

The "internet" is tests/fixtures/fake_internet.py: a network namespace of this test's own with
public-looking hosts (203.0.113.10 and .11), a private one (10.77.0.5) and a cloud metadata
server (169.254.169.254), each answering /whoami with the address that served it, plus a DNS
server on this host's loopback whose answer for rebind.test changes between two lookups. corrald
connects out from that namespace (egress.netns) and resolves through that server
(egress.resolver): no traffic leaves the machine.

Each denial has its positive control beside it, and each decision is checked in the sandbox's
event log (GET /v1/sandboxes/ID/events?type=egress) as well as in what the servers saw.
"""
import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import unittest

from corral_e2e import CORRAL, DaemonTestCase, WsClient, metric_delta, operator_key_file, relay_config

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import scripted_model  # noqa: E402
from fake_internet import (FakeInternet, METADATA_ADDRESS, NPM_GREETING,  # noqa: E402
                           OTHER_PUBLIC_ADDRESS, PRIVATE_ADDRESS, PUBLIC_ADDRESS, PYTHON_GREETING)

CA_IN_SANDBOX = "/home/agent/ca.pem"


class Egress(DaemonTestCase):
    inet = None

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("the fake internet and corrald need root")
        cls.inet = FakeInternet().start()
        # [egress] after the [sandbox] keys of the daemon's config.
        cls.extra_config = f"""
[egress]
enabled = true
netns = "{cls.inet.netns_path}"
resolver = "{cls.inet.dns_address}"
ports = [443, 80, 8080]
allowed_ports = [443, 80, 8080]
allowed_cidrs = ["10.0.0.0/8", "203.0.113.0/24", "169.254.0.0/16", "127.0.0.0/8"]
max_connections = 4
bandwidth = "2M"
"""
        try:
            super().setUpClass()
        except BaseException:
            cls.inet.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.inet.stop()

    # --- helpers ---

    def sandbox(self, sub, egress=None):
        token = self.token(sub)
        body = {"egress": egress} if egress is not None else {}
        sandbox = self.create_sandbox(token, **body)
        sid = sandbox["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", token)
        with open(self.inet.ca_cert_path, "rb") as f:
            ca = f.read()
        out, err, outcome = self.run_in(token, sid, ["sh", "-c", f"cat > {CA_IN_SANDBOX}"], stdin=ca)
        self.assertEqual(outcome.get("exit_code"), 0, (out, err, outcome))
        return token, sid, sandbox

    def run_in(self, token, sid, argv, stdin=None, env=None):
        async def go():
            client = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                fields = {"env": env} if env else {}
                return await client.run(sid, argv, stdin=stdin, **fields)
            finally:
                await client.close()

        out, err, outcome, _ = self.run_async(go())
        return out.decode(errors="replace"), err.decode(errors="replace"), outcome

    def curl(self, token, sid, *args):
        """curl inside the sandbox through its proxy: (HTTP status, body, stderr). The status is
        the proxy's answer to CONNECT when it refused the tunnel (curl shows no body then)."""
        out, err, outcome = self.run_in(token, sid, [
            "curl", "-sS", "--max-time", "20", "--cacert", CA_IN_SANDBOX,
            "-w", "\n%{http_code} %{http_connect}", *args])
        body, _, codes = out.rpartition("\n")
        status, connect = (int(c) for c in codes.split())
        return status or connect, body.rstrip("\n"), err

    def egress_events(self, token, sid, after=0):
        status, page = self.daemon.http("GET", f"/v1/sandboxes/{sid}/events?type=egress&after_seq={after}", token)
        self.assertEqual(status, 200, page)
        return [e["data"] for e in page["events"]]

    def wait_event(self, token, sid, predicate, what):
        deadline = time.time() + 15
        while time.time() < deadline:
            events = [e for e in self.egress_events(token, sid) if predicate(e)]
            if events:
                return events[-1]
            time.sleep(0.1)
        self.fail(f"no egress event {what}: {self.egress_events(token, sid)}")

    # --- the tests ---

    def test_proxy_is_announced_and_no_rules_means_nothing_leaves(self):
        token, sid, sandbox = self.sandbox("quiet")
        before = len(self.inet.connections(PUBLIC_ADDRESS))
        # The config's defaults: no domains, no ranges (nothing built in), the ports it names.
        self.assertEqual(sandbox["egress"], {"domains": [], "ports": [443, 80, 8080], "cidrs": []})
        out, _, _ = self.run_in(token, sid, ["sh", "-c", "echo $HTTPS_PROXY $http_proxy $NO_PROXY"])
        self.assertEqual(out.strip(), "http://127.0.0.1:7882 http://127.0.0.1:7882 localhost,127.0.0.1,::1")
        status, body, _ = self.curl(token, sid, "https://example.test/whoami")
        self.assertEqual(status, 403, body)
        event = self.wait_event(token, sid, lambda e: e["host"] == "example.test", "for example.test")
        self.assertEqual((event["decision"], event["reason"]), ("denied", "domain"))
        self.assertEqual(len(self.inet.connections(PUBLIC_ADDRESS)), before)
        # Positive control: the same request once a rule names the domain.
        status, _ = self.daemon.http("PUT", f"/v1/sandboxes/{sid}/egress", token, {"domains": ["example.test"]})
        self.assertEqual(status, 200)
        status, body, _ = self.curl(token, sid, "https://example.test/whoami")
        self.assertEqual((status, body), (200, f"served-by {PUBLIC_ADDRESS}"))

    def test_allowed_domain_over_https_and_http_with_its_event(self):
        token, sid, _ = self.sandbox("web", {"domains": ["*.example.test", "example.test"]})
        status, body, err = self.curl(token, sid, "https://example.test/whoami")
        self.assertEqual((status, body), (200, f"served-by {PUBLIC_ADDRESS}"), err)
        event = self.wait_event(token, sid, lambda e: e["method"] == "CONNECT" and e["decision"] == "allowed",
                                "for the CONNECT")
        self.assertEqual((event["host"], event["port"], event["address"], event["rule"]),
                         ("example.test", 443, PUBLIC_ADDRESS, "example.test"))
        self.assertGreater(event["bytes_up"], 0)
        self.assertGreater(event["bytes_down"], 0)
        self.assertIn("duration_ms", event)
        # Plain HTTP is forwarded (one request per connection), the Host header kept.
        status, body, err = self.curl(token, sid, "http://www.example.test:8080/whoami")
        self.assertEqual((status, body), (200, f"served-by {PUBLIC_ADDRESS}"), err)
        seen = [r for r in self.inet.requests(PUBLIC_ADDRESS) if r["port"] == 8080]
        self.assertTrue(seen, self.inet.requests(PUBLIC_ADDRESS))
        self.assertEqual(seen[-1]["host"], "www.example.test:8080")
        self.wait_event(token, sid, lambda e: e["method"] == "GET" and e["decision"] == "allowed", "for the GET")

    def test_denied_domain_and_port_name_the_rule(self):
        token, sid, _ = self.sandbox("deny", {"domains": ["example.test"], "ports": [443, 8080]})
        before = len(self.inet.connections(OTHER_PUBLIC_ADDRESS))
        metrics_before = self.daemon.metrics()
        # The refusal's text names the rules (curl shows it for a plain HTTP request).
        status, body, _ = self.curl(token, sid, "http://other.test:8080/whoami")
        self.assertEqual(status, 403)
        self.assertIn("other.test", body)
        self.assertIn("domains [example.test], ports [443, 8080]", body)
        status, _, err = self.curl(token, sid, "-v", "https://other.test/whoami")
        self.assertEqual(status, 403)
        self.assertIn("X-Corral-Egress: denied; reason=domain", err)
        status, body, _ = self.curl(token, sid, "http://example.test/whoami")
        self.assertEqual(status, 403)
        self.assertIn("port 80", body)
        # Positive control: the allowed name and ports pass.
        status, body, _ = self.curl(token, sid, "https://example.test/whoami")
        self.assertEqual((status, body), (200, f"served-by {PUBLIC_ADDRESS}"))
        status, body, _ = self.curl(token, sid, "http://example.test:8080/whoami")
        self.assertEqual((status, body), (200, f"served-by {PUBLIC_ADDRESS}"))
        self.assertEqual(len(self.inet.connections(OTHER_PUBLIC_ADDRESS)), before)
        reasons = {(e["host"], e["reason"]) for e in self.egress_events(token, sid) if e["decision"] == "denied"}
        self.assertIn(("other.test", "domain"), reasons)
        self.assertIn(("example.test", "port"), reasons)
        # /metrics: each decision under its reason (a domain rule allowed the two that passed),
        # and the bytes each way exactly those of their events (written when they closed).
        deadline = time.time() + 15
        while len(allowed := [e for e in self.egress_events(token, sid) if e["decision"] == "allowed"]) < 2:
            self.assertLess(time.time(), deadline, self.egress_events(token, sid))
            time.sleep(0.1)
        after = self.daemon.metrics()
        decisions = "corral_egress_decisions_total"
        self.assertEqual(metric_delta(metrics_before, after, decisions, decision="denied", reason="domain"), 2)
        self.assertEqual(metric_delta(metrics_before, after, decisions, decision="denied", reason="port"), 1)
        self.assertEqual(metric_delta(metrics_before, after, decisions, decision="allowed", reason="domain"), 2)
        self.assertEqual(metric_delta(metrics_before, after, decisions), 5)
        self.assertEqual(metric_delta(metrics_before, after, "corral_egress_bytes_total", direction="up"),
                         sum(e["bytes_up"] for e in allowed))
        self.assertEqual(metric_delta(metrics_before, after, "corral_egress_bytes_total", direction="down"),
                         sum(e["bytes_down"] for e in allowed))
        self.assertGreater(sum(e["bytes_down"] for e in allowed), 0)

    def test_private_metadata_and_loopback_addresses_are_refused_after_resolution(self):
        token, sid, _ = self.sandbox("private", {"domains": ["*"]})
        private_before = len(self.inet.connections(PRIVATE_ADDRESS))
        metadata_before = len(self.inet.connections(METADATA_ADDRESS))
        for name, address in (("private.test", PRIVATE_ADDRESS), ("metadata.test", METADATA_ADDRESS),
                              ("localhost-alias.test", "127.0.0.1")):
            with self.subTest(name=name):
                status, body, _ = self.curl(token, sid, f"http://{name}/whoami")
                self.assertEqual(status, 403, body)
                self.assertIn(address, body)
                event = self.wait_event(token, sid, lambda e, n=name: e["host"] == n, f"for {name}")
                self.assertEqual((event["decision"], event["reason"], event["address"]),
                                 ("denied", "private_address", address))
        # Literal addresses need a range, and the metadata address is refused as a literal too.
        status, body, _ = self.curl(token, sid, f"http://{METADATA_ADDRESS}/latest/meta-data/")
        self.assertEqual(status, 403, body)
        self.assertEqual(len(self.inet.connections(PRIVATE_ADDRESS)), private_before)
        self.assertEqual(len(self.inet.connections(METADATA_ADDRESS)), metadata_before)
        # Positive control: a public name through the same rule.
        status, body, _ = self.curl(token, sid, "http://other.test/whoami")
        self.assertEqual((status, body), (200, f"served-by {OTHER_PUBLIC_ADDRESS}"))

    def test_a_range_that_names_a_private_host_allows_it(self):
        token, sid, _ = self.sandbox("mirror", {"domains": ["private.test"], "cidrs": ["10.77.0.0/16"]})
        status, body, _ = self.curl(token, sid, "http://private.test/whoami")
        self.assertEqual((status, body), (200, f"served-by {PRIVATE_ADDRESS}"))
        status, body, _ = self.curl(token, sid, f"http://{PRIVATE_ADDRESS}/whoami")
        self.assertEqual((status, body), (200, f"served-by {PRIVATE_ADDRESS}"))
        # The range names 10.77/16, not the metadata server.
        status, body, _ = self.curl(token, sid, f"http://{METADATA_ADDRESS}/whoami")
        self.assertEqual(status, 403, body)

    def test_dns_rebinding_cannot_switch_the_address(self):
        token, sid, _ = self.sandbox("rebind", {"domains": ["rebind.test"]})
        self.inet.dns.reset_query_counts()
        metadata_before = len(self.inet.connections(METADATA_ADDRESS))
        # First lookup: the public address, which the proxy checks and connects to.
        status, body, _ = self.curl(token, sid, "http://rebind.test/whoami")
        self.assertEqual((status, body), (200, f"served-by {PUBLIC_ADDRESS}"))
        # Every later lookup answers the metadata address: refused, not connected.
        status, body, _ = self.curl(token, sid, "http://rebind.test/whoami")
        self.assertEqual(status, 403, body)
        self.assertIn(METADATA_ADDRESS, body)
        self.assertEqual(len(self.inet.connections(METADATA_ADDRESS)), metadata_before)
        # One lookup per connection: no second resolution between check and connect.
        self.assertEqual(self.inet.dns.query_count("rebind.test", "A"), 2, self.inet.dns.queries())

    def test_direct_connections_bypassing_the_proxy_fail(self):
        token, sid, _ = self.sandbox("bypass", {"domains": ["*"], "cidrs": ["203.0.113.0/24"]})
        before = len(self.inet.connections(PUBLIC_ADDRESS))
        out, err, outcome = self.run_in(token, sid, [
            "curl", "-sS", "--noproxy", "*", "--max-time", "5", f"http://{PUBLIC_ADDRESS}/whoami"])
        self.assertNotEqual(outcome.get("exit_code"), 0, (out, err))
        self.assertNotIn("served-by", out)
        out, err, outcome = self.run_in(token, sid, [
            "python3", "-c", "import socket; socket.create_connection(('203.0.113.10', 80), timeout=5)"])
        self.assertNotEqual(outcome.get("exit_code"), 0, (out, err))
        self.assertIn("Network is unreachable", err)
        self.assertEqual(len(self.inet.connections(PUBLIC_ADDRESS)), before)
        # Positive control: the same address through the proxy, which a range allows.
        status, body, _ = self.curl(token, sid, f"http://{PUBLIC_ADDRESS}/whoami")
        self.assertEqual((status, body), (200, f"served-by {PUBLIC_ADDRESS}"))

    def test_rules_changed_at_runtime_apply_to_the_next_connection(self):
        token, sid, _ = self.sandbox("runtime", {"domains": ["example.test"], "ports": [443]})
        status, _, _ = self.curl(token, sid, "https://other.test/whoami")
        self.assertEqual(status, 403)
        status, rules = self.daemon.http("PUT", f"/v1/sandboxes/{sid}/egress", token,
                                         {"domains": ["example.test", "other.test"]})
        self.assertEqual(status, 200, rules)
        self.assertEqual(rules["domains"], ["example.test", "other.test"])
        self.assertEqual(rules["ports"], [443])  # a field left out keeps its value, not the default
        status, body, _ = self.curl(token, sid, "https://other.test/whoami")
        self.assertEqual((status, body), (200, f"served-by {OTHER_PUBLIC_ADDRESS}"))
        status, got = self.daemon.http("GET", f"/v1/sandboxes/{sid}/egress", token)
        self.assertEqual((status, got), (200, rules))
        # Taken away again: refused again, without a restart.
        status, _ = self.daemon.http("PUT", f"/v1/sandboxes/{sid}/egress", token, {"domains": []})
        self.assertEqual(status, 200)
        status, _, _ = self.curl(token, sid, "https://example.test/whoami")
        self.assertEqual(status, 403)
        # The rules survive a stop and start.
        status, _ = self.daemon.http("PUT", f"/v1/sandboxes/{sid}/egress", token, {"domains": ["other.test"]})
        self.assertEqual(status, 200)
        for op in ("stop", "start"):
            status, row = self.daemon.http("POST", f"/v1/sandboxes/{sid}/{op}", token)
            self.assertEqual(status, 200, row)
        self.assertEqual(row["egress"]["domains"], ["other.test"])
        self.run_in(token, sid, ["sh", "-c", f"test -f {CA_IN_SANDBOX}"])
        status, body, _ = self.curl(token, sid, "https://other.test/whoami")
        self.assertEqual((status, body), (200, f"served-by {OTHER_PUBLIC_ADDRESS}"))

    def test_a_restarted_daemon_serves_the_proxy_of_running_sandboxes(self):
        token, sid, _ = self.sandbox("restart", {"domains": ["example.test"]})
        status, body, _ = self.curl(token, sid, "https://example.test/whoami")
        self.assertEqual(status, 200, body)
        self.daemon.stop()
        self.daemon.start()
        # The sandbox kept running; the new daemon accepts on its listener with its stored rules.
        status, body, _ = self.curl(token, sid, "https://example.test/whoami")
        self.assertEqual((status, body), (200, f"served-by {PUBLIC_ADDRESS}"))
        status, _, _ = self.curl(token, sid, "https://other.test/whoami")
        self.assertEqual(status, 403)

    def test_rules_outside_the_caps_are_refused_naming_them(self):
        token = self.token("capped", limits={"egress": {"domains": ["*.example.test"], "ports": [443]}})
        for body, fragment in (({"domains": ["evil.test"]}, "evil.test"),
                               ({"domains": ["www.example.test"], "ports": [80]}, "80"),
                               ({"cidrs": ["192.168.0.0/16"]}, "192.168.0.0/16"),
                               ({"domains": ["a.test"], "hosts": []}, "hosts")):
            with self.subTest(body=body):
                status, error = self.daemon.http("POST", "/v1/sandboxes", token, {"egress": body})
                self.assertIn(status, (400, 403), error)
                self.assertIn(fragment, error["error"]["message"])
        # Positive control: within the token's caps; and the defaults are narrowed to them.
        sandbox = self.create_sandbox(token, egress={"domains": ["www.example.test"], "ports": [443]})
        self.daemon.http("DELETE", f"/v1/sandboxes/{sandbox['id']}", token)
        sandbox = self.create_sandbox(token)
        self.assertEqual(sandbox["egress"]["ports"], [443])
        status, error = self.daemon.http("PUT", f"/v1/sandboxes/{sandbox['id']}/egress", token,
                                         {"domains": ["*"]})
        self.assertEqual(status, 403, error)
        self.daemon.http("DELETE", f"/v1/sandboxes/{sandbox['id']}", token)

    def test_the_cli_sets_rules_and_shows_decisions(self):
        token = self.token("cli")
        env = dict(os.environ, CORRAL_URL=f"http://127.0.0.1:{self.daemon.port}", CORRAL_TOKEN=token)

        def corral(*args):
            r = subprocess.run([CORRAL, *args], env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, (args, r.stdout, r.stderr))
            return r.stdout

        sid = corral("sandbox", "create", "--allow-domain", "example.test", "--allow-port", "443").strip()
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", token)
        self.assertEqual(json.loads(corral("sandbox", "egress", sid)),
                         {"domains": ["example.test"], "ports": [443], "cidrs": []})
        changed = json.loads(corral("sandbox", "egress", sid, "--allow-domain", "example.test,other.test"))
        self.assertEqual(changed, {"domains": ["example.test", "other.test"], "ports": [443], "cidrs": []})
        self.assertEqual(json.loads(corral("sandbox", "egress", sid, "--none"))["domains"], [])
        out = corral("exec", sid, "--", "sh", "-c", "curl -sS http://example.test/ || true")
        self.assertIn("corral egress: denied: port 80", out)
        lines = corral("sandbox", "events", sid, "--type", "egress").splitlines()
        self.assertEqual(len(lines), 1, lines)
        self.assertRegex(lines[0], r"^\d+ egress denied GET example.test:80 reason=port: port 80 is not")
        seq = lines[0].split()[0]
        self.assertEqual(corral("sandbox", "events", sid, "--type", "egress", "--after", seq), "")

    def test_decisions_stream_live_to_a_watching_websocket(self):
        token, sid, _ = self.sandbox("watch", {"domains": ["example.test"]})
        other = self.token("watch-stranger")

        async def go():
            client = await WsClient.connect(self.daemon.ws_url(), token)
            stranger = await WsClient.connect(self.daemon.ws_url(), other)
            try:
                # Another user's sandbox is not found, like one that does not exist.
                reply = await stranger.request("sandbox.watch", sandbox=sid)
                self.assertEqual(reply["error"]["code"], "not_found", reply)
                reply = await client.request("sandbox.watch", sandbox=sid)
                self.assertTrue(reply["ok"], reply)
                # The replay: what happened before, oldest first (the sandbox's start among it).
                replayed = []
                while not any(e.get("type") == "sandbox.started" for e in replayed):
                    replayed.append(await client.next_event(10))
                self.assertEqual([e["event"] for e in replayed], ["sandbox"] * len(replayed))
                seqs = [e["seq"] for e in replayed]
                self.assertEqual(seqs, sorted(seqs))
                # Live: a request the sandbox makes now arrives as it is decided. (The commands run
                # over another connection, so only this stream's events come here.)
                status, _, _ = await asyncio.to_thread(self.curl, token, sid, "https://other.test/whoami")
                self.assertEqual(status, 403)
                while True:
                    event = await client.next_event(10)
                    self.assertGreater(event["seq"], seqs[-1])
                    if event["type"] == "egress":
                        break
                self.assertEqual((event["sandbox"], event["data"]["host"], event["data"]["decision"]),
                                 (sid, "other.test", "denied"))
                reply = await client.request("sandbox.unwatch", sandbox=sid)
                self.assertTrue(reply["ok"], reply)
                reply = await client.request("sandbox.unwatch", sandbox=sid)
                self.assertEqual(reply["error"]["code"], "conflict", reply)
            finally:
                await client.close()
                await stranger.close()

        self.run_async(go())

    def test_connection_limit(self):
        token, sid, _ = self.sandbox("many", {"domains": ["example.test"]})
        # Five slow CONNECTs held open at once; the limit is four.
        script = (
            "import socket, time\n"
            "held = []\n"
            "for i in range(5):\n"
            "    s = socket.create_connection(('127.0.0.1', 7882))\n"
            "    s.sendall(b'CONNECT example.test:443 HTTP/1.1\\r\\nHost: example.test:443\\r\\n\\r\\n')\n"
            "    print(s.recv(200).split(b'\\r\\n')[0].decode(), flush=True)\n"
            "    held.append(s)\n"
        )
        out, err, _ = self.run_in(token, sid, ["python3", "-c", script])
        lines = out.splitlines()
        self.assertEqual(lines[:4], ["HTTP/1.1 200 Connection established"] * 4, (out, err))
        self.assertEqual(lines[4], "HTTP/1.1 429 Too Many Requests", (out, err))
        self.wait_event(token, sid, lambda e: e.get("reason") == "connections", "for the fifth connection")

    def test_bandwidth_is_limited_per_sandbox(self):
        # egress.bandwidth = 2 MiB/s with a burst of one second's worth: 6 MiB cannot arrive in
        # under 2 s through the proxy. Only a lower bound is asserted (a slow machine cannot fail it).
        with open(os.path.join(self.inet.docroot, "six.bin"), "wb") as f:
            f.truncate(6 << 20)
        token, sid, _ = self.sandbox("bandwidth", {"domains": ["example.test"]})
        out, err, outcome = self.run_in(token, sid, [
            "curl", "-sS", "-o", "/dev/null", "--cacert", CA_IN_SANDBOX, "-w", "%{size_download} %{time_total}",
            "https://example.test/six.bin"])
        self.assertEqual(outcome.get("exit_code"), 0, (out, err))
        size, seconds = out.split()
        self.assertEqual(int(size), 6 << 20)
        self.assertGreaterEqual(float(seconds), 1.9, out)
        event = self.wait_event(token, sid, lambda e: e["decision"] == "allowed", "for the download")
        self.assertGreater(event["bytes_down"], 6 << 20)
        self.assertGreaterEqual(event["duration_ms"], 1900)
        # Control: the same file straight from the namespace the proxy connects from is not held back.
        r = self.inet.run_in_netns(["curl", "-sS", "-o", "/dev/null", "--cacert", self.inet.ca_cert_path,
                                    "--resolve", f"example.test:443:{PUBLIC_ADDRESS}", "-w", "%{time_total}",
                                    "https://example.test/six.bin"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertLess(float(r.stdout), 1.9)

    def test_git_npm_and_pip_through_the_proxy(self):
        token, sid, _ = self.sandbox("tools", {"domains": ["git.test", "registry.test", "pypi.test"]})
        out, err, outcome = self.run_in(token, sid, [
            "git", "-c", f"http.sslCAInfo={CA_IN_SANDBOX}", "clone", "-q", "https://git.test/repo.git",
            "/home/agent/repo"])
        self.assertEqual(outcome.get("exit_code"), 0, (out, err))
        out, _, _ = self.run_in(token, sid, ["git", "-C", "/home/agent/repo", "rev-parse", "HEAD"])
        self.assertEqual(out.strip(), self.inet.git_head)

        out, err, outcome = self.run_in(token, sid, [
            "sh", "-c", "mkdir -p /home/agent/app && cd /home/agent/app && "
            f"npm install corral-hello --registry https://registry.test/ --cafile {CA_IN_SANDBOX} "
            "--no-audit --no-fund --no-update-notifier --loglevel error && "
            "node -e 'console.log(require(\"corral-hello\"))'"])
        self.assertEqual(outcome.get("exit_code"), 0, (out, err))
        self.assertEqual(out.strip().splitlines()[-1], NPM_GREETING)

        out, err, outcome = self.run_in(token, sid, [
            "sh", "-c", "python3 -m pip install -q --no-deps --no-cache-dir --target /home/agent/py "
            f"--index-url https://pypi.test/simple/ --cert {CA_IN_SANDBOX} corral-hello && "
            "PYTHONPATH=/home/agent/py python3 -c 'import corral_hello; print(corral_hello.GREETING)'"],
            env={"PIP_CONFIG_FILE": "/dev/null", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        self.assertEqual(outcome.get("exit_code"), 0, (out, err))
        self.assertEqual(out.strip().splitlines()[-1], PYTHON_GREETING)
        hosts = {e["host"] for e in self.egress_events(token, sid) if e["decision"] == "allowed"}
        self.assertEqual(hosts, {"git.test", "registry.test", "pypi.test"})



@unittest.skipUnless(shutil.which("claude"), "Claude Code is not installed (dist/install-deps.sh installs it)")
class ClaudeCodeWebFetch(DaemonTestCase):
    """Claude Code's own web tool (WebFetch) through the egress proxy: an agent session in a
    sandbox whose rules allow example.test fetches https://example.test/whoami (the page reaches
    the model, in the request WebFetch makes to digest it), and is refused other.test (the tool
    says so, nothing reaches other.test's server). Each attempt is an egress event.

    What a user sets up for WebFetch in a sandbox, in ~/.claude/settings.json: the CA of the
    fake internet (NODE_EXTRA_CA_CERTS in "env"), and skipWebFetchPreflight, since Claude Code
    otherwise asks api.anthropic.com whether a domain may be fetched, which no rule here allows.
    """
    inet = None

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("the fake internet and corrald need root")
        cls.upstream = scripted_model.serve({"turns": []}, port=0)
        cls.key_dir, key_file = operator_key_file("corral-e2e-webfetch-", "sk-ant-e2e-webfetch-operator-key")
        try:
            cls.inet = FakeInternet().start()
            cls.extra_config = relay_config(cls.upstream.port, key_file) + f"""
[egress]
enabled = true
netns = "{cls.inet.netns_path}"
resolver = "{cls.inet.dns_address}"
ports = [443]
"""
            super().setUpClass()
        except BaseException:
            cls.cleanup_fixtures()
            raise

    @classmethod
    def cleanup_fixtures(cls):
        cls.upstream.shutdown()
        cls.upstream.server_close()
        shutil.rmtree(cls.key_dir, ignore_errors=True)
        if cls.inet:
            cls.inet.stop()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.cleanup_fixtures()

    def write(self, token, sid, path, data):
        status, body = self.daemon.http("PUT", f"/v1/sandboxes/{sid}/fs/write?path={path}", token, raw=data)
        self.assertEqual(status, 200, body)

    def test_webfetch_reaches_an_allowed_domain_and_is_refused_another(self):
        token = self.token("fetcher", budget={"ai_usd": 5, "window": "day"})
        sid = self.create_sandbox(token, egress={"domains": ["example.test"], "ports": [443]})["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", token)
        with open(self.inet.ca_cert_path, "rb") as f:
            self.write(token, sid, CA_IN_SANDBOX, f.read())
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{sid}/fs/mkdir?path=/home/agent/.claude", token, raw=b"")
        self.assertEqual(status, 200, body)
        settings = {"skipWebFetchPreflight": True, "env": {"NODE_EXTRA_CA_CERTS": CA_IN_SANDBOX}}
        self.write(token, sid, "/home/agent/.claude/settings.json", json.dumps(settings).encode())
        self.inet.clear_logs()
        self.upstream.script = scripted_model.Script({"turns": [
            {"tool_use": {"name": "WebFetch", "input": {"url": "https://example.test/whoami",
                                                        "prompt": "What does the page say?"}}},
            {"tool_use": {"name": "WebFetch", "input": {"url": "https://other.test/whoami",
                                                        "prompt": "What does the page say?"}}},
            {"text": "fetched both"},
        ]})
        self.upstream.requests.clear()
        status, session = self.daemon.http("POST", f"/v1/sandboxes/{sid}/sessions", token,
                                           {"prompt": "fetch the two pages"})
        self.assertEqual(status, 201, session)

        async def until_result():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                reply = await c.request("session.attach", session=session["id"], after_seq=0)
                self.assertTrue(reply["ok"], reply)
                events = []
                while not any(e.get("kind") == "agent" and e["data"].get("type") == "result" for e in events):
                    events.append(await c.next_event(timeout=120))
                return events
            finally:
                await c.close()
        events = self.run_async(until_result())
        results = [block for e in events if e.get("kind") == "agent" and e["data"].get("type") == "user"
                   for block in e["data"]["message"]["content"] if block.get("type") == "tool_result"]
        self.assertEqual(len(results), 2, [e["data"] for e in events if e.get("kind") == "agent"
                                           and e["data"].get("type") in ("assistant", "result")])
        allowed, denied = results
        self.assertFalse(allowed.get("is_error"), allowed)
        self.assertTrue(denied.get("is_error"), denied)

        # The page reached the model: WebFetch hands it to a side request to digest.
        sent = json.dumps([r["body"] for r in self.upstream.requests])
        self.assertIn(f"served-by {PUBLIC_ADDRESS}", sent)
        self.assertNotIn(f"served-by {OTHER_PUBLIC_ADDRESS}", sent)
        # The servers' own logs: example.test was asked, other.test never.
        self.assertTrue(self.inet.requests(PUBLIC_ADDRESS), "example.test saw no request")
        self.assertEqual(self.inet.requests(OTHER_PUBLIC_ADDRESS), [])
        # And each attempt is an event, with the rule or the reason.
        status, page = self.daemon.http("GET", f"/v1/sandboxes/{sid}/events?type=egress", token)
        self.assertEqual(status, 200, page)
        decisions = {(e["data"]["host"], e["data"]["decision"]) for e in page["events"]}
        self.assertIn(("example.test", "allowed"), decisions)
        self.assertIn(("other.test", "denied"), decisions)
        self.assertNotIn(("other.test", "allowed"), decisions)
        self.ws_close(token, session["id"])

    def ws_close(self, token, session_id):
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                return await c.request("session.close", session=session_id)
            finally:
                await c.close()
        reply = self.run_async(go())
        self.assertTrue(reply["ok"], reply)

if __name__ == "__main__":
    unittest.main()
