"""Agent turns for the e2e tests of sessions in sandboxes: attach to a session's events, run a
command, read a file, and one scripted turn with a Bash tool call whose output, file, result and
cost are checked. A mixin for a DaemonTestCase whose class sets `upstream` (a scripted_model
server behind the daemon's relay) and `real_key` (the operator's key the relay must send), and
whose tests set `self.owner` (a user's token with an AI budget)."""
import http.client
import os
import sys

from corral_e2e import WsClient, micro_usd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import scripted_model  # noqa: E402


def user_texts(request):
    """The user messages' text in a Messages request, in order."""
    texts = []
    for message in request["body"]["messages"]:
        if message.get("role") != "user":
            continue
        content = message["content"]
        parts = [content] if isinstance(content, str) else [c.get("text", "") for c in content
                                                             if isinstance(c, dict) and c.get("type") == "text"]
        texts.extend(p for p in parts if p)
    return texts


class AgentTurns:
    user_texts = staticmethod(user_texts)

    def events_until(self, session_id, done, timeout=120):
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            try:
                reply = await c.request("session.attach", session=session_id, after_seq=0)
                self.assertTrue(reply["ok"], reply)
                events = []
                while not done(events):
                    events.append(await c.next_event(timeout=timeout))
                return events
            finally:
                await c.close()
        return self.run_async(go())

    def ws(self, op, **fields):
        """One request over a WebSocket of its own; its reply."""
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            try:
                return await c.request(op, **fields)
            finally:
                await c.close()
        return self.run_async(go())

    def run_in(self, sid, argv):
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), self.owner)
            try:
                return await c.run(sid, argv)
            finally:
                await c.close()
        return self.run_async(go())

    def read_file(self, sid, path):
        conn = http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=30)
        conn.request("GET", f"/v1/sandboxes/{sid}/fs/read?path={path}",
                     headers={"Authorization": f"Bearer {self.owner}"})
        try:
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    @staticmethod
    def turn_done(events):
        results = [e for e in events if e.get("kind") == "agent" and e["data"].get("type") == "result"]
        return bool(results) and any(e.get("kind") == "state" and e.get("state") == "ready"
                                     for e in events[events.index(results[-1]):])

    @staticmethod
    def tool_output(request):
        """The text of the tool_result blocks in a Messages request's last user message."""
        last = [m for m in request["body"]["messages"] if m.get("role") == "user"][-1]
        text = ""
        for block in last["content"] if isinstance(last["content"], list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                content = block.get("content")
                text += content if isinstance(content, str) else "".join(
                    c.get("text", "") for c in content or [] if isinstance(c, dict))
        return text

    def one_turn_with_bash(self, sid, command):
        """A session turn whose one Bash call runs `command`, which writes "hi" to hello.txt in the
        agent's home: (the tool's output, the session row)."""
        turns = [
            {"text": "Let me look.", "tool_use": {"name": "Bash", "input": {"command": command, "description": "look"}},
             "usage": {"input_tokens": 1100, "output_tokens": 30, "cache_creation_input_tokens": 200}},
            {"text": "done", "usage": {"input_tokens": 1200, "output_tokens": 4, "cache_read_input_tokens": 200}},
        ]
        self.upstream.script = scripted_model.Script({"turns": turns})
        self.upstream.requests.clear()
        status, session = self.daemon.http("POST", f"/v1/sandboxes/{sid}/sessions", self.owner,
                                           {"prompt": "look around"})
        self.assertEqual(status, 201, f"{session}\n{self.daemon_errors()}")
        events = self.events_until(session["id"], self.turn_done)
        result = [e for e in events if e.get("kind") == "agent" and e["data"].get("type") == "result"][-1]
        self.assertFalse(result["data"].get("is_error"), result)
        main = [r for r in self.upstream.requests if r.get("kind") == "main"]
        self.assertEqual(len(main), 2, [r.get("path") for r in self.upstream.requests])
        status, row = self.daemon.http("GET", f"/v1/sessions/{session['id']}", self.owner)
        self.assertEqual(status, 200, row)
        expected = sum(micro_usd(t["usage"]) for t in turns)
        self.assertEqual(row["cost_usd"], f"{expected // 1000000}.{expected % 1000000:06d}")
        self.assertEqual(row["turns"], 1)
        for request in self.upstream.requests:
            self.assertEqual(request["headers"].get("x-api-key"), self.real_key)
        output = self.tool_output(main[1])
        status, content = self.read_file(sid, "/home/agent/hello.txt")
        self.assertEqual((status, content), (200, b"hi\n"), output)
        return output, row
