"""Connections bound to their tokens (issue 16 §1): an open WebSocket or keep-alive connection ends
when its token expires, when its issuer is removed or given a new secret, or when its token id is
revoked (also after a restart); a client renews its token on an open WebSocket with the `auth` op.
Commands started over an ended connection keep running. Each denial beside its control."""
import asyncio
import base64
import http.client
import json
import os
import subprocess
import time
import unittest
import uuid

import websockets

from corral_e2e import CORRAL, Daemon, DaemonTestCase, WsClient, mint, wait_until


def cli(daemon, *args):
    env = dict(os.environ, CORRAL_ADMIN_SOCKET=daemon.admin_socket)
    return subprocess.run([CORRAL, *args], env=env, capture_output=True, text=True, timeout=60)


async def closed_code(client, timeout):
    """Waits for the server to close; returns (close code, seconds waited). Events are drained."""
    started = time.monotonic()
    try:
        while True:
            await asyncio.wait_for(client.ws.recv(), timeout)
    except websockets.ConnectionClosed as e:
        return e.code, time.monotonic() - started


class TokenBindingTest(DaemonTestCase):
    # No clock skew: a token ends at its exp (the default allows 60 s either way).
    extra_config = "\n[auth]\nmax_clock_skew = 0\n"

    def test_expired_token_closes_its_websocket_and_the_command_runs_on(self):
        long_token = self.token("exp-user")
        sandbox = self.create_sandbox(long_token)["id"]
        exp = int(time.time()) + 3
        short_token = mint("acme", self.secret, "exp-user", ttl=exp - int(time.time()))

        async def scenario():
            short = await WsClient.connect(self.daemon.ws_url(), short_token)
            control = await WsClient.connect(self.daemon.ws_url(), long_token)
            reply = await short.request("exec", sandbox=sandbox, argv=["sh", "-c", "sleep 5; echo done"])
            self.assertTrue(reply["ok"], reply)
            command = reply["result"]["command"]
            # Idle from here on: the close comes from the daemon's timer, at the token's end.
            code, waited = await closed_code(short, timeout=15)
            ended_after = time.time() - (exp + 1)
            self.assertEqual(code, 1008)
            self.assertLessEqual(ended_after, 1.0, "closed more than 1 s after the token expired")
            self.assertGreaterEqual(ended_after, -0.1, "closed before the token expired")
            print(f"\n  expired WebSocket closed {ended_after:+.3f} s after its token's end (exp + 1 s)")
            # The control stays open, and the command belongs to the user, not to the connection.
            pong = await control.request("ping")
            self.assertTrue(pong["ok"], pong)
            attached = await control.request("attach", command=command, output="json")
            self.assertTrue(attached["ok"], attached)
            out = b""
            while True:
                event = await control.next_event(timeout=20)
                if event.get("event") == "output":
                    out += base64.b64decode(event["data"])
                if event.get("event") == "exit":
                    self.assertEqual(event["outcome"]["outcome"], "exited", event)
                    self.assertEqual(event["outcome"]["exit_code"], 0)
                    break
            self.assertEqual(out, b"done\n")
            await control.close()

        self.run_async(scenario())
        # The expired token is refused over HTTP too; the long one is not.
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", short_token)[0], 401)
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", long_token)[0], 200)

    def test_auth_op_renews_the_token_of_an_open_websocket(self):
        exp = int(time.time()) + 2
        first = mint("acme", self.secret, "renewer", ttl=exp - int(time.time()))

        async def scenario():
            client = await WsClient.connect(self.daemon.ws_url(), first)
            # Refused renewals: another user's token, and one that does not verify.
            other = await client.request("auth", token=self.token("somebody-else"))
            self.assertFalse(other["ok"])
            self.assertEqual(other["error"]["code"], "forbidden")
            forged = await client.request("auth", token=first[:-4] + "AAAA")
            self.assertFalse(forged["ok"])
            self.assertEqual(forged["error"]["code"], "unauthorized")
            missing = await client.request("auth")
            self.assertEqual(missing["error"]["code"], "bad_request")
            # A fresh token of the same user: the connection outlives the first one.
            fresh = mint("acme", self.secret, "renewer", ttl=600)
            renewed = await client.request("auth", token=fresh)
            self.assertTrue(renewed["ok"], renewed)
            self.assertGreater(renewed["result"]["exp"], exp + 500)
            await asyncio.sleep(max(0.0, exp + 1.5 - time.time()))
            pong = await client.request("ping")
            self.assertTrue(pong["ok"], "the renewed connection was closed at the old token's end")
            await client.close()

        self.run_async(scenario())

    def test_refused_renewal_keeps_the_old_expiry(self):
        exp = int(time.time()) + 2
        token = mint("acme", self.secret, "stubborn", ttl=exp - int(time.time()))

        async def scenario():
            client = await WsClient.connect(self.daemon.ws_url(), token)
            refused = await client.request("auth", token=self.token("intruder"))
            self.assertEqual(refused["error"]["code"], "forbidden")
            code, _ = await closed_code(client, timeout=10)
            self.assertEqual(code, 1008)

        self.run_async(scenario())

    def test_issuer_removed_or_rekeyed_ends_its_open_connections_at_once(self):
        for action in ("rm", "rotate"):
            with self.subTest(action=action):
                name = f"temp-{action}-{uuid.uuid4().hex[:6]}"
                secret = self.daemon.add_issuer(name)
                doomed_token = mint(name, secret, "u1")
                control_token = self.token("unaffected")

                async def scenario():
                    doomed = await WsClient.connect(self.daemon.ws_url(), doomed_token)
                    control = await WsClient.connect(self.daemon.ws_url(), control_token)
                    self.assertTrue((await doomed.request("ping"))["ok"])
                    started = time.monotonic()
                    result = await asyncio.get_running_loop().run_in_executor(
                        None, lambda: cli(self.daemon, "admin", "issuer", action, name))
                    self.assertEqual(result.returncode, 0, result.stderr)
                    code, _ = await closed_code(doomed, timeout=5)
                    self.assertEqual(code, 1008)
                    self.assertLess(time.monotonic() - started, 2.0)
                    self.assertTrue((await control.request("ping"))["ok"])
                    await control.close()
                    return result.stdout.strip()

                printed = self.run_async(scenario())
                self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", doomed_token)[0], 401)
                if action == "rotate":
                    # The new secret (printed once) signs tokens that work.
                    self.assertGreaterEqual(len(printed), 32)
                    self.assertNotEqual(printed, secret)
                    self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", mint(name, printed, "u1"))[0], 200)

    def test_idle_keep_alive_connection_closes_when_its_token_expires(self):
        exp = int(time.time()) + 2
        short = mint("acme", self.secret, "keeper", ttl=exp - int(time.time()))
        expiring = http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=10)
        lasting = http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=10)
        for conn, token in ((expiring, short), (lasting, self.token("keeper"))):
            conn.request("GET", "/v1/sandboxes", headers={"Authorization": "Bearer " + token})
            resp = conn.getresponse()
            resp.read()
            self.assertEqual(resp.status, 200)
        time.sleep(max(0.0, exp + 1.5 - time.time()))
        # The expired connection was closed by the daemon: reading it gives EOF at once.
        expiring.sock.settimeout(2)
        self.assertEqual(expiring.sock.recv(1), b"")
        lasting.request("GET", "/v1/sandboxes", headers={"Authorization": "Bearer " + self.token("keeper")})
        resp = lasting.getresponse()
        resp.read()
        self.assertEqual(resp.status, 200, "the control connection still serves requests")
        expiring.close()
        lasting.close()


