"""A malformed or hostile daemon (or whatever answers at its address) must not crash the client's
reader: the WebSocket here is a small server of the test's that answers each request only after
a burst of junk (text that is no JSON, JSON that is no object, ids of every type, session events
whose fields have the wrong types, short binary frames, an `exit` for a command with a bogus seq),
then the real reply. The client goes on: later requests are answered on the same socket (no
reconnect), and the session's well-formed events, interleaved with junk, arrive typed, its turn's
result with them. No corrald: the server is the attacker."""
import asyncio
import json
import unittest

import websockets.server

import corral

JUNK_TEXT = ["not json", "[1, 2]", "null", "42", '"str"', "{" * 5000 + "}" * 5000, '{"id": [1], "ok": true}',
             '{"id": {"a": 1}, "ok": false, "error": "boom"}', '{"id": 1.5, "ok": true}', '{"event": 5}',
             '{"event": "exit", "command": "cmd_x", "seq": "NaN", "outcome": "x"}',
             '{"event": "sandbox", "sandbox": "sb_x", "seq": "x"}']
JUNK_BINARY = [b"", b"\x01", b"\x01\x01\x00\x00\x00\x07" + b"\xff" * 3]
JUNK_SESSION = [
    {"seq": "x", "kind": "state", "state": "ready"}, {"seq": [1], "kind": "agent"}, {"seq": 1e400, "kind": "todo"},
    {"seq": 1, "kind": "agent", "data": "a string"},
    {"seq": 2, "kind": "agent", "data": {"type": "assistant", "message": {"content": ["text", 5, None]}}},
    {"seq": 3, "kind": "agent", "data": {"type": "user", "message": "no"}},
    {"seq": 4, "kind": "todo", "todos": {"not": "a list"}},
    {"seq": 5, "kind": "file_change", "path": {"x": 1}, "size": "big"},
    {"seq": 6, "kind": "result", "turn": "one", "files": [1, "x", None], "diff": "all"},
    {"seq": 7, "kind": "usage", "input_tokens": {"x": 1}, "session_cost_usd": None},
    {"seq": 8, "kind": "tool_call", "call": None, "name": ["x"]},
]
GOOD_SESSION = [
    {"seq": 9, "kind": "todo", "todos": [{"content": "Work", "status": "in_progress", "active_form": "Working"}]},
    {"seq": 10, "kind": "agent", "data": {"type": "result", "result": "fine", "is_error": False}},
    {"seq": 11, "kind": "file_change", "path": "/home/agent/a", "change": "create", "type": "file", "size": 1},
    {"seq": 12, "kind": "result", "turn": 1, "is_error": False, "subtype": "success", "text": "fine",
     "files": [{"path": "/home/agent/a", "change": "create", "type": "file", "size": 1}],
     "diff": {"files": 1, "created": 1, "modified": 0, "deleted": 0, "truncated": False, "observed": True}},
]


class HostileDaemon(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self):
        self.connections = 0
        self.server = await websockets.server.serve(self.serve, "127.0.0.1", 0, subprotocols=["corral.v1"])
        self.addAsyncCleanup(self.server.wait_closed)
        self.addCleanup(self.server.close)
        port = self.server.sockets[0].getsockname()[1]
        self.client = corral.AsyncCorral(f"http://127.0.0.1:{port}", "x.y.z")
        self.addAsyncCleanup(self.client.close)

    async def serve(self, ws, path=None):
        self.connections += 1
        async for text in ws:
            request = json.loads(text)
            for junk in JUNK_TEXT:
                await ws.send(junk)
            for junk in JUNK_BINARY:
                await ws.send(junk)
            if request["op"] == "session.attach":
                await ws.send(json.dumps({"id": request["id"], "ok": True,
                                          "result": {"session": {"id": "ses_x", "state": "processing"}}}))
                for event in JUNK_SESSION + GOOD_SESSION[:2]:
                    await ws.send(json.dumps({"event": "session", "session": "ses_x", **event}))
                    await ws.send("junk between events")
                for event in GOOD_SESSION[2:]:
                    await ws.send(json.dumps({"event": "session", "session": "ses_x", **event}))
            else:
                await ws.send(json.dumps({"id": request["id"], "ok": True, "result": {"echo": request["op"]}}))

    async def test_junk_never_ends_the_reader_and_requests_go_on_on_the_same_socket(self):
        for n in range(3):
            self.assertEqual(await asyncio.wait_for(self.client.connection.op(f"op{n}", {}), 10), {"echo": f"op{n}"})
        self.assertEqual(self.connections, 1)
        self.assertEqual(self.client.connection.reconnects, 0)

    async def test_a_sessions_good_events_arrive_typed_between_junk(self):
        session = self.client._session("sb_x", {})
        results = []
        session.on("result", results.append)
        await asyncio.wait_for(session.follow("ses_x"), 10)
        first = await asyncio.wait_for(session.result(), 10)
        self.assertEqual((first.text, first.turn, first.diff), ("", 0, corral.DiffSummary()), "the junk result, defaults")
        for _ in range(100):
            if session.last_seq < 12:
                await asyncio.sleep(0.05)
        self.assertEqual(len(results), 2)
        result = results[1]
        self.assertEqual((result.text, result.turn, result.diff.created), ("fine", 1, 1))
        self.assertEqual([(f.path, f.change) for f in result.files], [("/home/agent/a", "create")])
        self.assertEqual(session.todos, [corral.TodoItem("Work", "in_progress", "Working")])
        self.assertEqual(list(session.changed_files), ["/home/agent/a"])
        # The junk with numbers was taken as far as it fits: wrong types keep their defaults.
        junk_result = next(e for e in session.history if isinstance(e, corral.ResultEvent) and e.seq == 6)
        self.assertEqual((junk_result.turn, junk_result.diff, len(junk_result.files)), (0, corral.DiffSummary(), 3))
        self.assertEqual(session.history[-1].seq, 12)
        # And the socket still answers.
        self.assertEqual(await asyncio.wait_for(self.client.connection.op("after", {}), 10), {"echo": "after"})
        self.assertEqual(self.connections, 1)
