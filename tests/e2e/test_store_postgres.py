"""corrald with its store in PostgreSQL ([store] backend = "postgresql"): a real PostgreSQL 15
started by the test (tests/fixtures/postgres.py, durable: fsync on), one corrald on it. What a
user does works as on SQLite, the rows are in PostgreSQL (and no SQLite file is made), a kill -9
of corrald is recovered from, and PostgreSQL restarting or down under a running daemon: requests
that need it get 503 with Retry-After, a running command goes on, nothing acknowledged is lost,
and corrald reconnects on its own. The fleet of several nodes: test_fleet.py."""

import asyncio
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))

from corral_e2e import DaemonTestCase, WsClient, wait_until  # noqa: E402
import postgres  # noqa: E402


class PostgresStore(DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        why = postgres.available()
        if why:
            raise unittest.SkipTest(why)
        cls.pg = postgres.Postgres(fsync=True)
        cls.pg.start()
        url = cls.pg.create_database("corral")
        cls.extra_sections = f'[store]\nbackend = "postgresql"\nurl = "{url}"\n'
        try:
            super().setUpClass()
        except Exception:
            cls.pg.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.pg.stop()

    def setUp(self):
        if self.pg.proc is None:
            self.pg.start()  # a test that failed with the server down
        if self.daemon.proc.poll() is not None:
            self.daemon.start()
        self.tok = self.token("pat")

    def sql(self, query):
        return self.pg.psql(query, "corral")

    async def run_cmd(self, sandbox, argv):
        client = await WsClient.connect(self.daemon.ws_url(), self.tok)
        try:
            return await client.run(sandbox, argv)
        finally:
            await client.close()

    def test_a_users_work_goes_to_postgresql(self):
        sb = self.create_sandbox(self.tok, name="on-pg")
        out, _, outcome, command = self.run_async(self.run_cmd(sb["id"], ["sh", "-c", "echo hello from pg"]))
        self.assertEqual(out, b"hello from pg\n")
        self.assertEqual(outcome["exit_code"], 0, outcome)
        status, _ = self.daemon.http("PUT", f"/v1/sandboxes/{sb['id']}/fs/write?path=/home/agent/a.txt", self.tok,
                                     raw=b"kept")
        self.assertEqual(status, 200)
        status, snap = self.daemon.http("POST", f"/v1/sandboxes/{sb['id']}/snapshot", self.tok)
        self.assertEqual(status, 201, snap)
        # The rows are PostgreSQL's: the sandbox, its command, its snapshot and its events.
        self.assertEqual(self.sql(f"SELECT name FROM sandboxes WHERE id = '{sb['id']}'"), "on-pg")
        self.assertEqual(self.sql(f"SELECT state FROM commands WHERE id = '{command}'"), "exited")
        self.assertEqual(self.sql(f"SELECT sandbox_id FROM snapshots WHERE id = '{snap['id']}'"), sb["id"])
        self.assertGreater(int(self.sql(f"SELECT COUNT(*) FROM events WHERE sandbox_id = '{sb['id']}'")), 0)
        self.assertFalse(os.path.exists(os.path.join(self.daemon.state_dir, "corrald.db")),
                         "a SQLite store was made beside PostgreSQL")
        # A sandbox from the snapshot has the file (the snapshot's row found in PostgreSQL).
        fork = self.create_sandbox(self.tok, snapshot=snap["id"])
        status, data = self.daemon.http("GET", f"/v1/sandboxes/{fork['id']}/fs/read?path=/home/agent/a.txt",
                                        self.tok)
        self.assertEqual((status, data), (200, b"kept"))
        # Control: another user sees none of it.
        status, listed = self.daemon.http("GET", "/v1/sandboxes", self.token("someone-else"))
        self.assertEqual(status, 200)
        self.assertEqual(listed["sandboxes"], [])

    def test_backup_is_postgresqls_own(self):
        status, body = self.daemon.admin("POST", "/v1/admin/backup", {"path": "/tmp/corral-never-written.db"})
        self.assertEqual(status, 501, body)
        self.assertIn("pg_dump", body["error"]["message"])
        self.assertFalse(os.path.exists("/tmp/corral-never-written.db"))

    def test_kill_9_of_corrald_is_recovered_from_postgresql(self):
        sb = self.create_sandbox(self.tok)
        self.daemon.kill9()
        self.daemon.start()
        status, again = self.daemon.http("GET", f"/v1/sandboxes/{sb['id']}", self.tok)
        self.assertEqual(status, 200, again)
        self.assertEqual(again["state"], "running")
        out, _, outcome, _ = self.run_async(self.run_cmd(sb["id"], ["echo", "adopted"]))
        self.assertEqual(out, b"adopted\n")

    def test_postgresql_down_and_back_under_a_running_daemon(self):
        before = self.create_sandbox(self.tok, name="before-outage")

        async def outage():
            client = await WsClient.connect(self.daemon.ws_url(), self.tok)
            try:
                reply = await client.request("exec", sandbox=before["id"],
                                             argv=["sh", "-c", "for i in 1 2 3 4 5 6; do echo $i; sleep 0.5; done"])
                self.assertTrue(reply["ok"], reply)
                command = reply["result"]["command"]
                # A fast restart: the daemon's connection is closed under it, and the next call
                # makes a new one without an error. (The server is started from this, the main,
                # thread: it is stopped when the thread that started it ends.)
                self.pg.restart()
                # (A background call of the daemon's, a heartbeat or the issuers' refresh, may
                # have met the server shutting down: then calls answer 503 for the second before
                # the next reconnect.)
                def served():
                    return self.daemon.http("GET", "/v1/sandboxes", self.tok)[0] == 200
                await asyncio.to_thread(wait_until, served, 5, 0.1, "corrald serving after a fast restart")
                # Down: what needs the store is 503 with Retry-After, at once.
                self.pg.kill()
                start = time.monotonic()
                status, body, headers = await asyncio.to_thread(self.create_raw, "during-outage")
                self.assertEqual(status, 503, body)
                self.assertEqual(body["error"]["code"], "unavailable", body)
                self.assertEqual(headers.get("Retry-After"), "1")
                self.assertLess(time.monotonic() - start, 5)
                # The command goes on meanwhile: its output keeps coming, and it ends.
                out = b""
                while True:
                    event = await client.next_event(timeout=10)
                    if event.get("event") == "output":
                        out += event["data"]
                    if event.get("event") == "exit":
                        break
                self.assertTrue(out.endswith(b"6\n"), out)
                self.assertEqual(event["outcome"]["exit_code"], 0, event)
                self.pg.start()
                return command
            finally:
                await client.close()

        command = self.run_async(outage())
        # Back: the daemon reconnects on its own; what was acknowledged before is there.
        answers = []

        def serving():
            answers.append(self.daemon.http("GET", "/v1/sandboxes", self.tok))
            return answers[-1][0] == 200

        try:
            wait_until(serving, timeout=15, what="corrald serving again after PostgreSQL came back")
        except AssertionError:
            raise AssertionError(f"last answer {answers[-1]}; corrald's errors: {self.daemon_errors()[-3000:]}")
        status, listed = self.daemon.http("GET", "/v1/sandboxes", self.tok)
        self.assertIn(before["id"], [s["id"] for s in listed["sandboxes"]])
        self.assertNotIn("during-outage", [s["name"] for s in listed["sandboxes"]])
        # The command's end, which the store could not take during the outage, is stored once it
        # can: the command is not left `running`.
        path = f"/v1/sandboxes/{before['id']}/commands/{command}"
        wait_until(lambda: self.daemon.http("GET", path, self.tok)[1].get("state") == "exited", timeout=10,
                   what="the command's end stored after the outage")
        status, stored = self.daemon.http("GET", path, self.tok)
        self.assertEqual(stored["outcome"]["exit_code"], 0, stored)
        after = self.create_sandbox(self.tok, name="after-outage")
        out, _, _, _ = self.run_async(self.run_cmd(after["id"], ["echo", "back"]))
        self.assertEqual(out, b"back\n")

    def create_raw(self, name):
        import http.client
        import json
        conn = http.client.HTTPConnection("127.0.0.1", self.daemon.port, timeout=30)
        conn.request("POST", "/v1/sandboxes", body=json.dumps({"name": name}),
                     headers={"Authorization": "Bearer " + self.tok})
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        return resp.status, json.loads(data) if data else None, dict(resp.getheaders())


if __name__ == "__main__":
    unittest.main()
