"""Checkpoints of agent sessions (issue 21 part 5): the conversation and the files together.

The real Claude Code CLI in a real sandbox against the scripted Messages API behind corrald's
relay. Turn 1 writes a.txt; a checkpoint is taken; turn 2 (a checkpoint asked for while it runs is
refused) rewrites a.txt and writes b.txt. Restoring the checkpoint in its own sandbox gives turn
1's files (a.txt as then, no b.txt) and a history that ends at turn 1: the next turn's model
request carries turn 1's prompt and not turn 2's. A sandbox made from the checkpoint's snapshot
continues from it too; another sandbox of the user is refused, another user finds nothing; a
deleted checkpoint is gone with its snapshot.
"""
import os
import shutil
import sys
import unittest

from agent_turns import AgentTurns
from corral_e2e import DaemonTestCase, operator_key_file, relay_config, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures"))
import scripted_model  # noqa: E402

REAL_KEY = "sk-ant-e2e-checkpoints-operator-key"
_model = scripted_model.serve({"turns": []}, port=0)
_key_dir, _key_file = operator_key_file("corral-e2e-checkpoints-", REAL_KEY)

TURN_ONE = "turn one: write a.txt"
TURN_TWO = "turn two: change everything"
TURN_THREE = "turn three: what do you remember?"


def bash(command, text):
    return {"text": text, "tool_use": {"name": "Bash", "input": {"command": command, "description": "files"}}}


