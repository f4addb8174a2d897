"""Derived session events (docs/PROTOCOL.md "Agent sessions"): `todo`, `file_change`,
`awaiting_input` and each turn's `result` with the files it changed, from the real Claude Code
CLI in a real sandbox against the scripted Messages API (tests/fixtures/scripted_model.py),
followed over the WebSocket as a UI would.

File changes are observed in the workspace itself, from the host side: a file the agent's Bash
tool writes counts like one its Write tool writes, and a symlink the agent plants is reported as
a symlink, never followed to what it names on the host.
"""
import os
import shutil
import sys
import tempfile
import unittest

from corral_e2e import DaemonTestCase, WsClient, operator_key_file, relay_config

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures"))
import scripted_model  # noqa: E402

_upstream = scripted_model.serve({"turns": []}, port=0)
_key_dir, _key_file = operator_key_file("corral-e2e-session-events-", "sk-ant-e2e-session-events-key")


def play(turns):
    _upstream.script = scripted_model.Script({"turns": turns})
    _upstream.requests.clear()


def todo_write(*items):
    return {"name": "TodoWrite", "input": {"todos": [
        {"content": content, "status": status, "activeForm": content + "..."} for content, status in items]}}


@unittest.skipUnless(shutil.which("claude"), "Claude Code is not installed (dist/install-deps.sh installs it)")
class SessionEvents(DaemonTestCase):
    extra_config = relay_config(_upstream.port, _key_file) + """
[sessions]
tool_call_timeout = 20
file_scan_interval = 1
"""

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        _upstream.shutdown()
        _upstream.server_close()
        shutil.rmtree(_key_dir, ignore_errors=True)

    def setUp(self):
        self.owner = self.token("events-user", budget={"ai_usd": 5, "window": "day"})
        self.sid = self.create_sandbox(self.owner)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{self.sid}", self.owner)

    def start(self, **body):
        status, session = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/sessions", self.owner, body)
        self.assertEqual(status, 201, session)
        return session

    def sh(self, script):
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            try:
                return await c.run(self.sid, ["sh", "-c", script])
            finally:
                await c.close()
        out, err, outcome, _ = self.run_async(go())
        self.assertEqual(outcome.get("exit_code"), 0, (out, err, outcome))
        return out

    def follow(self, session_id, answer=None, turns=1, timeout=120):
        """The session's events until `turns` turns have ended (a `result` then `ready`); `answer`
        (connection, event) is awaited for each event, to answer tool calls and permissions."""
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            try:
                reply = await c.request("session.attach", session=session_id)
                self.assertTrue(reply["ok"], reply)
                events, ended = [], 0
                while ended < turns:
                    event = await c.next_event(timeout=timeout)
                    events.append(event)
                    if answer:
                        await answer(c, event)
                    if event.get("kind") == "state" and event.get("state") == "ready" and \
                            any(e.get("kind") == "result" for e in events):
                        ended = sum(1 for e in events if e.get("kind") == "result")
                    self.assertNotEqual(event.get("event"), "session_end", events)
                return events
            finally:
                await c.close()
        return self.run_async(go())

    def abort(self, session_id):
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            try:
                return await c.request("session.abort", session=session_id)
            finally:
                await c.close()
        self.run_async(go())

    @staticmethod
    def of(events, kind):
        return [e for e in events if e.get("kind") == kind]

    @staticmethod
    def net_changes(events):
        """The file_change events merged per path as a turn's result merges them: a file made and
        removed between two scans (the Write tool's temporary file) is no change."""
        net = {}
        for e in (e for e in events if e.get("kind") == "file_change"):
            was = net.get(e["path"])
            if was == "create" and e["change"] == "delete":
                del net[e["path"]]
            else:
                net[e["path"]] = "create" if was == "create" else ("modify" if was == "delete" else e["change"])
        return set(net.items())

    def test_a_turn_reports_its_todo_list_and_every_file_it_changed_whoever_wrote_it(self):
        self.sh("echo old > /home/agent/gone.txt && echo 1 > /home/agent/edited.txt && mkdir -p /home/agent/.git")
        play([
            {"text": "Planning.", "tool_use": todo_write(("Write hello.py", "in_progress"), ("Run it", "pending"))},
            {"tool_use": {"name": "Write", "input": {"file_path": "/home/agent/hello.py", "content": "print('hi')\n"}}},
            {"tool_use": {"name": "Bash", "input": {
                "command": "python3 hello.py > out.txt && mkdir -p pkg && echo x > pkg/mod.py && rm gone.txt && "
                           "echo 22 > edited.txt && echo ref > .git/HEAD && echo tmp > /tmp/not-the-workspace",
                "description": "run"}}},
            {"tool_use": todo_write(("Write hello.py", "completed"), ("Run it", "completed"))},
            {"text": "Done."},
        ])
        session = self.start(prompt="write hello.py and run it")
        events = self.follow(session["id"])
        # The todo list, whole, each time the agent set it.
        todos = self.of(events, "todo")
        self.assertEqual([[(t["content"], t["status"]) for t in e["todos"]] for e in todos],
                         [[("Write hello.py", "in_progress"), ("Run it", "pending")],
                          [("Write hello.py", "completed"), ("Run it", "completed")]])
        self.assertEqual(todos[0]["todos"][0]["active_form"], "Write hello.py...")
        # Every change in the workspace, the Write tool's and the Bash tool's alike; none of the
        # agent's own state (~/.claude*), the repository's bookkeeping (.git) or outside (/tmp).
        expected = {("/home/agent/hello.py", "create"), ("/home/agent/out.txt", "create"),
                    ("/home/agent/pkg", "create"), ("/home/agent/pkg/mod.py", "create"),
                    ("/home/agent/gone.txt", "delete"), ("/home/agent/edited.txt", "modify")}
        self.assertEqual(self.net_changes(events), expected, events)
        result = self.of(events, "result")
        self.assertEqual(len(result), 1)
        result = result[0]
        self.assertEqual((result["turn"], result["is_error"], result["text"]), (1, False, "Done."))
        self.assertEqual({(f["path"], f["change"]) for f in result["files"]}, expected)
        self.assertEqual({f["path"]: f["type"] for f in result["files"]}["/home/agent/pkg"], "dir")
        self.assertEqual({f["path"]: f["size"] for f in result["files"]}["/home/agent/hello.py"], len("print('hi')\n"))
        self.assertEqual(result["diff"], {"files": 6, "created": 4, "modified": 1, "deleted": 1,
                                          "truncated": False, "observed": True})
        # The order a UI relies on: the agent's result line, then the turn's last file changes,
        # then `result`, then `ready`.
        kinds = [(e.get("kind"), (e.get("data") or {}).get("type")) for e in events]
        agent_result = kinds.index(("agent", "result"))
        derived = kinds.index(("result", None))
        self.assertLess(agent_result, derived)
        self.assertEqual(events[derived + 1], {**events[derived + 1], "kind": "state", "state": "ready"})
        self.assertTrue(all(i < derived for i, e in enumerate(events) if e.get("kind") == "file_change"))

        # The next turn reports only its own changes.
        play([{"tool_use": {"name": "Bash", "input": {"command": "rm -r pkg && echo again >> hello.py"}}},
              {"text": "Changed."}])
        async def send():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            try:
                return await c.request("session.send", session=session["id"], text="change it")
            finally:
                await c.close()
        self.assertTrue(self.run_async(send())["ok"])
        last_seq = events[-1]["seq"]
        events = [e for e in self.follow(session["id"], turns=2) if e["seq"] > last_seq]
        result = self.of(events, "result")[-1]
        self.assertEqual(result["turn"], 2)
        self.assertEqual({(f["path"], f["change"]) for f in result["files"]},
                         {("/home/agent/pkg", "delete"), ("/home/agent/pkg/mod.py", "delete"),
                          ("/home/agent/hello.py", "modify")})
        self.abort(session["id"])

    def test_symlinks_the_agent_plants_are_reported_as_links_and_never_followed_on_the_host(self):
        canary = tempfile.mkdtemp(prefix="corral-e2e-canary-")
        self.addCleanup(shutil.rmtree, canary, ignore_errors=True)
        with open(os.path.join(canary, "host-canary-file.txt"), "w") as f:
            f.write("the host's\n")
        os.mkdir(os.path.join(canary, "host-canary-dir"))
        climb = "../" * 12 + canary.lstrip("/")
        play([
            {"tool_use": {"name": "Bash", "input": {"command": (
                f"ln -s {canary} to-host && ln -s {climb} climb && ln -s /proc/1/root proc-root && "
                "mkdir real && echo in > real/host-canary-file.txt")}}},
            {"text": "Linked."},
        ])
        session = self.start(prompt="plant links")
        events = self.follow(session["id"])
        changes = {e["path"]: e for e in self.of(events, "file_change")}
        for name in ("to-host", "climb", "proc-root"):
            self.assertEqual(changes[f"/home/agent/{name}"]["type"], "symlink", changes)
        # Nothing from behind the links: the only canary name seen is the real directory's
        # (the control, in the sandbox's own tree).
        canary_paths = sorted(p for p in changes if "canary" in p)
        self.assertEqual(canary_paths, ["/home/agent/real/host-canary-file.txt"], changes)
        self.assertEqual(sorted(os.listdir(canary)), ["host-canary-dir", "host-canary-file.txt"])  # untouched
        self.abort(session["id"])

    def test_a_permission_prompt_and_a_client_tool_are_awaiting_input(self):
        play([
            {"tool_use": {"name": "Bash", "input": {"command": "echo yes > allowed.txt", "description": "write"}}},
            {"tool_use": {"name": "mcp__corral__lookup", "input": {"key": "color"}}},
            {"text": "done"},
        ])
        session = self.start(prompt="write and look up", permission_mode="default", tools=[{"name": "lookup"}])

        async def answer(c, event):
            if event.get("kind") == "permission_request":
                reply = await c.request("session.permission", session=session["id"], call=event["call"], allow=True)
                self.assertTrue(reply["ok"], reply)
            if event.get("kind") == "tool_call":
                reply = await c.request("session.tool_result", session=session["id"], call=event["call"], text="teal")
                self.assertTrue(reply["ok"], reply)
        events = self.follow(session["id"], answer)
        waiting = self.of(events, "awaiting_input")
        self.assertEqual([(e["reason"], e["name"]) for e in waiting], [("permission", "Bash"), ("tool", "lookup")])
        calls = [e["call"] for e in events if e.get("kind") in ("permission_request", "tool_call")]
        self.assertEqual([e["call"] for e in waiting], calls)
        # Each is followed by the state waiting_tool.
        for e in waiting:
            after = events[events.index(e) + 1]
            self.assertEqual((after.get("kind"), after.get("state")), ("state", "waiting_tool"))
        # The allowed command's file is a change; Claude Code's own files (its MCP server's logs
        # in ~/.cache with client tools, ~/.claude*) are not.
        files = {(f["path"], f["change"]) for f in self.of(events, "result")[0]["files"]}
        self.assertEqual(files, {("/home/agent/allowed.txt", "create")})
        self.abort(session["id"])

    def test_a_turn_that_changes_more_files_than_the_bound_reports_the_bound_and_counts_the_rest(self):
        play([
            {"tool_use": {"name": "Bash", "input": {"command": "mkdir many && cd many && seq 1 1500 | xargs touch"}}},
            {"text": "Made many."},
        ])
        session = self.start(prompt="make many files")
        events = self.follow(session["id"])
        changes = self.of(events, "file_change")
        result = self.of(events, "result")[0]
        self.assertEqual(len(changes), 1000)  # kMaxTurnFiles
        self.assertEqual(len(result["files"]), 1000)
        self.assertEqual(result["diff"]["created"], 1501)  # many/ and its 1500 files, all counted
        self.assertTrue(result["diff"]["truncated"])
        self.abort(session["id"])


if __name__ == "__main__":
    unittest.main()
