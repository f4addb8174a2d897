"""corrald end to end: secrets brokered at the egress proxy (issue 21, THREATS 45).

The fake internet (tests/fixtures/fake_internet.py) serves, on 203.0.113.10 (git.test,
registry.test), a private npm registry and a private git repository that open only to its private
token (inet.private_token, "fake-private-" and 32 hex digits), and every one of its hosts logs
whether a request held that token ("token_seen"). The token is stored as two secrets of a user
(GIT_TOKEN bound to git.test as basic auth, NPM_TOKEN bound to registry.test under /private/npm/
as a bearer token); a sandbox that names them runs real git and npm against those hosts. The
daemon trusts the fake internet's CA for the bound hosts (secrets.ca_file); the sandbox trusts only
its image's CAs and corral's.

What is checked: git push and npm install work with the secrets; inside the sandbox the value is
nowhere (environment, files, the memory of every process root there can read: a scan for the
token's shape, with a decoy of the same shape planted as its positive control); a request to a
host a secret is not bound to, to a path outside its binding, over plain HTTP, or by address,
never carries it, even with the placeholder in it (each beside a request that does); a server
whose certificate does not verify is refused before the request goes; the value is never in an
answer or the daemon's log; a deleted secret stops at the next connection; a restarted daemon
still injects for a running sandbox.
"""
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

from corral_e2e import CORRAL, SECRETS, Daemon, DaemonTestCase, WsClient, mint

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from fake_internet import NPM_GREETING, OTHER_PUBLIC_ADDRESS, PUBLIC_ADDRESS, FakeInternet  # noqa: E402

TOKEN_SHAPE = r"fake-private-[0-9a-f]{32}"
DECOY = "fake-private-" + "0123456789abcdef" * 2

# Run as root inside the sandbox: every match of the token's shape in the environment and memory
# of every process, and in the files of the writable places; prints one JSON line.
SCAN = r"""
import json, os, re, sys
shape = re.compile(sys.argv[1].encode())
hits = {"environ": [], "memory": [], "files": []}
scanned = {"processes": 0, "regions": 0, "files": 0}
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    if pid == str(os.getpid()):
        continue
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            hits["environ"] += [m.decode() for m in shape.findall(f.read())]
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb", 0)
    except OSError:
        continue
    scanned["processes"] += 1
    for line in maps:
        address, perms = line.split()[:2]
        start, end = (int(x, 16) for x in address.split("-"))
        if "r" not in perms or end - start > (512 << 20):
            continue
        try:
            mem.seek(start)
            data = mem.read(end - start)
        except (OSError, ValueError, OverflowError):
            continue
        scanned["regions"] += 1
        hits["memory"] += [m.decode() for m in shape.findall(data)]
for top in ("/home", "/root", "/tmp", "/etc", "/run", "/var", "/opt", "/srv"):
    for root, dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(root, name)
            try:
                if not os.path.isfile(path) or os.path.islink(path) or os.path.getsize(path) > (64 << 20):
                    continue
                with open(path, "rb") as f:
                    found = shape.findall(f.read())
            except OSError:
                continue
            scanned["files"] += 1
            hits["files"] += [path + ": " + m.decode() for m in found]
print(json.dumps({"hits": hits, "scanned": scanned}))
"""

# The scan's positive control: a child of the scanner (so that Yama lets it read the child's
# memory) holding a decoy of the token's shape in its environment and memory.
SCAN_WITH_CHILD = r"""
import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "60"], env={"DECOY": sys.argv[2]})
time.sleep(0.2)
sys.argv = sys.argv[:2]
try:
    exec(compile(os.environ["SCAN"], "scan", "exec"))
finally:
    child.kill()
"""


