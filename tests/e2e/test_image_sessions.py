"""Agent sessions in image sandboxes (issue 18): a busybox image has no Claude Code, no glibc
and no bash, and the daemon provides Claude Code anyway: the host's binary bound read-only at
/run/corral/bin/claude, run by the host's loader and libraries staged read-only at
/run/corral/claude (supervisor/sandboxes/claude_runtime.h), with busybox's sh for the Bash tool.

Each test plays a scripted Messages API scenario (tests/fixtures/scripted_model.py) behind the
model relay, with one Bash tool call, and checks the tool's output, the file it wrote, the
turn's result and its cost to the micro-dollar; the same flow in a host sandbox is the control.
The image is made by tests/fixtures/make_image.sh busybox and imported on the admin socket.
"""
import json
import os
import shutil
import sys
import time
import unittest

from agent_turns import AgentTurns
from corral_e2e import DaemonTestCase, WsClient, operator_key_file, relay_config

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures"))
import scripted_model  # noqa: E402
from image_layouts import layout  # noqa: E402

REAL_KEY = "sk-ant-e2e-image-sessions-operator-key"
IMAGE = "busybox:test"
# uid=1000, bb-42 and the search results appear only in the tool's output, never in the command
# the model sent. find, grep and rg are the functions Claude Code's shell snapshot puts over them,
# which run its own executable as bfs, ugrep and ripgrep (the image has no rg at all): in an image
# sandbox through corral-claude (tools/corral-claude).
COMMAND = ("echo uid=$(id -u); cat /etc/os-release 2>/dev/null || echo bb-$((6*7)); printf 'needle\\n' > n.txt; "
           "echo g=$(grep -c needle n.txt) r=$(rg -c needle n.txt) f=$(find . -maxdepth 1 -name n.txt); "
           "echo hi > hello.txt")
SEARCHED = "g=1 r=1 f=./n.txt"

_upstream = scripted_model.serve({"turns": []}, port=0)
_key_dir, _key_file = operator_key_file("corral-e2e-image-sessions-", REAL_KEY)


