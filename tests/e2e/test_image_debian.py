"""The acceptance path of images (issue 18) on a real distribution image: make_image.sh's
debian-python-node (mmdebstrap's minbase, then python3 and nodejs from Debian as a second layer,
an OCI layout made by umoci). The same image three ways: imported from its layout with the CLI,
pulled from a registry on loopback (Debian's docker-registry, pushed to by skopeo), and built
from a recipe on it (two RUN steps and a COPY), then built again all from the cache. In a
sandbox of each: a command runs python3 and node and sees root-owned files owned by root, a PTY
is a terminal of the asked size, and an agent session's Bash tool call runs python3 and node
and pays its usage to the micro-dollar (agent_turns.py)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from agent_turns import AgentTurns
from corral_e2e import CORRAL, DaemonTestCase, WsClient, operator_key_file, relay_config

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import scripted_model  # noqa: E402
from image_layouts import layout  # noqa: E402
from registry import Registry  # noqa: E402

REAL_KEY = "sk-ant-e2e-image-debian-operator-key"
IMPORTED = "dpn:imported"
BUILT = "dpn:built"
RECIPE = f"""FROM {IMPORTED}
RUN python3 -c "import json; json.dump({{'made_by': 'python'}}, open('/opt/python.json', 'w'))"
COPY app.js /opt/app/app.js
RUN node /opt/app/app.js > /opt/node.txt
"""
APP_JS = "console.log('node says ' + (6 * 7));\n"
# py-42, js-42 and the search results appear only in the tool's output, never in the command the
# model sent (find, grep and rg: Claude Code's own, as in test_image_sessions.py; no rg in the image).
COMMAND = ("python3 -c 'print(\"py-%d\" % (6*7))'; node -e 'console.log(\"js-\" + 6*7)'; "
           "printf 'needle\\n' > n.txt; echo g=$(grep -c needle n.txt) r=$(rg -c needle n.txt) "
           "f=$(find . -maxdepth 1 -name n.txt); "
           "stat -c %U /usr/bin/python3; echo hi > hello.txt")

_upstream = scripted_model.serve({"turns": []}, port=0)
_key_dir, _key_file = operator_key_file("corral-e2e-image-debian-", REAL_KEY)


@unittest.skipUnless(shutil.which("claude"), "Claude Code is not installed (dist/install-deps.sh installs it)")
class DebianImage(AgentTurns, DaemonTestCase):
    upstream = _upstream
    real_key = REAL_KEY

    @classmethod
    def setUpClass(cls):
        cls.layout = layout("debian-python-node")  # a SkipTest when there is no Debian mirror
        cls.registry = Registry()
        # Class cleanups run after tearDownClass, and also when setUpClass fails part way.
        cls.addClassCleanup(cls.registry.stop)
        cls.registry.start()
        cls.pulled = cls.registry.push(cls.layout, "acme/debian-python-node:1")
        cls.context = tempfile.mkdtemp(prefix="corral-e2e-image-debian-")
        cls.addClassCleanup(shutil.rmtree, cls.context, True)
        for name, text in (("Recipe", RECIPE), ("app.js", APP_JS)):
            with open(os.path.join(cls.context, name), "w") as f:
                f.write(text)
        cls.extra_config = relay_config(_upstream.port, _key_file) + f"""
[sessions]
tool_call_timeout = 20
agent_silence_timeout = 60

[images]
max_size = "2G"