class Secrets(DaemonTestCase):
    inet = None

    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("the fake internet and corrald need root")
        cls.inet = FakeInternet().start()
        SECRETS.add(cls.inet.private_token)  # never in any daemon's log
        cls.key_dir = tempfile.mkdtemp(prefix="corral-secrets-key-")
        cls.key_file = os.path.join(cls.key_dir, "secrets.key")
        key = base64.b64encode(os.urandom(32)).decode()
        SECRETS.add(key)
        fd = os.open(cls.key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key + "\n")
        cls.extra_config = f"""
[egress]
enabled = true
netns = "{cls.inet.netns_path}"
resolver = "{cls.inet.dns_address}"
ports = [443, 80]
allowed_ports = [443, 80]
allowed_cidrs = ["203.0.113.0/24"]

[secrets]
key_file = "{cls.key_file}"
ca_file = "{cls.inet.ca_cert_path}"
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
            subprocess.run(["rm", "-rf", cls.key_dir], check=False)

    # --- helpers ---

    def put_secret(self, token, name, bindings, value=None, expect=200):
        status, body = self.daemon.http("PUT", f"/v1/secrets/{name}", token,
                                        {"value": value or self.inet.private_token, "bindings": bindings})
        self.assertEqual(status, expect, body)
        self.assertNotIn(self.inet.private_token, json.dumps(body))
        return body

    def user_with_secrets(self, sub):
        token = self.token(sub)
        self.put_secret(token, "GIT_TOKEN", [{"hosts": ["git.test"], "basic_user": "x-access-token",
                                              "path_prefixes": ["/private/git/"]}])
        self.put_secret(token, "NPM_TOKEN", [{"hosts": ["registry.test"], "path_prefixes": ["/private/npm/"]}])
        return token

    def sandbox(self, token, secrets=None, **body):
        body.setdefault("egress", {"domains": ["git.test", "registry.test", "other.test", "unverified.test"],
                                   "cidrs": ["203.0.113.0/24"]})
        if secrets is not None:
            body["secrets"] = secrets
        sandbox = self.create_sandbox(token, **body)
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sandbox['id']}", token)
        return sandbox["id"]

    def run_in(self, token, sid, argv, stdin=None, env=None, user=None):
        async def go():
            client = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                fields = {"env": env} if env else {}
                if user:
                    fields["user"] = user
                return await client.run(sid, argv, stdin=stdin, **fields)
            finally:
                await client.close()

        out, err, outcome, _ = self.run_async(go())
        return out.decode(errors="replace"), err.decode(errors="replace"), outcome

    def sh(self, token, sid, script, **kwargs):
        out, err, outcome = self.run_in(token, sid, ["sh", "-c", script], **kwargs)
        self.assertEqual(outcome.get("exit_code"), 0, (script, out, err, outcome))
        return out

    def curl(self, token, sid, *args):
        """(status, body) of curl inside the sandbox, through its proxy."""
        out, err, _ = self.run_in(token, sid, ["sh", "-c", 'curl -sS --max-time 20 -w "\\n%{http_code}" "$@"',
                                               "curl", *args])
        body, _, status = out.rpartition("\n")
        return int(status or 0), body + err

    def token_seen(self, address):
        return [r for r in self.inet.requests(address) if r.get("token_seen")]

    def events(self, token, sid, kind):
        status, page = self.daemon.http("GET", f"/v1/sandboxes/{sid}/events?type={kind}", token)
        self.assertEqual(status, 200, page)
        return [e["data"] for e in page["events"]]

    # --- the tests ---

    def test_git_push_and_npm_install_with_secrets_the_sandbox_never_sees(self):
        token = self.user_with_secrets("pusher")
        sid = self.sandbox(token, ["GIT_TOKEN", "NPM_TOKEN"])
        self.inet.clear_logs()
        placeholders = dict(line.split("=", 1) for line in self.sh(
            token, sid, 'echo "GIT_TOKEN=$GIT_TOKEN"; echo "NPM_TOKEN=$NPM_TOKEN"').split())
        for name, value in placeholders.items():
            self.assertTrue(value.startswith("corral-placeholder-"), (name, value))

        # git: clone, commit and push over HTTPS, the credential the placeholder (what a
        # credential helper would give).
        before = self.inet.private_head()
        self.sh(token, sid, """
set -e
cd /home/agent
git -c credential.helper='!f() { echo username=x; echo "password=$GIT_TOKEN"; }; f' \
    clone -q https://git.test/private/git/repo.git work
cd work
echo pushed > pushed.txt
git add pushed.txt
git -c user.name=Agent -c user.email=agent@corral.test commit -q -m 'From the sandbox'
git push -q origin main
""")
        pushed = self.sh(token, sid, "git -C /home/agent/work rev-parse HEAD").strip()
        self.assertNotEqual(pushed, before)
        self.assertEqual(self.inet.private_head(), pushed)

        # npm: a private registry, the token in .npmrc as the placeholder's variable.
        out = self.sh(token, sid, """