@unittest.skipUnless(shutil.which("claude"), "Claude Code is not installed (dist/install-deps.sh installs it)")
class ImageSessions(AgentTurns, DaemonTestCase):
    upstream = _upstream
    real_key = REAL_KEY
    extra_config = relay_config(_upstream.port, _key_file) + """
[sessions]
tool_call_timeout = 4
agent_silence_timeout = 20
"""

    @classmethod
    def setUpClass(cls):
        path = layout("busybox")  # a SkipTest when make_image.sh cannot make it
        super().setUpClass()
        status, body = cls.daemon.admin("POST", "/v1/images/import", {"path": path, "name": IMAGE})
        if status not in (200, 201):
            cls.tearDownClass()
            raise AssertionError(f"import of {path}: {status} {body}")

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()

    def setUp(self):
        self.owner = self.token("image-agent", budget={"ai_usd": 5, "window": "day"})

    def sandbox(self, **body):
        sid = self.create_sandbox(self.owner, **body)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", self.owner)
        return sid

    def test_a_session_in_a_busybox_image_runs_a_bash_tool_call_and_pays_its_usage(self):
        sid = self.sandbox(image=IMAGE)
        # The image really is busybox only: no bash, no glibc loader, no Claude Code of its own.
        out, _, outcome, _ = self.run_in(sid, ["/bin/sh", "-c", "ls /bin/bash /lib64 /usr/bin/claude 2>&1; true"])
        self.assertEqual(outcome["outcome"], "exited", outcome)
        self.assertEqual(out.count(b"No such file"), 3, out)
        output, _ = self.one_turn_with_bash(sid, COMMAND)
        self.assertIn("uid=1000", output)
        self.assertIn("bb-42", output)  # busybox has no /etc/os-release
        self.assertIn(SEARCHED, output)

    def test_the_runtime_is_read_only_inside_an_image_sandbox(self):
        sid = self.sandbox(image=IMAGE)
        script = ("touch /run/corral/claude/x 2>&1; echo a=$?; echo y > /run/corral/bin/claude 2>&1; echo b=$?; "
                  "rm -f /run/corral/claude/ld.so 2>&1; echo c=$?; touch /tmp/x; echo control=$?")
        out, _, outcome, _ = self.run_in(sid, ["/bin/sh", "-c", script])
        self.assertEqual(outcome["outcome"], "exited", outcome)
        self.assertIn(b"Read-only file system", out)
        for line in (b"a=1", b"b=1", b"c=1", b"control=0"):
            self.assertIn(line, out.split(b"\n"))
        # Root inside cannot either.
        async def as_root():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            try:
                return await c.run(sid, ["/bin/sh", "-c", "touch /run/corral/claude/x; echo r=$?"], user="root")
            finally:
                await c.close()
        out, _, _, _ = self.run_async(as_root())
        self.assertIn(b"r=1", out)

    def agent_processes(self, sid):
        out, _, _, _ = self.run_in(sid, ["/bin/sh", "-c",
                                         "grep -l '^/run/corral/claude/ld.so' /proc/[0-9]*/cmdline 2>/dev/null | wc -l"])
        return int(out.decode().strip() or "0")

    def test_a_restarted_daemon_finds_an_image_sessions_agent_and_the_session_resumes(self):
        sid = self.sandbox(image=IMAGE)
        _upstream.script = scripted_model.Script({"turns": [{"text": "first", "usage": {"input_tokens": 10, "output_tokens": 1}}]})
        status, session = self.daemon.http("POST", f"/v1/sandboxes/{sid}/sessions", self.owner, {"prompt": "hello"})
        self.assertEqual(status, 201, session)
        self.events_until(session["id"], self.turn_done)
        self.assertEqual(self.agent_processes(sid), 1)  # control: the agent runs, through the loader
        self.daemon.stop()
        self.daemon.start()
        status, row = self.daemon.http("GET", f"/v1/sessions/{session['id']}", self.owner)
        self.assertEqual((status, row["state"], row["outcome"]["outcome"]), (200, "idle", "daemon_restarted"), row)
        deadline = time.time() + 10
        while self.agent_processes(sid) and time.time() < deadline:
            time.sleep(0.2)
        self.assertEqual(self.agent_processes(sid), 0)  # recovery knew the loader's command line
        _upstream.script = scripted_model.Script({"turns": [{"text": "second", "usage": {"input_tokens": 20, "output_tokens": 1}}]})
        _upstream.requests.clear()
        status, resumed = self.daemon.http("POST", f"/v1/sandboxes/{sid}/sessions", self.owner,
                                           {"resume": session["id"], "prompt": "again"})
        self.assertEqual(status, 201, resumed)
        self.events_until(resumed["id"], self.turn_done)
        main = [r for r in _upstream.requests if r.get("kind") == "main"]
        self.assertIn("hello", json.dumps(main[0]["body"]["messages"]))  # its transcript came back

    def test_control_the_same_session_in_a_host_sandbox(self):
        sid = self.sandbox()
        output, _ = self.one_turn_with_bash(sid, COMMAND)
        self.assertIn("uid=1000", output)
        self.assertNotIn("bb-42", output)  # the host has /etc/os-release
        self.assertIn(SEARCHED, output)
        self.assertIn("ID=", output)
        # A host sandbox gets no runtime: it runs the host's claude from /usr.
        out, _, _, _ = self.run_in(sid, ["/bin/sh", "-c", "ls /run/corral/claude 2>&1; true"])
        self.assertIn(b"No such file", out)


class WithoutClaudeCode(DaemonTestCase):
    """A daemon that finds no Claude Code on its PATH (/usr/sbin:/sbin only) stages no runtime: a
    session in an image sandbox is refused, naming the cause, and nothing is recorded."""

    @classmethod
    def setUpClass(cls):
        path = layout("busybox")
        saved = os.environ["PATH"]
        os.environ["PATH"] = "/usr/sbin:/sbin"
        try:
            super().setUpClass()
        finally:
            os.environ["PATH"] = saved
        status, body = cls.daemon.admin("POST", "/v1/images/import", {"path": path, "name": IMAGE})
        if status not in (200, 201):
            cls.tearDownClass()
            raise AssertionError(f"import of {path}: {status} {body}")

    def test_a_session_in_an_image_sandbox_is_refused_when_the_host_has_no_claude_code(self):
        owner = self.token("no-claude", budget={"ai_usd": 1, "window": "day"})
        sid = self.create_sandbox(owner, image=IMAGE)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sid}", owner)
        self.assertIn("Claude Code is not installed", self.daemon.log())
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{sid}/sessions", owner, {"prompt": "hi"})
        self.assertEqual(status, 501, body)
        self.assertEqual(body["error"]["code"], "unsupported")
        self.assertIn("not installed", body["error"]["message"])
        status, sessions = self.daemon.http("GET", f"/v1/sessions?sandbox={sid}", owner)
        self.assertEqual((status, sessions["sessions"]), (200, []), sessions)
        # Control: the sandbox itself works.
        outcome, _ = self.exec_once(owner, sid, ["/bin/sh", "-c", "exit 3"])
        self.assertEqual((outcome["outcome"], outcome.get("exit_code")), ("exited", 3), outcome)


def tearDownModule():
    _upstream.shutdown()
    _upstream.server_close()
    shutil.rmtree(_key_dir, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