[[images.registry]]
host = "{cls.registry.address}"
insecure = true
"""
        super().setUpClass()

    def setUp(self):
        super().setUp()
        self.owner = self.token("debian-agent", budget={"ai_usd": 5, "window": "day"})

    def cli(self, command, *args):
        argv = [CORRAL, "image", command, "--admin-socket", self.daemon.admin_socket, "--json", *args]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        self.assertEqual(proc.returncode, 0, f"{argv}: {proc.stderr[-3000:]}\n{self.daemon_errors()}")
        return json.loads(proc.stdout), proc.stderr

    def imported(self):
        image, _ = self.cli("import", self.layout, "--name", IMPORTED, "--force")
        return image

    def sandbox_works(self, image):
        """A sandbox of `image`: a command, a PTY and an agent turn in it."""
        sid = self.create_sandbox(self.owner, image=image)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", self.owner)
        out, err, outcome, _ = self.run_in(sid, ["sh", "-c", "python3 --version; node --version; "
                                                 "stat -c '%u:%g %U' /usr/bin/python3 /etc/passwd; id -u"])
        self.assertEqual(outcome.get("exit_code"), 0, (out, err, outcome, self.daemon_errors()))
        lines = out.decode().splitlines()
        self.assertTrue(lines[0].startswith("Python 3.11."), lines)
        self.assertTrue(lines[1].startswith("v18."), lines)  # bookworm's nodejs
        self.assertEqual(lines[2:], ["0:0 root", "0:0 root", "1000"])  # root's inside, and we are not root

        async def pty():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            try:
                return await c.run(sid, ["bash", "-c", "tty; stty size; python3 -c 'import os; print(os.isatty(0))'"],
                                   pty={"rows": 33, "cols": 101})
            finally:
                await c.close()
        out, _, outcome, _ = self.run_async(pty())
        self.assertEqual(outcome.get("exit_code"), 0, (out, outcome))
        self.assertIn(b"/dev/pts/", out)
        self.assertIn(b"33 101", out)
        self.assertIn(b"True", out)

        output, _ = self.one_turn_with_bash(sid, COMMAND)
        self.assertIn("py-42", output)
        self.assertIn("js-42", output)
        self.assertIn("g=1 r=1 f=./n.txt", output)
        self.assertIn("root", output)
        return sid

    def test_imported_from_its_layout(self):
        image = self.imported()
        self.assertEqual(len(image["layers"]), 2)  # minbase, then python3 and nodejs
        self.assertIn(IMPORTED, image["names"])
        self.sandbox_works(IMPORTED)

    def test_pulled_from_a_registry_is_the_same_image(self):
        imported = self.imported()
        status, pulled = self.daemon.admin("POST", "/v1/images/pull", {"ref": self.pulled})
        self.assertEqual(status, 201, f"{pulled}\n{self.daemon_errors()}")
        self.assertEqual(pulled["digest"], imported["digest"])
        self.assertIn(self.pulled, pulled["names"])
        sid = self.sandbox_works(self.pulled)
        status, row = self.daemon.http("GET", f"/v1/sandboxes/{sid}", self.owner)
        self.assertEqual((status, row["image_digest"]), (200, pulled["digest"]), row)

    def test_built_from_a_recipe_then_again_from_the_cache(self):
        base = self.imported()
        built, log = self.cli("build", "-t", BUILT, self.context)
        self.assertEqual(built["state"], "succeeded", built)
        self.assertEqual(built["cached"], 0, log)
        image = built["image"]
        self.assertEqual(image["layers"][:2], base["layers"])
        self.assertEqual(len(image["layers"]), 5)  # the base's two, then RUN, COPY, RUN

        sid = self.sandbox_works(BUILT)
        out, err, outcome, _ = self.run_in(sid, ["sh", "-c", "cat /opt/python.json; echo; cat /opt/node.txt; "
                                                 "stat -c %U /opt/app/app.js"])
        self.assertEqual(outcome.get("exit_code"), 0, (out, err, outcome))
        self.assertEqual(out.decode(), '{"made_by": "python"}\nnode says 42\nroot\n')

        again, log = self.cli("build", "-t", BUILT, self.context)
        self.assertEqual(again["cached"], 3, log)
        self.assertEqual(again["image"]["digest"], image["digest"])
        # The control: with no cache, the same steps run again and make the same files.
        fresh, log = self.cli("build", "-t", "dpn:fresh", "--no-cache", self.context)
        self.assertEqual(fresh["cached"], 0, log)
        self.assertIn("node /opt/app/app.js", log)


def tearDownModule():
    _upstream.shutdown()
    _upstream.server_close()
    shutil.rmtree(_key_dir, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