class RevocationTest(unittest.TestCase):
    """Revocation by token id, on open connections and across a restart (its own daemon)."""

    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("corrald needs root")
        self.daemon = Daemon()
        self.addCleanup(self.daemon.cleanup)
        self.daemon.start()
        self.secret = self.daemon.add_issuer("acme")

    def test_revoked_token_id_is_refused_on_open_connections_and_after_a_restart(self):
        revoked = mint("acme", self.secret, "rita", jti="jti-" + uuid.uuid4().hex)
        kept = mint("acme", self.secret, "rita", jti="jti-" + uuid.uuid4().hex)
        jti = json.loads(base64.urlsafe_b64decode(revoked.split(".")[1] + "=="))["jti"]

        async def scenario():
            doomed = await WsClient.connect(self.daemon.ws_url(), revoked)
            control = await WsClient.connect(self.daemon.ws_url(), kept)
            result = await asyncio.get_running_loop().run_in_executor(
                None, lambda: cli(self.daemon, "admin", "token", "revoke", jti, "--issuer", "acme"))
            self.assertEqual(result.returncode, 0, result.stderr)
            code, waited = await closed_code(doomed, timeout=5)
            self.assertEqual(code, 1008)
            self.assertLess(waited, 1.0)
            self.assertTrue((await control.request("ping"))["ok"])
            await control.close()

        asyncio.run(scenario())
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", revoked)[0], 401)
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", kept)[0], 200)
        again = cli(self.daemon, "admin", "token", "revoke", jti, "--issuer", "acme")
        self.assertNotEqual(again.returncode, 0)
        self.assertIn("revoked already", again.stderr)

        self.daemon.stop()
        self.daemon.start()
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", revoked)[0], 401, "the revocation survives a restart")
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", kept)[0], 200)
        listed = cli(self.daemon, "admin", "token", "revocations", "--json")
        self.assertEqual(listed.returncode, 0, listed.stderr)
        rows = json.loads(listed.stdout)["revocations"]
        self.assertEqual([(r["jti"], r["issuer"]) for r in rows], [(jti, "acme")])

    def test_minted_tokens_carry_an_id_that_revokes_them(self):
        minted = cli(self.daemon, "token", "mint", "--issuer", "acme", "--user", "min", "--json")
        self.assertEqual(minted.returncode, 0, minted.stderr)
        body = json.loads(minted.stdout)
        token, jti = body["token"], body["jti"]
        self.assertTrue(jti)
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", token)[0], 200)
        # An id revoked for another issuer does not touch it; for every issuer it does.
        other = self.daemon.admin("POST", "/v1/admin/revocations", {"jti": jti, "issuer": "someone-else"})
        self.assertEqual(other[0], 201, other)
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", token)[0], 200)
        everyone = self.daemon.admin("POST", "/v1/admin/revocations", {"jti": jti})
        self.assertEqual(everyone[0], 201, everyone)
        self.assertEqual(self.daemon.http("GET", "/v1/sandboxes", token)[0], 401)
        bad = self.daemon.admin("POST", "/v1/admin/revocations", {"issuer": "acme"})
        self.assertEqual(bad[0], 400, bad)


if __name__ == "__main__":
    unittest.main()
