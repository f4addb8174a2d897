"""Agent sessions with the real Claude Code CLI (npm @anthropic-ai/claude-code, installed by
dist/install-deps.sh) in a real sandbox, against the scripted Messages API server
(tests/fixtures/scripted_model.py) behind corrald's model relay.

Each test plays a scenario: the model's answers, with the usage they report. The ledger must
match that usage to the micro-dollar, and the upstream must see the operator's key only.
"""
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from agent_turns import AgentTurns, user_texts
from corral_e2e import CORRAL, DaemonTestCase, WsClient, metric_delta, micro_usd, operator_key_file, relay_config

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures"))
import scripted_model  # noqa: E402

REAL_KEY = "sk-ant-e2e-sessions-operator-key"


class Upstream:
    """The scripted server with a scenario that tests replace between runs."""

    def __init__(self):
        self.server = scripted_model.serve({"turns": []}, port=0)

    def play(self, turns):
        self.server.script = scripted_model.Script({"turns": turns})
        self.server.requests.clear()

    def main_requests(self):
        return [r for r in self.server.requests if r.get("kind") == "main"]


_upstream = Upstream()
_key_dir, _key_file = operator_key_file("corral-e2e-sessions-", REAL_KEY)


@unittest.skipUnless(shutil.which("claude"), "Claude Code is not installed (dist/install-deps.sh installs it)")
class Sessions(DaemonTestCase):
    extra_config = relay_config(_upstream.server.port, _key_file) + """
[sessions]
tool_call_timeout = 4
agent_silence_timeout = 8
"""

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        _upstream.server.shutdown()
        _upstream.server.server_close()
        shutil.rmtree(_key_dir, ignore_errors=True)

    def setUp(self):
        self.owner = self.token("agent-user", budget={"ai_usd": 5, "window": "day"})
        self.sid = self.create_sandbox(self.owner)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{self.sid}", self.owner)

    def start(self, token=None, **body):
        status, session = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/sessions", token or self.owner, body)
        self.assertEqual(status, 201, session)
        return session

    def events_until(self, session_id, done, token=None, after_seq=0, timeout=120):
        """Attaches to the session's events and collects them until done(events) is true."""
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token or self.owner)
            try:
                reply = await c.request("session.attach", session=session_id, after_seq=after_seq)
                self.assertTrue(reply["ok"], reply)
                events = []
                while not done(events):
                    events.append(await c.next_event(timeout=timeout))
                return events
            finally:
                await c.close()
        return self.run_async(go())

    @staticmethod
    def turn_done(events):
        results = [e for e in events if e.get("kind") == "agent" and e["data"].get("type") == "result"]
        return bool(results) and any(e.get("kind") == "state" and e.get("state") == "ready"
                                     for e in events[events.index(results[-1]):])

    def read_file(self, path):
        conn = http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=30)
        conn.request("GET", f"/v1/sandboxes/{self.sid}/fs/read?path={path}",
                     headers={"Authorization": f"Bearer {self.owner}"})
        try:
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def test_a_session_runs_the_agent_which_writes_a_file_and_pays_exactly_its_usage(self):
        turns = [
            {"text": "I'll create the file.",
             "tool_use": {"name": "Bash", "input": {"command": "echo hi > hello.txt", "description": "write"}},
             "usage": {"input_tokens": 1200, "output_tokens": 40, "cache_creation_input_tokens": 300}},
            {"text": "done",
             "usage": {"input_tokens": 1300, "output_tokens": 5, "cache_read_input_tokens": 300}},
        ]
        _upstream.play(turns)
        before = self.daemon.metrics()
        session = self.start(prompt="create hello.txt containing hi")
        self.assertIn(session["state"], ("processing", "initializing"))
        events = self.events_until(session["id"], self.turn_done)
        during = self.daemon.metrics()
        kinds = [e.get("kind") for e in events]
        self.assertIn("agent", kinds)
        agent_types = [e["data"].get("type") for e in events if e.get("kind") == "agent"]
        self.assertEqual(agent_types[0], "system")
        self.assertIn("assistant", agent_types)
        self.assertEqual(agent_types[-1], "result")
        seqs = [e["seq"] for e in events]
        self.assertEqual(seqs, sorted(seqs))
        # The agent's tool call ran in the sandbox, in the workspace.
        status, content = self.read_file("/home/agent/hello.txt")
        self.assertEqual((status, content), (200, b"hi\n"))
        # Metered: each model call's usage, priced, to the micro-dollar.
        expected = sum(micro_usd(t["usage"]) for t in turns)
        status, row = self.daemon.http("GET", f"/v1/sessions/{session['id']}", self.owner)
        self.assertEqual(status, 200, row)
        self.assertEqual(row["cost_usd"], f"{expected // 1000000}.{expected % 1000000:06d}")
        self.assertEqual(row["turns"], 1)
        usage_events = [e for e in events if e.get("kind") == "usage"]
        self.assertEqual(len(usage_events), len(_upstream.main_requests()))
        # The upstream saw the operator's key, never the session's placeholder.
        for request in _upstream.server.requests:
            self.assertEqual(request["headers"].get("x-api-key"), REAL_KEY)
        # The session ends when the client closes it.
        reply = self.ws("session.close", session=session["id"])
        self.assertTrue(reply["ok"], reply)
        end = self.events_until(session["id"], lambda ev: any(e.get("event") == "session_end" for e in ev))
        self.assertEqual(end[-1]["state"], "completed")
        self.assertEqual(end[-1]["outcome"]["outcome"], "completed")
        # /metrics moved by exactly this: the tokens of the scenario's usage (under the price
        # table's key, here "default"), the ledger's dollars, a forwarded request for each the
        # upstream got, no budget refusal; the session counted ready, then completed.
        after = self.daemon.metrics()
        for kind, field in (("input", "input_tokens"), ("output", "output_tokens"),
                            ("cache_write", "cache_creation_input_tokens"), ("cache_read", "cache_read_input_tokens")):
            self.assertEqual(metric_delta(before, after, "corral_model_tokens_total", model="default", kind=kind),
                             sum(t["usage"].get(field, 0) for t in turns), kind)
        self.assertEqual(metric_delta(before, after, "corral_model_tokens_total", model="other"), 0)
        self.assertEqual(round(metric_delta(before, after, "corral_model_cost_usd_total", model="default") * 1e6),
                         expected)
        upstream_requests = len(_upstream.server.requests)
        self.assertEqual(metric_delta(before, after, "corral_model_requests_total", result="forwarded"),
                         upstream_requests)
        self.assertEqual(metric_delta(before, after, "corral_model_upstream_latency_seconds_count"), upstream_requests)
        self.assertEqual(metric_delta(before, after, "corral_model_requests_total", result="refused_budget"), 0)
        self.assertEqual(metric_delta(before, after, "corral_budget_refusals_total"), 0)
        self.assertEqual(metric_delta(before, during, "corral_sessions_running", state="ready"), 1)
        self.assertEqual(metric_delta(before, after, "corral_sessions_running"), 0)
        self.assertEqual(metric_delta(before, after, "corral_sessions_total", outcome="completed"), 1)
        self.assertEqual(metric_delta(before, after, "corral_sessions_total"), 1)

    def run_turn(self, turns, **body):
        """Starts (or resumes, or forks) a session with a prompt, waits for its turn to end,
        closes it and waits for its end; returns (session, main requests the upstream got)."""
        _upstream.play(turns)
        session = self.start(**body)
        self.events_until(session["id"], self.turn_done)
        reply = self.ws("session.close", session=session["id"])
        self.assertTrue(reply["ok"], reply)
        end = self.events_until(session["id"], lambda ev: any(e.get("event") == "session_end" for e in ev))
        self.assertEqual(end[-1]["state"], "completed", end[-1])
        return session, _upstream.main_requests()

    user_texts = staticmethod(user_texts)
    ws = AgentTurns.ws  # one request over a WebSocket of its own

    def test_a_resumed_session_has_its_history_and_a_fork_diverges_from_it(self):
        first, requests = self.run_turn([{"text": "noted: the word is PELICAN"}], prompt="remember PELICAN")
        self.assertTrue(any("remember PELICAN" in t for t in self.user_texts(requests[-1])))
        # Resumed: the same session, the next request carries the first turn.
        resumed, requests = self.run_turn([{"text": "it was PELICAN"}], resume=first["id"], prompt="what was it?")
        self.assertEqual(resumed["id"], first["id"])
        texts = self.user_texts(requests[0])
        self.assertTrue(any("remember PELICAN" in t for t in texts), texts)
        self.assertTrue(any("what was it?" in t for t in texts), texts)
        status, row = self.daemon.http("GET", f"/v1/sessions/{first['id']}", self.owner)
        self.assertEqual((status, row["turns"]), (200, 2), row)
        # Forked: a new session with the history so far, whose own turn the original never sees.
        fork, requests = self.run_turn([{"text": "forked"}], fork=first["id"], prompt="only in the fork")
        self.assertNotEqual(fork["id"], first["id"])
        status, row = self.daemon.http("GET", f"/v1/sessions/{fork['id']}", self.owner)
        self.assertEqual((status, row["parent"]), (200, first["id"]), row)
        self.assertNotEqual(row["agent_session"], "")
        texts = self.user_texts(requests[0])
        self.assertTrue(any("remember PELICAN" in t for t in texts), texts)
        again, requests = self.run_turn([{"text": "back"}], resume=first["id"], prompt="and now?")
        texts = self.user_texts(requests[0])
        self.assertTrue(any("what was it?" in t for t in texts), texts)
        self.assertFalse(any("only in the fork" in t for t in texts), texts)
        # Control: a running session cannot be resumed twice.
        _upstream.play([{"text": "x"}])
        live = self.start(resume=first["id"])
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/sessions", self.owner,
                                        {"resume": first["id"]})
        self.assertEqual(status, 409, body)
        self.ws("session.abort", session=live["id"])

    def test_the_sandbox_only_ever_sees_the_placeholder_key(self):
        _upstream.play([{"text": "I'll look.",
                         "tool_use": {"name": "Bash", "input": {"command": "sleep 1; echo looked"}}},
                        {"text": "done"}])
        session = self.start(prompt="look around")
        # While the agent runs: every process's environment and the workspace, from inside.
        # (The key goes to grep on its stdin, in two halves here, so no command line holds it.)
        half = len(REAL_KEY) // 2
        script = (f"sleep 0.5; echo REAL; printf '%s%s\\n' '{REAL_KEY[:half]}' '{REAL_KEY[half:]}' | "
                  "grep -rsl -f - /proc/[0-9]*/environ /proc/[0-9]*/cmdline /home /tmp /etc; "
                  # Control: the same search finds the placeholder key in the agent's environment.
                  "echo PLACEHOLDER; printf 'ANTHROPIC_API_KEY=sk-corral-\\n' | grep -rsl -f - /proc/[0-9]*/environ")
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            try:
                return await c.run(self.sid, ["sh", "-c", script])
            finally:
                await c.close()
        out, err, outcome, _ = self.run_async(go())
        text = out.decode()
        real, placeholder = text.split("PLACEHOLDER")
        self.assertEqual(real.split(), ["REAL"], (text, err))
        self.assertTrue(placeholder.split(), (text, err))
        self.events_until(session["id"], self.turn_done)
        self.ws("session.abort", session=session["id"])

    def corral(self, *args, token=None, cwd=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        env.update(CORRAL_URL=f"http://127.0.0.1:{self.daemon.port}", CORRAL_TOKEN=token or self.owner)
        # A session of its own: no controlling terminal, so nobody can be asked for consent.
        return subprocess.run([CORRAL, *args], env=env, capture_output=True, text=True, timeout=120, cwd=cwd,
                              stdin=subprocess.DEVNULL, start_new_session=True)

    def test_corral_prompt_runs_host_tools_here_with_consent(self):
        workdir = tempfile.mkdtemp(prefix="corral-e2e-host-")
        self.addCleanup(shutil.rmtree, workdir, ignore_errors=True)
        with open(os.path.join(workdir, "notes.txt"), "w") as f:
            f.write("the answer is 42\n")
        turns = [
            {"tool_use": {"name": "mcp__corral__HostRead", "input": {"path": "notes.txt"}}},
            {"tool_use": {"name": "mcp__corral__HostWrite", "input": {"path": "from-agent.txt", "content": "hello host"}}},
            {"tool_use": {"name": "mcp__corral__HostBash", "input": {"command": "ls > listing.txt"}}},
            {"text": "Done on your machine."},
        ]
        _upstream.play(turns)
        proc = self.corral("prompt", "--sandbox", self.sid, "--allow-host-tools", "--yes", "work here", cwd=workdir)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("Done on your machine.", proc.stdout)
        # The tools ran on the host, in the directory corral was started in, not in the sandbox.
        with open(os.path.join(workdir, "from-agent.txt")) as f:
            self.assertEqual(f.read(), "hello host")
        with open(os.path.join(workdir, "listing.txt")) as f:
            self.assertIn("notes.txt", f.read())
        self.assertEqual(self.read_file("/home/agent/from-agent.txt")[0], 404)
        # And the model got what they returned.
        read_result = self.tool_results(_upstream.main_requests()[1])
        self.assertIn("the answer is 42", self.result_text(read_result[0]))
        self.assertIn("mcp__corral__HostBash", {t["name"] for t in _upstream.main_requests()[0]["body"]["tools"]})

        # Without --yes and without a terminal to ask, nothing runs: the agent is told no.
        _upstream.play([
            {"tool_use": {"name": "mcp__corral__HostWrite", "input": {"path": "refused.txt", "content": "x"}}},
            {"text": "It was refused."},
        ])
        proc = self.corral("prompt", "--sandbox", self.sid, "--allow-host-tools", "try again", cwd=workdir)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(workdir, "refused.txt")))
        refused = self.tool_results(_upstream.main_requests()[1])
        self.assertTrue(refused[0].get("is_error"), refused)
        self.assertIn("did not allow", self.result_text(refused[0]))

    def test_corral_prompt_streams_a_turn_and_its_cost_and_resumes_it(self):
        turns = [
            {"text": "I'll create the file.",
             "tool_use": {"name": "Bash", "input": {"command": "echo hi > hello.txt"}},
             "usage": {"input_tokens": 1000, "output_tokens": 20}},
            {"text": "Created hello.txt.", "usage": {"input_tokens": 1100, "output_tokens": 10}},
        ]
        _upstream.play(turns)
        proc = self.corral("prompt", "--sandbox", self.sid, "--keep", "create hello.txt that says hi")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("I'll create the file.", proc.stdout)
        self.assertIn("* Bash(echo hi > hello.txt)", proc.stdout)
        self.assertIn("Created hello.txt.", proc.stdout)
        expected = sum(micro_usd(t["usage"]) for t in turns)
        self.assertIn(f"USD 0.{expected:06d}", proc.stderr)
        session = proc.stderr.split("session ", 1)[1].split()[0]
        self.assertTrue(session.startswith("ses_"), proc.stderr)
        # --keep left it ready; a follow-up resumes it with its history (the default sandbox:
        # the newest running one).
        _upstream.play([{"text": "It says hi.", "usage": {"input_tokens": 1200, "output_tokens": 5}}])
        proc = self.corral("prompt", "--resume", session, "what does it say?")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("It says hi.", proc.stdout)
        self.assertNotIn("Created hello.txt.", proc.stdout)  # only the new turn is shown
        self.assertTrue(any("what does it say?" in t for t in self.user_texts(_upstream.main_requests()[0])))
        self.assertTrue(any("create hello.txt" in t for t in self.user_texts(_upstream.main_requests()[0])))
        status, row = self.daemon.http("GET", f"/v1/sessions/{session}", self.owner)
        self.assertEqual((status, row["state"], row["turns"]), (200, "completed", 2), row)
        # And once ended, --resume runs it again with its history.
        _upstream.play([{"text": "Still hi.", "usage": {"input_tokens": 1300, "output_tokens": 5}}])
        proc = self.corral("prompt", "--resume", session, "and now?")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("Still hi.", proc.stdout)
        # Refused: a session that is not the caller's, as if it did not exist.
        proc = self.corral("prompt", "--resume", session, "x", token=self.token("stranger", budget={"ai_usd": 1}))
        self.assertEqual(proc.returncode, 2)
        self.assertIn("not_found", proc.stderr)

    def agent_processes(self):
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            try:
                return await c.run(self.sid, ["sh", "-c", "grep -l '^claude' /proc/[0-9]*/cmdline 2>/dev/null | wc -l"])
            finally:
                await c.close()
        out, _, _, _ = self.run_async(go())
        return int(out.decode().strip() or "0")

    def test_a_restarted_daemon_ends_running_sessions_resumably_and_leaves_no_agent_behind(self):
        _upstream.play([{"text": "first", "usage": {"input_tokens": 10, "output_tokens": 1}}])
        session = self.start(prompt="hello")
        self.events_until(session["id"], self.turn_done)  # ready, its agent waiting for a message
        self.assertEqual(self.agent_processes(), 1)      # control: the agent is there
        self.daemon.stop()
        self.daemon.start()
        status, row = self.daemon.http("GET", f"/v1/sessions/{session['id']}", self.owner)
        self.assertEqual((status, row["state"], row["outcome"]["outcome"]), (200, "idle", "daemon_restarted"), row)
        deadline = time.time() + 10
        while self.agent_processes() and time.time() < deadline:
            time.sleep(0.2)
        self.assertEqual(self.agent_processes(), 0)
        # It goes on from its transcript.
        _upstream.play([{"text": "second", "usage": {"input_tokens": 20, "output_tokens": 1}}])
        resumed = self.start(resume=session["id"], prompt="again")
        self.events_until(resumed["id"], self.turn_done)
        self.assertTrue(any("hello" in t for t in self.user_texts(_upstream.main_requests()[0])))
        self.ws("session.abort", session=session["id"])

    def test_a_session_without_an_ai_budget_stops_with_budget_exhausted(self):
        _upstream.play([{"text": "never reached"}])
        broke = self.token("agent-user", budget={"ai_usd": 0, "window": "day"})
        session = self.start(token=broke, prompt="hello")
        events = self.events_until(session["id"], lambda ev: any(e.get("event") == "session_end" for e in ev),
                                   token=broke)
        end = events[-1]
        self.assertEqual(end["outcome"]["outcome"], "budget_exhausted")
        self.assertEqual(end["state"], "failed")
        self.assertEqual(_upstream.main_requests(), [])
        # Control: the same with a budget reaches the model (the test above).
        status, row = self.daemon.http("GET", f"/v1/sessions/{session['id']}", broke)
        self.assertEqual((status, row["cost_usd"]), (200, "0.000000"))

    def drive(self, session_id, on_event, timeout=120):
        """Attaches to a session and hands each event to on_event(client, event) (a coroutine)
        until it returns True; returns every event seen."""
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            try:
                reply = await c.request("session.attach", session=session_id)
                self.assertTrue(reply["ok"], reply)
                events = []
                while True:
                    event = await c.next_event(timeout=timeout)
                    events.append(event)
                    if await on_event(c, event, events):
                        return events
            finally:
                await c.close()
        return self.run_async(go())

    @staticmethod
    def tool_results(request):
        """The tool_result blocks of a Messages request's last user message."""
        last = [m for m in request["body"]["messages"] if m.get("role") == "user"][-1]
        content = last["content"] if isinstance(last["content"], list) else []
        return [c for c in content if isinstance(c, dict) and c.get("type") == "tool_result"]

    @staticmethod
    def result_text(block):
        content = block.get("content")
        if isinstance(content, str):
            return content
        return "".join(c.get("text", "") for c in content or [] if isinstance(c, dict))

    def test_a_client_tool_call_round_trips_through_the_websocket(self):
        _upstream.play([
            {"text": "Let me look it up.", "tool_use": {"name": "mcp__corral__lookup", "input": {"key": "color"}},
             "usage": {"input_tokens": 900, "output_tokens": 20}},
            {"text": "The color is teal.", "usage": {"input_tokens": 950, "output_tokens": 6}},
        ])
        tools = [{"name": "lookup", "description": "Looks a key up in the page's own store",
                  "input_schema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}]
        session = self.start(prompt="what color is it?", tools=tools)

        async def answer(c, event, events):
            if event.get("kind") == "tool_call":
                reply = await c.request("session.tool_result", session=session["id"], call=event["call"], text="teal")
                self.assertTrue(reply["ok"], reply)
                # A second answer to the same call is refused: it was answered.
                again = await c.request("session.tool_result", session=session["id"], call=event["call"], text="x")
                self.assertEqual(again["error"]["code"], "not_found", again)
            return self.turn_done(events)
        events = self.drive(session["id"], answer)
        calls = [e for e in events if e.get("kind") == "tool_call"]
        self.assertEqual(len(calls), 1, events)
        self.assertEqual((calls[0]["name"], calls[0]["input"]), ("lookup", {"key": "color"}))
        states = [e["state"] for e in events if e.get("kind") == "state"]
        self.assertIn("waiting_tool", states)
        self.assertEqual(states[-1], "ready")
        # The model saw the declared tool with its schema, and got the client's answer.
        main = _upstream.main_requests()
        offered = {t["name"]: t for t in main[0]["body"]["tools"]}
        self.assertIn("mcp__corral__lookup", offered)
        self.assertEqual(offered["mcp__corral__lookup"]["input_schema"]["required"], ["key"])
        results = self.tool_results(main[1])
        self.assertEqual([self.result_text(r) for r in results], ["teal"])
        self.assertFalse(results[0].get("is_error", False))

    def test_an_unanswered_tool_call_times_out_with_an_error_result(self):
        _upstream.play([
            {"text": "Asking.", "tool_use": {"name": "mcp__corral__lookup", "input": {"key": "size"}}},
            {"text": "The tool did not answer."},
        ])
        session = self.start(prompt="what size?", tools=[{"name": "lookup"}])
        events = self.drive(session["id"], lambda c, e, ev: self._async(self.turn_done(ev)))
        self.assertTrue(any(e.get("kind") == "tool_call" for e in events))
        results = self.tool_results(_upstream.main_requests()[1])
        self.assertEqual(len(results), 1)
        self.assertTrue(results[0].get("is_error"), results)
        self.assertIn("did not answer", self.result_text(results[0]))
        timed_out = [e for e in events if e.get("kind") == "tool_result"]
        self.assertEqual([e["is_error"] for e in timed_out], [True])

    @staticmethod
    async def _async(value):
        return value

    def test_permission_requests_go_to_the_client_which_denies_one_and_allows_another(self):
        _upstream.play([
            {"tool_use": {"name": "Bash", "input": {"command": "echo no > denied.txt", "description": "write"}}},
            {"tool_use": {"name": "Bash", "input": {"command": "echo yes > allowed.txt", "description": "write"}}},
            {"text": "done"},
        ])
        session = self.start(prompt="write two files", permission_mode="default")

        async def decide(c, event, events):
            if event.get("kind") == "permission_request":
                allow = "allowed.txt" in event["input"].get("command", "")
                reply = await c.request("session.permission", session=session["id"], call=event["call"], allow=allow,
                                        message="not that one")
                self.assertTrue(reply["ok"], reply)
            return self.turn_done(events)
        events = self.drive(session["id"], decide)
        asked = [e for e in events if e.get("kind") == "permission_request"]
        self.assertEqual([e["tool_name"] for e in asked], ["Bash", "Bash"])
        # Denied: never ran, and the agent was told why; allowed: ran in the sandbox.
        self.assertEqual(self.read_file("/home/agent/denied.txt")[0], 404)
        self.assertEqual(self.read_file("/home/agent/allowed.txt"), (200, b"yes\n"))
        denial = self.tool_results(_upstream.main_requests()[1])
        self.assertIn("not that one", self.result_text(denial[0]))

    def test_an_agent_silent_past_the_timeout_is_stopped_as_hung_and_can_resume(self):
        _upstream.play([{"text": "too late", "delay": 25}])
        session = self.start(prompt="take your time")
        started = time.monotonic()
        events = self.events_until(session["id"], lambda ev: any(e.get("event") == "session_end" for e in ev))
        self.assertLess(time.monotonic() - started, 20)
        self.assertTrue(any(e.get("kind") == "agent_hung" for e in events), events)
        end = events[-1]
        self.assertEqual((end["state"], end["outcome"]["outcome"]), ("failed", "agent_hung"), end)
        self.assertEqual(self.agent_processes(), 0)
        # Control: a resumed session whose model answers in time finishes its turn.
        _upstream.play([{"text": "back again"}])
        resumed = self.start(resume=session["id"], prompt="are you there?")
        events = self.events_until(resumed["id"], self.turn_done)
        self.assertFalse(any(e.get("kind") == "agent_hung" for e in events))

    def test_a_session_whose_sandbox_spends_the_compute_budget_ends_budget_exhausted(self):
        frugal = self.token("frugal-user", budget={"ai_usd": 5, "compute_s": 3, "window": "day"})
        status, sandbox = self.daemon.http("POST", "/v1/sandboxes", frugal, {})
        self.assertEqual(status, 201, sandbox)
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sandbox['id']}", frugal)
        _upstream.play([
            {"tool_use": {"name": "Bash", "input": {"command": "while :; do :; done", "description": "spin"}}},
            {"text": "never reached"},
        ])
        before = self.daemon.metrics()
        status, session = self.daemon.http("POST", f"/v1/sandboxes/{sandbox['id']}/sessions", frugal,
                                           {"prompt": "spin"})
        self.assertEqual(status, 201, session)
        events = self.events_until(session["id"], lambda ev: any(e.get("event") == "session_end" for e in ev),
                                   token=frugal, timeout=60)
        end = events[-1]
        self.assertEqual((end["state"], end["outcome"]["outcome"]), ("failed", "budget_exhausted"), end)
        self.assertEqual(end["outcome"]["process"]["outcome"], "budget_exhausted")
        after = self.daemon.metrics()
        self.assertEqual(metric_delta(before, after, "corral_budget_refusals_total", kind="compute_stop"), 1)
        self.assertEqual(metric_delta(before, after, "corral_budget_refusals_total", kind="ai"), 0)
        self.assertEqual(metric_delta(before, after, "corral_sessions_total", outcome="budget_exhausted"), 1)
        status, usage = self.daemon.http("GET", "/v1/usage", frugal)
        self.assertGreaterEqual(usage["compute"]["spent_s"], 3.0, usage)
        self.assertEqual(usage["compute"]["remaining_s"], 0.0)
        # The session's model call is in the same report, priced.
        self.assertEqual([s["session"] for s in usage["sessions"]], [session["id"]])
        self.assertGreater(float(usage["ai"]["spent_usd"]), 0)

    def test_tools_and_fields_are_checked(self):
        for request, fragment in (({"tools": [{"name": "bad name"}]}, "A-Z"),
                                  ({"tools": [{"name": "a"}, {"name": "a"}]}, "twice"),
                                  ({"tools": [{"name": "corral_permission"}]}, "daemon's own"),
                                  ({"tools": [{"name": "x", "input_schema": "nope"}]}, "schema"),
                                  ({"tools": [{"name": "x", "inputSchema": {}}]}, "inputSchema"),
                                  ({"prompt": "hi", "permissionMode": "plan"}, "permissionMode")):
            with self.subTest(fragment=fragment):
                status, body = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/sessions", self.owner, request)
                self.assertEqual(status, 400, body)
                self.assertIn(fragment, body["error"]["message"])

    def test_a_budget_spent_mid_session_stops_the_agent_and_the_ledger_matches_to_the_micro_dollar(self):
        # USD 0.01 a day: the first call (0.0120) is admitted and overspends, the second refused.
        tight = self.token("tight-user", budget={"ai_usd": 0.01, "window": "day"})
        status, sandbox = self.daemon.http("POST", "/v1/sandboxes", tight, {})
        self.assertEqual(status, 201, sandbox)
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sandbox['id']}", tight)
        first = {"input_tokens": 3000, "output_tokens": 200}  # 3000*3 + 200*15 = 12000 micro-dollars
        _upstream.play([
            {"text": "Working.", "tool_use": {"name": "Bash", "input": {"command": "echo step1 > step1.txt"}},
             "usage": first},
            {"text": "never reached", "usage": {"input_tokens": 5, "output_tokens": 5}},
        ])
        before = self.daemon.metrics()
        status, session = self.daemon.http("POST", f"/v1/sandboxes/{sandbox['id']}/sessions", tight,
                                           {"prompt": "do two steps"})
        self.assertEqual(status, 201, session)
        events = self.events_until(session["id"], lambda ev: any(e.get("event") == "session_end" for e in ev),
                                   token=tight)
        end = events[-1]
        self.assertEqual((end["state"], end["outcome"]["outcome"]), ("failed", "budget_exhausted"), end)
        self.assertTrue(any(e.get("kind") == "budget_exhausted" for e in events))
        # The first call went up and was paid for exactly; nothing after it left the relay.
        self.assertEqual(len(_upstream.main_requests()), 1)
        self.assertEqual(end["outcome"]["cost_usd"], "0.012000")
        status, usage = self.daemon.http("GET", "/v1/usage", tight)
        self.assertEqual((usage["ai"]["spent_usd"], usage["ai"]["calls"]), ("0.012000", 1), usage)
        self.assertEqual(usage["ai"]["remaining_usd"], "0.000000")
        # /metrics: the first call's dollars exactly, then the refusal, counted as a request's
        # result and as a budget refusal alike; the session ended budget_exhausted.
        after = self.daemon.metrics()
        self.assertEqual(round(metric_delta(before, after, "corral_model_cost_usd_total") * 1e6), 12000)
        self.assertEqual(metric_delta(before, after, "corral_model_tokens_total", kind="input"), 3000)
        self.assertEqual(metric_delta(before, after, "corral_model_tokens_total", kind="output"), 200)
        refused = metric_delta(before, after, "corral_model_requests_total", result="refused_budget")
        self.assertGreaterEqual(refused, 1)
        self.assertEqual(metric_delta(before, after, "corral_budget_refusals_total", kind="ai"), refused)
        self.assertEqual(metric_delta(before, after, "corral_sessions_total", outcome="budget_exhausted"), 1)

    def test_a_tool_call_cannot_write_into_the_agents_event_stream(self):
        # Commands may reopen their own stdio pipes by path, because corrald gives the pipes to the
        # command's user (issue 16; test_sandbox_view). Not the agent: its stdout is the session's
        # event stream, and its tool calls run as the same user, `agent`. So a session's command is
        # started with private_stdio and its pipes stay the daemon's, host root's, mode 0600. A tool
        # call passes the ptrace check of /proc/<claude>/fd/1 (same uid, claude is dumpable) but not
        # the inode's: its owner is not the caller, and root on the host is unmapped in the
        # sandbox's user namespace, so no capability inside could override it (and the tool call
        # has none). Hence "Permission denied", and no forged result.
        inject = ("for p in /proc/[0-9]*; do if tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -q '^claude -p'; then "
                  "printf '{\"type\":\"result\",\"result\":\"forged\"}\\n' > $p/fd/1; fi; done; echo tried")
        _upstream.play([
            {"tool_use": {"name": "Bash", "input": {"command": inject, "description": "inject"}}},
            {"text": "still here"},
        ])
        session = self.start(prompt="go")
        events = self.events_until(session["id"], self.turn_done)
        outputs = [c.get("content") for e in events if e.get("kind") == "agent" and e["data"].get("type") == "user"
                   for c in e["data"]["message"]["content"] if isinstance(c, dict)]
        self.assertTrue(any("Permission denied" in str(o) and "tried" in str(o) for o in outputs), outputs)
        results = [e["data"].get("result") for e in events
                   if e.get("kind") == "agent" and e["data"].get("type") == "result"]
        self.assertEqual(results, ["still here"])  # control: the real result, and no forged one

    def test_another_users_session_is_not_found(self):
        _upstream.play([{"text": "hi", "usage": {"input_tokens": 10, "output_tokens": 1}}])
        session = self.start()
        other = self.token("someone-else", budget={"ai_usd": 5})
        status, body = self.daemon.http("GET", f"/v1/sessions/{session['id']}", other)
        self.assertEqual(status, 404, body)
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), other)
            try:
                return [await c.request(op, session=session["id"], text="x")
                        for op in ("session.attach", "session.send", "session.abort")]
            finally:
                await c.close()
        for reply in self.run_async(go()):
            self.assertFalse(reply["ok"])
            self.assertEqual(reply["error"]["code"], "not_found", reply)
        # Control: the owner aborts it.
        reply = self.ws("session.abort", session=session["id"])
        self.assertTrue(reply["ok"], reply)
        end = self.events_until(session["id"], lambda ev: any(e.get("event") == "session_end" for e in ev))
        self.assertEqual(end[-1]["state"], "aborted")


if __name__ == "__main__":
    unittest.main()
