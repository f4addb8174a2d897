"""The model relay as a sandbox reaches it: on the sandbox's own 127.0.0.1, served by corrald
through the listener that the sandbox's init holds (so it survives a restart of the daemon), in
the Messages API's error format, and never passing a request it cannot attribute to a session.

The upstream is the scripted Messages API server (tests/fixtures/scripted_model.py) on the
host's loopback; its log shows what reached it.
"""
import json
import os
import shutil
import sys

from corral_e2e import DaemonTestCase, WsClient, operator_key_file, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures"))
import scripted_model  # noqa: E402

RELAY_PORT = 7880
REAL_KEY = "sk-ant-e2e-operator-key-never-inside"

_upstream = scripted_model.serve({"turns": [{"text": "never asked"}]}, port=0)
_key_dir, _key_file = operator_key_file("corral-e2e-relay-", REAL_KEY)


def tearDownModule():
    shutil.rmtree(_key_dir, ignore_errors=True)  # the key file goes with the run


def curl(port, key):
    """A shell line for inside the sandbox: POST a Messages request; prints the body, then the
    HTTP code on its own line (curl exits 7 when the connection is refused)."""
    body = json.dumps({"model": "claude-test-1", "max_tokens": 16, "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]})
    return (f"curl -sS -w '\\n%{{http_code}}' -H 'x-api-key: {key}' -H 'content-type: application/json' "
            f"-H 'anthropic-version: 2023-06-01' --data '{body}' http://127.0.0.1:{port}/v1/messages")


class Relay(DaemonTestCase):
    extra_config = f"""
[relay]
port = {RELAY_PORT}
upstream = "http://127.0.0.1:{_upstream.port}"
api_key_file = "{_key_file}"
[relay.prices."claude-test-1"]
input = 3
output = 15
cache_write = 3.75
cache_read = 0.3
"""

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        _upstream.shutdown()
        _upstream.server_close()

    def setUp(self):
        self.owner = self.token("relay-user")

    def sh(self, sid, script):
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            try:
                return await c.run(sid, ["sh", "-c", script])
            finally:
                await c.close()
        out, err, outcome, _ = self.run_async(go())
        return out.decode(), err.decode(), outcome

    def assert_relay_refuses_unknown_key(self, sid):
        out, err, outcome = self.sh(sid, curl(RELAY_PORT, "sk-corral-guessed-key"))
        self.assertEqual(outcome.get("exit_code"), 0, (out, err))
        body, code = out.rsplit("\n", 1)
        self.assertEqual(code, "401", out)
        error = json.loads(body)
        self.assertEqual(error["type"], "error")
        self.assertEqual(error["error"]["type"], "authentication_error")

    def test_the_relay_is_on_the_sandbox_loopback_and_refuses_what_no_session_sent(self):
        sid = self.create_sandbox(self.owner)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", self.owner)
        before = len(_upstream.requests)
        self.assert_relay_refuses_unknown_key(sid)
        # Nothing was forwarded, and no key at all is refused the same way.
        out, _, _ = self.sh(sid, curl(RELAY_PORT, ""))
        self.assertTrue(out.endswith("\n401"), out)
        self.assertEqual(len(_upstream.requests), before)
        # Control: another port on the same loopback has nobody behind it (7881 is the tool
        # bridge's).
        out, err, outcome = self.sh(sid, curl(RELAY_PORT + 10, "x"))
        self.assertEqual(outcome.get("exit_code"), 7, (out, err))
        self.assertIn("Couldn't connect", err + out)
        # The operator's key is not in the sandbox's environment or files.
        out, _, _ = self.sh(sid, f"grep -rs -l '{REAL_KEY}' /proc/self/environ /etc /home /tmp; echo done")
        self.assertEqual(out.strip(), "done")

    def test_a_restarted_daemon_serves_the_relay_of_running_sandboxes(self):
        sid = self.create_sandbox(self.owner)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", self.owner)
        self.assert_relay_refuses_unknown_key(sid)
        # Stopped cleanly, then killed: each time the next daemon gets the listener back from
        # the sandbox's init and serves it.
        for stop in (self.daemon.stop, self.daemon.kill9):
            stop()
            self.daemon.start()
            status, sandbox = self.daemon.http("GET", f"/v1/sandboxes/{sid}", self.owner)
            self.assertEqual((status, sandbox["state"]), (200, "running"), sandbox)
            self.assert_relay_refuses_unknown_key(sid)
        # A sandbox stopped and started again gets a new listener, served as well.
        status, _ = self.daemon.http("POST", f"/v1/sandboxes/{sid}/stop", self.owner)
        self.assertEqual(status, 200)
        status, _ = self.daemon.http("POST", f"/v1/sandboxes/{sid}/start", self.owner)
        self.assertEqual(status, 200)
        self.assert_relay_refuses_unknown_key(sid)


if __name__ == "__main__":
    import unittest
    unittest.main()