set -e
mkdir -p /home/agent/app && cd /home/agent/app
printf '//registry.test/private/npm/:_authToken=${NPM_TOKEN}\\n' > .npmrc
npm install corral-hello --registry https://registry.test/private/npm/ \
    --no-audit --no-fund --no-update-notifier --loglevel error
node -e 'console.log(require("corral-hello"))'
""")
        self.assertEqual(out.strip().splitlines()[-1], NPM_GREETING)

        # The server saw the token, the events name the secrets and never hold the value.
        self.assertTrue(self.token_seen(PUBLIC_ADDRESS))
        secret_events = self.events(token, sid, "secret")
        self.assertEqual({(e["name"], e["host"]) for e in secret_events},
                         {("GIT_TOKEN", "git.test"), ("NPM_TOKEN", "registry.test")})
        self.assertIn("POST", {e["method"] for e in secret_events if e["name"] == "GIT_TOKEN"})
        egress = [e for e in self.events(token, sid, "egress") if e.get("tls") == "intercepted"]
        self.assertTrue(egress)
        status, page = self.daemon.http("GET", f"/v1/sandboxes/{sid}/events", token)
        self.assertNotIn(self.inet.private_token, json.dumps(page))

        # Nowhere inside: a decoy of the token's shape, in a file and in a live process's
        # environment and memory, is found (the scan works); the token is not.
        decoy = DECOY
        self.sh(token, sid, f"echo {decoy} > /home/agent/decoy.txt")
        sleeper_out = {}

        async def with_sleeper():
            client = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                reply = await client.request("exec", sandbox=sid, argv=["sleep", "60"], env={"DECOY": decoy})
                self.assertTrue(reply["ok"], reply)
                out, err, outcome = await self.run_async_scan(token, sid)
                sleeper_out.update(out=out, err=err, outcome=outcome)
                await client.request("signal", command=reply["result"]["command"], signal="KILL")
            finally:
                await client.close()

        self.run_async(with_sleeper())
        self.assertEqual(sleeper_out["outcome"].get("exit_code"), 0, sleeper_out)
        report = json.loads(sleeper_out["out"].strip().splitlines()[-1])
        hits, scanned = report["hits"], report["scanned"]
        self.assertIn(decoy, hits["environ"], report)
        self.assertIn(decoy, hits["memory"], report)
        self.assertTrue(any(h.endswith(decoy) for h in hits["files"]), report)
        self.assertGreater(scanned["processes"], 1, report)
        every = set(hits["environ"]) | set(hits["memory"]) | {h.rsplit(": ", 1)[1] for h in hits["files"]}
        self.assertNotIn(self.inet.private_token, every, report)

    async def run_async_scan(self, token, sid):
        client = await WsClient.connect(self.daemon.ws_url(), token)
        try:
            out, err, outcome, _ = await client.run(sid, ["python3", "-c", SCAN_WITH_CHILD, TOKEN_SHAPE, DECOY],
                                                    env={"SCAN": SCAN})
            return out.decode(errors="replace"), err.decode(errors="replace"), outcome
        finally:
            await client.close()

    def test_a_host_path_or_scheme_the_secret_is_not_bound_to_never_gets_it(self):
        token = self.user_with_secrets("leaker")
        sid = self.sandbox(token, ["NPM_TOKEN"])
        self.inet.clear_logs()
        auth = ["-H", "Authorization: Bearer $NPM_TOKEN", "-H", "X-Also: $NPM_TOKEN"]

        def curl_with_placeholder(url, *extra):
            out, err, _ = self.run_in(token, sid, [
                "sh", "-c", f'curl -sS --max-time 20 {" ".join(extra)} -H "Authorization: Bearer $NPM_TOKEN" '
                            f'-H "X-Also: $NPM_TOKEN" -w "\\n%{{http_code}}" {url}'])
            body, _, status = out.rpartition("\n")
            return int(status or 0), body + err

        # The positive control: the bound host and path get it, also in X-Also.
        status, body = curl_with_placeholder("https://registry.test/private/npm/corral-hello")
        self.assertEqual(status, 200, body)
        # Another host, with the placeholder: its echo shows the placeholder, never the value.
        # (A host no secret is bound to is a tunnel to the real server, whose CA the sandbox
        # does not have: -k.)
        status, body = curl_with_placeholder("https://other.test/echo", "-k")
        self.assertEqual(status, 200, body)
        self.assertIn("corral-placeholder-", body)
        self.assertNotIn(self.inet.private_token, body)
        # The bound host, a path outside the binding (echo shows what arrived).
        status, body = curl_with_placeholder("https://registry.test/echo", "-k")
        self.assertEqual(status, 200, body)
        self.assertIn("corral-placeholder-", body)
        self.assertNotIn(self.inet.private_token, body)
        # A path that climbs out of the prefix once the server resolves it.
        status, body = curl_with_placeholder("https://registry.test/private/npm/../../echo", "-k", "--path-as-is")
        self.assertNotIn(self.inet.private_token, body)
        # Plain HTTP to the bound host and path: never (it would go in clear).
        status, body = curl_with_placeholder("http://registry.test/private/npm/corral-hello")
        self.assertEqual(status, 401, body)
        # The bound host's address instead of its name (a tunnel: the sandbox cannot verify the
        # server, -k): not the host the secret is bound to.
        status, body = curl_with_placeholder(f"https://{PUBLIC_ADDRESS}/private/npm/corral-hello", "-k",
                                             "-H", "'Host: registry.test'")
        self.assertEqual(status, 401, body)
        # The bound name through CONNECT and the bound path, with a Host header naming another host.
        status, body = curl_with_placeholder("https://registry.test/private/npm/corral-hello", "-k",
                                             "-H", "'Host: other.test'")
        self.assertEqual(status, 401, body)

        seen = self.token_seen(PUBLIC_ADDRESS)
        self.assertEqual(len(seen), 1, seen)  # the control alone
        self.assertEqual(seen[0]["path"], "/private/npm/corral-hello")
        self.assertEqual(seen[0]["scheme"], "https")
        self.assertEqual(self.token_seen(OTHER_PUBLIC_ADDRESS), [])
        events = self.events(token, sid, "secret")
        self.assertEqual(len(events), 1, events)

        # A sandbox that names no secret: its placeholder variable is not even there.
        plain = self.sandbox(token)
        self.assertEqual(self.sh(token, plain, 'echo "[$NPM_TOKEN]"').strip(), "[]")
        status, _ = self.curl(token, plain, "-k", "https://registry.test/private/npm/corral-hello")
        self.assertEqual(status, 401)

    def test_a_server_that_keeps_the_connection_open_gets_each_request_with_the_secret(self):
        token = self.token("sticky")
        self.put_secret(token, "STICKY_TOKEN", [{"hosts": ["registry.test"], "path_prefixes": ["/private/sticky/"]}])
        sid = self.sandbox(token, ["STICKY_TOKEN"])
        self.inet.clear_logs()
        # One curl, three URLs: it reuses a connection unless the answer says it closes.
        out = self.sh(token, sid, "curl -sS --max-time 20 --http1.1 https://registry.test/private/sticky/a "
                                  "https://registry.test/private/sticky/b https://registry.test/private/sticky/c")
        self.assertEqual(out.split(), ["sticky", "a", "sticky", "b", "sticky", "c"], out)
        seen = [r["path"] for r in self.token_seen(PUBLIC_ADDRESS)]
        self.assertEqual(sorted(seen), ["/private/sticky/a", "/private/sticky/b", "/private/sticky/c"])
        connections = [e for e in self.events(token, sid, "egress") if e.get("tls") == "intercepted"]
        self.assertEqual(len(connections), 3, connections)  # a connection each

    def test_a_server_that_does_not_verify_is_refused_before_the_request(self):
        token = self.token("verifier")
        self.inet.dns.set_record("unverified.test", PUBLIC_ADDRESS)  # not in the server's certificate
        self.put_secret(token, "API_TOKEN", [{"hosts": ["unverified.test", "registry.test"],
                                              "path_prefixes": ["/private/npm/"]}])
        sid = self.sandbox(token, ["API_TOKEN"])
        self.inet.clear_logs()
        status, body = self.curl(token, sid, "https://unverified.test/private/npm/corral-hello")
        self.assertNotEqual(status, 200, body)
        self.assertEqual(self.token_seen(PUBLIC_ADDRESS), [])
        refused = [e for e in self.events(token, sid, "egress") if e["host"] == "unverified.test"]
        self.assertEqual(refused[-1]["decision"], "failed", refused)
        self.assertEqual(refused[-1]["reason"], "tls", refused)
        self.assertIn("certificate", refused[-1]["message"])
        # The control: a bound host that verifies.
        status, body = self.curl(token, sid, "https://registry.test/private/npm/corral-hello")
        self.assertEqual(status, 200, body)

    def test_the_api_never_gives_a_value_back_and_checks_what_it_takes(self):
        token = self.user_with_secrets("api")
        status, listed = self.daemon.http("GET", "/v1/secrets", token)
        self.assertEqual(status, 200, listed)
        self.assertEqual([s["name"] for s in listed["secrets"]], ["GIT_TOKEN", "NPM_TOKEN"])
        self.assertNotIn(self.inet.private_token, json.dumps(listed))
        for secret in listed["secrets"]:
            self.assertNotIn("value", secret)  # the object has no value field (a binding's "value" is its template)
        bad = [
            ("bad-name", {"value": "v", "bindings": [{"hosts": ["a.test"]}]}),
            ("PATH", {"value": "v", "bindings": [{"hosts": ["a.test"]}]}),
            ("OK_NAME", {"value": "v\r\nX-Injected: 1", "bindings": [{"hosts": ["a.test"]}]}),
            ("OK_NAME", {"value": "v", "bindings": []}),
            ("OK_NAME", {"value": "v"}),
            ("OK_NAME", {"value": "v", "bindings": [{"hosts": ["a.test"]}], "extra": 1}),
            ("OK_NAME", {"value": "v", "bindings": [{"hosts": ["a.test"], "header": "Host"}]}),
        ]
        for name, body in bad:
            status, answer = self.daemon.http("PUT", f"/v1/secrets/{name}", token, body)
            self.assertEqual(status, 400, (name, body, answer))
        # A token without the scope.
        narrow = self.token("api", scope="sandboxes exec")
        status, _ = self.daemon.http("PUT", "/v1/secrets/OK_NAME", narrow,
                                     {"value": "v", "bindings": [{"hosts": ["a.test"]}]})
        self.assertEqual(status, 403)
        status, _ = self.daemon.http("POST", "/v1/sandboxes", narrow, {"secrets": ["NPM_TOKEN"], "start": False})
        self.assertEqual(status, 403)
        # Another user cannot name them; an unknown name is not found.
        other = self.token("someone-else")
        status, answer = self.daemon.http("POST", "/v1/sandboxes", other, {"secrets": ["NPM_TOKEN"], "start": False})
        self.assertEqual(status, 404, answer)
        status, answer = self.daemon.http("POST", "/v1/sandboxes", token, {"secrets": ["NOPE"], "start": False})
        self.assertEqual(status, 404, answer)
        # An issuer's secret (admin socket): any of its users may name it; a user's own shadows it.
        status, answer = self.daemon.admin("PUT", "/v1/admin/issuers/acme/secrets/SHARED",
                                           {"value": "shared-value", "bindings": [{"hosts": ["registry.test"]}]})
        self.assertEqual(status, 200, answer)
        status, answer = self.daemon.admin("PUT", "/v1/admin/issuers/nope/secrets/SHARED",
                                           {"value": "v", "bindings": [{"hosts": ["registry.test"]}]})
        self.assertEqual(status, 404, answer)
        status, listed = self.daemon.http("GET", "/v1/secrets", other)
        self.assertEqual([s["name"] for s in listed["issuer_secrets"]], ["SHARED"])
        status, sandbox = self.daemon.http("POST", "/v1/sandboxes", other, {"secrets": ["SHARED"], "start": False})
        self.assertEqual(status, 201, sandbox)
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sandbox['id']}", other)
        self.assertEqual(sandbox["secrets"], ["SHARED"])
        # PUT on a sandbox: the names replaced; a running one started without them says its trust
        # store does not hold corral's CA yet, and after a restart it does.
        sid = self.sandbox(token)
        status, answer = self.daemon.http("PUT", f"/v1/sandboxes/{sid}/secrets", token, {"secrets": ["NPM_TOKEN"]})
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["secrets"], ["NPM_TOKEN"])
        self.assertFalse(answer["ca_trusted"])
        self.assertTrue(self.sh(token, sid, 'echo "$NPM_TOKEN"').startswith("corral-placeholder-"))
        for action in ("stop", "start"):
            status, answer = self.daemon.http("POST", f"/v1/sandboxes/{sid}/{action}", token)
            self.assertEqual(status, 200, answer)
        status, answer = self.daemon.http("PUT", f"/v1/sandboxes/{sid}/secrets", token, {"secrets": ["NPM_TOKEN"]})
        self.assertTrue(answer["ca_trusted"], answer)
        status, body = self.curl(token, sid, "https://registry.test/private/npm/corral-hello")
        self.assertEqual(status, 200, body)
        # Deleted: the next connection goes without it (a tunnel: -k).
        status, _ = self.daemon.http("DELETE", "/v1/secrets/NPM_TOKEN", token)
        self.assertEqual(status, 200)
        status, body = self.curl(token, sid, "-k", "https://registry.test/private/npm/corral-hello")
        self.assertEqual(status, 401, body)
        self.assertNotIn(self.inet.private_token, self.daemon.log())

    def test_a_restarted_daemon_still_injects_for_a_running_sandbox(self):
        token = self.user_with_secrets("restarts")
        sid = self.sandbox(token, ["NPM_TOKEN"])
        status, body = self.curl(token, sid, "https://registry.test/private/npm/corral-hello")
        self.assertEqual(status, 200, body)
        self.daemon.stop()
        self.daemon.start()
        token = mint("acme", self.secret, "restarts")
        status, body = self.curl(token, sid, "https://registry.test/private/npm/corral-hello")
        self.assertEqual(status, 200, body)

    def test_the_cli_keeps_secrets_without_showing_them(self):
        token = self.token("cli")
        env = dict(os.environ, CORRAL_URL=f"http://127.0.0.1:{self.daemon.port}", CORRAL_TOKEN=token,
                   CORRAL_ADMIN_SOCKET=self.daemon.admin_socket)

        def corral(*args, stdin=None):
            return subprocess.run([CORRAL, *args], input=stdin, capture_output=True, text=True, env=env, timeout=60)

        put = corral("secret", "put", "NPM_TOKEN", "--bind", '{"hosts": ["registry.test"], "path_prefixes": ["/private/npm/"]}',
                     stdin=self.inet.private_token + "\n")
        self.assertEqual(put.returncode, 0, put.stderr)
        shared = corral("secret", "put", "SHARED_CLI", "--issuer", "acme", "--bind", '{"hosts": ["x.test"]}',
                        stdin="shared-cli-value")
        self.assertEqual(shared.returncode, 0, shared.stderr)
        self.addCleanup(self.daemon.admin, "DELETE", "/v1/admin/issuers/acme/secrets/SHARED_CLI")
        listed = corral("secret", "ls")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertIn("NPM_TOKEN", listed.stdout)
        self.assertIn("registry.test", listed.stdout)
        self.assertIn("SHARED_CLI", listed.stdout)
        self.assertNotIn(self.inet.private_token, listed.stdout + put.stdout + put.stderr)
        created = corral("sandbox", "create", "--secret", "NPM_TOKEN", "--allow-domain", "registry.test")
        self.assertEqual(created.returncode, 0, created.stderr)
        sid = created.stdout.strip()
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", token)
        status, body = self.curl(token, sid, "https://registry.test/private/npm/corral-hello")
        self.assertEqual(status, 200, body)
        bad = corral("secret", "put", "bad-name", "--bind", '{"hosts": ["a.test"]}', stdin="v")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("name", bad.stderr)
        removed = corral("secret", "rm", "NPM_TOKEN")
        self.assertEqual(removed.returncode, 0, removed.stderr)
        self.assertNotIn("NPM_TOKEN", corral("secret", "ls").stdout)

    def test_a_key_file_others_can_read_or_that_is_no_key_stops_the_daemon(self):
        bad = tempfile.mkdtemp(prefix="corral-secrets-bad-")
        self.addCleanup(subprocess.run, ["rm", "-rf", bad], check=False)
        cases = [("readable.key", base64.b64encode(os.urandom(32)).decode(), 0o644, "chmod 600"),
                 ("short.key", base64.b64encode(os.urandom(16)).decode(), 0o600, "32 bytes"),
                 ("text.key", "not base64 at all!", 0o600, "base64")]
        for name, text, mode, expected in cases:
            path = os.path.join(bad, name)
            with open(path, "w") as f:
                f.write(text + "\n")
            os.chmod(path, mode)
            daemon = Daemon()
            daemon.extra_config = f'[secrets]\nkey_file = "{path}"\n'
            try:
                with self.assertRaises(RuntimeError) as refused:
                    daemon.start()
                self.assertIn("secrets.key_file", str(refused.exception))
                self.assertIn(expected, str(refused.exception))
            finally:
                daemon.cleanup()


if __name__ == "__main__":
    unittest.main()
