"""A Node client on the `ws` package (Debian's node-ws), as an operator's backend would use
corrald: tests/e2e/node/ws_client.mjs."""
import json
import os
import shutil
import subprocess
import unittest

from corral_e2e import DaemonTestCase, mint

CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node", "ws_client.mjs")
NODE = shutil.which("node") or shutil.which("nodejs")
WS_MISSING = 4  # ws_client.mjs's exit code when it cannot load `ws`


class NodeWsClient(DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        if NODE is None:
            raise unittest.SkipTest("node is not installed (dist/install-deps.sh installs nodejs)")
        probe = subprocess.run([NODE, CLIENT], capture_output=True, text=True, timeout=30)
        if probe.returncode == WS_MISSING:
            raise unittest.SkipTest("node's ws is not installed (dist/install-deps.sh installs node-ws)")
        super().setUpClass()
        cls.owner = mint("acme", cls.secret, "node-user")
        status, sandbox = cls.daemon.http("POST", "/v1/sandboxes", cls.owner, {})
        assert status == 201, sandbox
        cls.sid = sandbox["id"]

    def client(self, token, sandbox=None, *argv):
        proc = subprocess.run([NODE, CLIENT, self.daemon.ws_url(), token, sandbox or self.sid, *argv],
                              capture_output=True, text=True, timeout=60)
        lines = proc.stdout.splitlines()
        self.assertEqual(len(lines), 1, (proc.returncode, proc.stdout, proc.stderr))
        return proc.returncode, json.loads(lines[0])

    def test_exec_echo_over_node_ws(self):
        rc, result = self.client(self.owner)
        self.assertEqual(rc, 0, result)
        self.assertEqual(result["protocol"], "corral.v1")
        self.assertRegex(result["command"], r"^cmd_")
        self.assertEqual(result["stdout"], "hello-from-node\n")
        self.assertEqual(result["stderr"], "")
        self.assertEqual(result["seqs"], list(range(1, len(result["seqs"]) + 1)))
        self.assertEqual((result["outcome"]["outcome"], result["outcome"]["exit_code"]), ("exited", 0))
        # The daemon's record says the same.
        status, record = self.daemon.http("GET", f"/v1/sandboxes/{self.sid}/commands/{result['command']}",
                                          self.owner)
        self.assertEqual((status, record["argv"], record["outcome"]["outcome"]),
                         (200, ["echo", "hello-from-node"], "exited"))

    def test_binary_frames_keep_stdout_and_stderr_apart(self):
        rc, result = self.client(self.owner, None, "sh", "-c",
                                 r"printf '\303\251t\303\251\n'; echo oops >&2; exit 3")
        self.assertEqual(rc, 0, result)
        self.assertEqual(result["stdout"], "\u00e9t\u00e9\n")
        self.assertEqual(result["stderr"], "oops\n")
        self.assertEqual((result["outcome"]["outcome"], result["outcome"]["exit_code"]), ("exited", 3))

    def test_a_bad_token_is_refused_before_the_upgrade(self):
        for name, token in {"garbage": "bad", "wrong secret": mint("acme", "z" * 43, "node-user"),
                            "expired": mint("acme", self.secret, "node-user", ttl=-3600)}.items():
            with self.subTest(name):
                rc, result = self.client(token)
                self.assertEqual(rc, 2, result)
                self.assertEqual(result["refused"]["status"], 401)
                self.assertEqual(result["refused"]["body"], {"error": {"code": "unauthorized",
                                                                       "message": "unauthorized"}})
        # Positive control: the same client with the good token.
        rc, result = self.client(self.owner)
        self.assertEqual((rc, result["stdout"]), (0, "hello-from-node\n"), result)

    def test_another_users_sandbox_is_not_found(self):
        rc, result = self.client(self.token("node-other"))
        self.assertEqual(rc, 3, result)
        self.assertEqual(result["error"]["code"], "not_found")
        rc, result = self.client(self.owner)
        self.assertEqual(rc, 0, result)


if __name__ == "__main__":
    unittest.main()