@unittest.skipUnless(shutil.which("claude"), "Claude Code is not installed (dist/install-deps.sh installs it)")
class Checkpoints(AgentTurns, DaemonTestCase):
    extra_config = relay_config(_model.port, _key_file)

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        _model.shutdown()
        _model.server_close()
        shutil.rmtree(_key_dir, ignore_errors=True)

    def setUp(self):
        self.owner = self.token("chk-user", budget={"ai_usd": 5, "window": "day"})
        self.sid = self.create_sandbox(self.owner)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{self.sid}", self.owner)

    # ---- helpers ----

    def play(self, turns):
        _model.script = scripted_model.Script({"turns": turns})
        _model.requests.clear()

    def main_requests(self):
        return [r for r in _model.requests if r.get("kind") == "main"]

    def session(self, session_id):
        status, row = self.daemon.http("GET", f"/v1/sessions/{session_id}", self.owner)
        self.assertEqual(status, 200, row)
        return row

    def wait_turns(self, session_id, turns):
        wait_until(lambda: (lambda r: r["turns"] >= turns and r["state"] == "ready")(self.session(session_id)), 120,
                   interval=0.2, what=f"turn {turns} of {session_id}")

    def close(self, session_id):
        reply = self.ws("session.close", session=session_id)
        self.assertTrue(reply["ok"], reply)
        wait_until(lambda: self.session(session_id)["state"] == "completed", 60, interval=0.2,
                   what=f"{session_id} completed")

    def two_turns_and_a_checkpoint(self):
        """Turn 1, its checkpoint, turn 2 (a checkpoint refused during it); the session closed."""
        self.play([bash("echo one > a.txt", "writing"), {"text": "wrote a.txt"},
                   bash("sleep 2; echo two > a.txt; echo new > b.txt", "changing"), {"text": "changed"}])
        status, first = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/sessions", self.owner, {"prompt": TURN_ONE})
        self.assertEqual(status, 201, first)
        self.wait_turns(first["id"], 1)
        self.assertEqual(self.read_file(self.sid, "/home/agent/a.txt"), (200, b"one\n"))
        status, checkpoint = self.daemon.http("POST", f"/v1/sessions/{first['id']}/checkpoint", self.owner)
        self.assertEqual(status, 201, checkpoint)
        self.assertTrue(checkpoint["id"].startswith("chk_"), checkpoint)
        self.assertEqual((checkpoint["session"], checkpoint["sandbox"], checkpoint["turns"]), (first["id"], self.sid, 1))
        reply = self.ws("session.send", session=first["id"], text=TURN_TWO)
        self.assertTrue(reply["ok"], reply)
        # During a turn: refused (the files and the transcript would be of no one turn).
        status, body = self.daemon.http("POST", f"/v1/sessions/{first['id']}/checkpoint", self.owner)
        self.assertEqual(status, 409, body)
        self.wait_turns(first["id"], 2)
        self.assertEqual(self.read_file(self.sid, "/home/agent/a.txt"), (200, b"two\n"))
        self.assertEqual(self.read_file(self.sid, "/home/agent/b.txt"), (200, b"new\n"))
        self.close(first["id"])
        return first, checkpoint

    # ---- tests ----

    def test_restoring_a_checkpoint_brings_back_its_turns_files_and_history(self):
        first, checkpoint = self.two_turns_and_a_checkpoint()
        status, listed = self.daemon.http("GET", f"/v1/sessions/{first['id']}/checkpoints", self.owner)
        self.assertEqual(status, 200, listed)
        self.assertEqual([c["id"] for c in listed["checkpoints"]], [checkpoint["id"]])

        self.play([{"text": "I remember turn one"}])
        status, restored = self.daemon.http("POST", f"/v1/sandboxes/{self.sid}/sessions", self.owner,
                                            {"checkpoint": checkpoint["id"], "prompt": TURN_THREE})
        self.assertEqual(status, 201, restored)
        self.assertNotEqual(restored["id"], first["id"])
        self.wait_turns(restored["id"], 1)
        self.assertEqual(self.session(restored["id"])["parent"], first["id"])
        # The files of turn 1.
        self.assertEqual(self.read_file(self.sid, "/home/agent/a.txt"), (200, b"one\n"))
        self.assertEqual(self.read_file(self.sid, "/home/agent/b.txt")[0], 404)
        # The history of turn 1: the next request has turn 1's prompt, not turn 2's.
        requests = self.main_requests()
        self.assertTrue(requests)
        texts = self.user_texts(requests[0])
        self.assertTrue(any(TURN_ONE in t for t in texts), texts)
        self.assertTrue(any(TURN_THREE in t for t in texts), texts)
        self.assertFalse(any(TURN_TWO in t for t in texts), texts)
        status, events = self.daemon.http("GET", f"/v1/sandboxes/{self.sid}/events?type=sandbox.restored", self.owner)
        self.assertEqual([e["data"]["snapshot"] for e in events["events"]], [checkpoint["snapshot"]])
        self.close(restored["id"])

    def test_a_sandbox_made_from_the_checkpoint_continues_it_and_no_other_does(self):
        first, checkpoint = self.two_turns_and_a_checkpoint()
        # Another sandbox of the same user, not made from it: refused, nothing started.
        other = self.create_sandbox(self.owner)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{other}", self.owner)
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{other}/sessions", self.owner,
                                        {"checkpoint": checkpoint["id"], "prompt": TURN_THREE})
        self.assertEqual(status, 400, body)
        # Another user: the checkpoint is not found, in any of their sandboxes or by id.
        stranger = self.token("chk-stranger", budget={"ai_usd": 5, "window": "day"})
        theirs = self.create_sandbox(stranger)["id"]
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{theirs}", stranger)
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{theirs}/sessions", stranger,
                                        {"checkpoint": checkpoint["id"], "prompt": TURN_THREE})
        self.assertEqual(status, 404, body)
        self.assertEqual(self.daemon.http("GET", f"/v1/checkpoints/{checkpoint['id']}", stranger)[0], 404)
        self.assertEqual(self.daemon.http("POST", f"/v1/sessions/{first['id']}/checkpoint", stranger)[0], 404)
        self.assertEqual(self.daemon.http("DELETE", f"/v1/checkpoints/{checkpoint['id']}", stranger)[0], 404)
        # Control: a sandbox made from the checkpoint's snapshot continues from it.
        status, copy = self.daemon.http("POST", "/v1/sandboxes", self.owner, {"snapshot": checkpoint["snapshot"]})
        self.assertEqual(status, 201, copy)
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{copy['id']}", self.owner)
        self.assertEqual(self.read_file(copy["id"], "/home/agent/a.txt"), (200, b"one\n"))
        self.play([{"text": "continuing elsewhere"}])
        status, elsewhere = self.daemon.http("POST", f"/v1/sandboxes/{copy['id']}/sessions", self.owner,
                                             {"checkpoint": checkpoint["id"], "prompt": TURN_THREE})
        self.assertEqual(status, 201, elsewhere)
        self.wait_turns(elsewhere["id"], 1)
        texts = self.user_texts(self.main_requests()[0])
        self.assertTrue(any(TURN_ONE in t for t in texts) and not any(TURN_TWO in t for t in texts), texts)
        # The original sandbox kept turn 2's files: nothing was restored there.
        self.assertEqual(self.read_file(self.sid, "/home/agent/a.txt"), (200, b"two\n"))
        self.close(elsewhere["id"])
        # Deleted: the checkpoint and its snapshot.
        status, body = self.daemon.http("DELETE", f"/v1/checkpoints/{checkpoint['id']}", self.owner)
        self.assertEqual(status, 200, body)
        self.assertEqual(self.daemon.http("GET", f"/v1/checkpoints/{checkpoint['id']}", self.owner)[0], 404)
        self.assertEqual(self.daemon.http("GET", f"/v1/snapshots/{checkpoint['snapshot']}", self.owner)[0], 404)


if __name__ == "__main__":
    unittest.main()
