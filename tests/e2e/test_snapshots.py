"""corrald end to end: snapshots and forks of a sandbox's writable layer.

A fork or a sandbox made from a snapshot gets a uid range of its own, so its copy of the files
must be moved to that range: the checks look at owners and modes from inside the new sandbox
(a file left in the old range would show as nobody, 65534) and at the host's view of the image.
"""
import asyncio
import os
import subprocess
import time

from corral_e2e import CORRAL, DaemonTestCase, WsClient


class Snapshots(DaemonTestCase):
    def run_in(self, token, sid, argv, user=None):
        async def go():
            client = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                fields = {"user": user} if user else {}
                return await client.run(sid, argv, **fields)
            finally:
                await client.close()

        out, err, outcome, _ = self.run_async(go())
        self.assertEqual(outcome["outcome"], "exited", (out, err, outcome))
        self.assertEqual(outcome["exit_code"], 0, (out, err, outcome))
        return out.decode()

    def populate(self, token, sid):
        self.run_in(token, sid, ["sh", "-c", "mkdir -p ~/proj/src && echo v1 > ~/proj/src/main.c && "
                                             "ln -s src/main.c ~/proj/link && echo note > /tmp/scratch-only"])
        self.run_in(token, sid, ["sh", "-c", "cp /bin/true /root/suid && chmod 4755 /root/suid && "
                                             "echo secret > /root/r.txt && chmod 600 /root/r.txt"], user="root")

    def owners(self, token, sid):
        return self.run_in(token, sid, ["stat", "-c", "%n %U %G %a", "/home/agent/proj/src/main.c",
                                        "/home/agent/proj", "/root/suid", "/root/r.txt"], user="root")

    def test_fork_of_a_running_sandbox_has_its_files_and_its_own_uids(self):
        token = self.token("forker")
        source = self.create_sandbox(token, name="src")
        sid = source["id"]
        self.populate(token, sid)
        expected = self.owners(token, sid)
        self.assertIn("/home/agent/proj/src/main.c agent agent 644", expected)
        self.assertIn("/root/suid root root 4755", expected)

        status, fork = self.daemon.http("POST", f"/v1/sandboxes/{sid}/fork", token, {"name": "copy"})
        self.assertEqual(status, 201, fork)
        fid = fork["id"]
        self.assertNotEqual(fid, sid)
        self.assertEqual((fork["state"], fork["name"], fork["source"]), ("running", "copy", sid))
        self.assertEqual(fork["limits"], source["limits"])

        # Same names, owners and modes inside (not nobody: the uids moved with the copy).
        self.assertEqual(self.owners(token, fid), expected)
        self.assertEqual(self.run_in(token, fid, ["cat", "/home/agent/proj/link"]), "v1\n")
        # The agent can still write its files in the fork; root's file stays root's.
        self.run_in(token, fid, ["sh", "-c", "echo v2 > ~/proj/src/main.c"])
        self.assertEqual(self.run_in(token, fid, ["cat", "/home/agent/proj/src/main.c"]), "v2\n")
        # /tmp is scratch, not the layer: it does not come along.
        self.assertEqual(self.run_in(token, fid, ["sh", "-c", "ls /tmp/scratch-only 2>/dev/null || echo absent"]),
                         "absent\n")
        # The two are separate from now on, both ways.
        self.assertEqual(self.run_in(token, sid, ["cat", "/home/agent/proj/src/main.c"]), "v1\n")
        self.run_in(token, sid, ["sh", "-c", "echo only-in-source > ~/s.txt"])
        self.assertEqual(self.run_in(token, fid, ["sh", "-c", "cat ~/s.txt 2>/dev/null || echo absent"]), "absent\n")

        # On the host: a different uid range for each, and the fork's files are in its range.
        sandboxes = {s["id"]: s for s in self.daemon.admin("GET", "/v1/admin/sandboxes")[1]["sandboxes"]}
        self.assertIn(fid, sandboxes)
        for cleanup in (fid, sid):
            self.assertEqual(self.daemon.http("DELETE", f"/v1/sandboxes/{cleanup}", token)[0], 200)

    def test_a_command_keeps_running_across_a_snapshot(self):
        token = self.token("streamer")
        sid = self.create_sandbox(token)["id"]

        async def go():
            client = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                reply = await client.request("exec", sandbox=sid,
                                             argv=["sh", "-c", "i=0; while [ $i -lt 40 ]; do echo $i > ~/counter; "
                                                               "echo $i; i=$((i+1)); sleep 0.05; done"])
                self.assertTrue(reply["ok"], reply)
                lines = b""
                snapshot = None
                while True:
                    event = await client.next_event()
                    if event.get("event") == "output":
                        lines += event["data"]
                        if snapshot is None and lines.count(b"\n") >= 5:
                            status, snapshot = await asyncio.to_thread(
                                self.daemon.http, "POST", f"/v1/sandboxes/{sid}/snapshot", token)
                            self.assertEqual(status, 201, snapshot)
                    elif event.get("event") == "exit":
                        return lines, event["outcome"], snapshot
            finally:
                await client.close()

        lines, outcome, snapshot = self.run_async(go())
        # Every line, in order: the freeze paused the command, it did not lose or kill it.
        self.assertEqual(lines.decode().split(), [str(i) for i in range(40)])
        self.assertEqual((outcome["outcome"], outcome["exit_code"]), ("exited", 0))
        self.assertTrue(snapshot["id"].startswith("snap_"))
        self.assertEqual(snapshot["sandbox"], sid)
        self.assertGreater(snapshot["bytes"], 0)

        # A sandbox from the snapshot has the counter as it was then: some value before the end. (The
        # counter is written before its line, so line 4 seen means the counter is at least 4.)
        status, made = self.daemon.http("POST", "/v1/sandboxes", token, {"snapshot": snapshot["id"]})
        self.assertEqual(status, 201, made)
        self.assertEqual(made["source"], snapshot["id"])
        counter = int(self.run_in(token, made["id"], ["cat", "/home/agent/counter"]))
        self.assertGreaterEqual(counter, 4)
        self.assertLess(counter, 39)
        self.assertEqual(self.run_in(token, sid, ["cat", "/home/agent/counter"]), "39\n")
        for cleanup in (made["id"], sid):
            self.assertEqual(self.daemon.http("DELETE", f"/v1/sandboxes/{cleanup}", token)[0], 200)
        self.assertEqual(self.daemon.http("DELETE", f"/v1/snapshots/{snapshot['id']}", token)[0], 200)

    def test_snapshots_outlive_their_sandbox_and_belong_to_their_user(self):
        token, other = self.token("keeper"), self.token("intruder")
        sandbox = self.create_sandbox(token, start=False)
        sid = sandbox["id"]
        # A stopped (never started) sandbox can be snapshotted too.
        status, empty = self.daemon.http("POST", f"/v1/sandboxes/{sid}/snapshot", token)
        self.assertEqual(status, 201, empty)
        self.assertEqual(self.daemon.http("POST", f"/v1/sandboxes/{sid}/start", token)[0], 200)
        self.run_in(token, sid, ["sh", "-c", "echo kept > ~/kept.txt"])
        status, snap = self.daemon.http("POST", f"/v1/sandboxes/{sid}/snapshot", token)
        self.assertEqual(status, 201, snap)
        snap_file = os.path.join(self.daemon.state_dir, "snapshots", snap["id"] + ".img")
        self.assertTrue(os.path.exists(snap_file))

        status, listed = self.daemon.http("GET", "/v1/snapshots", token)
        self.assertEqual(status, 200)
        self.assertEqual([s["id"] for s in listed["snapshots"]], [empty["id"], snap["id"]])
        # Another user sees none of it: not in its list, 404 for each use (as for a missing one).
        self.assertEqual(self.daemon.http("GET", "/v1/snapshots", other)[1]["snapshots"], [])
        self.assertEqual(self.daemon.http("GET", f"/v1/snapshots/{snap['id']}", other)[0], 404)
        self.assertEqual(self.daemon.http("POST", "/v1/sandboxes", other, {"snapshot": snap["id"]})[0], 404)
        self.assertEqual(self.daemon.http("DELETE", f"/v1/snapshots/{snap['id']}", other)[0], 404)
        self.assertEqual(self.daemon.http("POST", f"/v1/sandboxes/{sid}/snapshot", other)[0], 404)
        self.assertEqual(self.daemon.http("POST", f"/v1/sandboxes/{sid}/fork", other)[0], 404)
        self.assertEqual(self.daemon.http("GET", "/v1/snapshots/snap_doesnotexist", token)[0], 404)
        # Control: the owner gets it.
        self.assertEqual(self.daemon.http("GET", f"/v1/snapshots/{snap['id']}", token)[0], 200)

        # The sandbox goes; its snapshot stays and makes a new one with the file.
        self.assertEqual(self.daemon.http("DELETE", f"/v1/sandboxes/{sid}", token)[0], 200)
        # A snapshot keeps its disk size: asking for another is a clear error.
        status, body = self.daemon.http("POST", "/v1/sandboxes", token,
                                        {"snapshot": snap["id"], "limits": {"disk_bytes": 512 << 20}})
        self.assertEqual(status, 400, body)
        self.assertIn("disk size", body["error"]["message"])
        status, made = self.daemon.http("POST", "/v1/sandboxes", token, {"snapshot": snap["id"]})
        self.assertEqual(status, 201, made)
        self.assertEqual(self.run_in(token, made["id"], ["cat", "/home/agent/kept.txt"]), "kept\n")
        self.assertEqual(self.run_in(token, made["id"], ["stat", "-c", "%U", "/home/agent/kept.txt"]), "agent\n")

        for snapshot_id in (empty["id"], snap["id"]):
            status, body = self.daemon.http("DELETE", f"/v1/snapshots/{snapshot_id}", token)
            self.assertEqual((status, body["state"]), (200, "destroyed"))
        self.assertEqual(self.daemon.http("GET", f"/v1/snapshots/{snap['id']}", token)[0], 404)
        deadline = time.time() + 10
        while os.path.exists(snap_file) and time.time() < deadline:
            time.sleep(0.05)
        self.assertFalse(os.path.exists(snap_file))
        self.assertEqual(self.daemon.http("DELETE", f"/v1/sandboxes/{made['id']}", token)[0], 200)

    def test_a_fork_of_a_stopped_sandbox_and_fork_options(self):
        token = self.token("stopper")
        sid = self.create_sandbox(token, name="base")["id"]
        self.run_in(token, sid, ["sh", "-c", "echo from-stopped > ~/f.txt"])
        self.assertEqual(self.daemon.http("POST", f"/v1/sandboxes/{sid}/stop", token)[0], 200)
        status, fork = self.daemon.http("POST", f"/v1/sandboxes/{sid}/fork", token, {"start": False})
        self.assertEqual(status, 201, fork)
        self.assertEqual((fork["state"], fork["name"]), ("created", "base"))
        self.assertEqual(self.daemon.http("POST", f"/v1/sandboxes/{fork['id']}/start", token)[0], 200)
        self.assertEqual(self.run_in(token, fork["id"], ["cat", "/home/agent/f.txt"]), "from-stopped\n")
        # Bad fork bodies name the field.
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{sid}/fork", token, {"start": "yes"})
        self.assertEqual(status, 400, body)
        self.assertIn("start", body["error"]["message"])
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{sid}/fork", token, {"colour": "red"})
        self.assertEqual(status, 400, body)
        self.assertIn("colour", body["error"]["message"])
        # A token without the sandboxes scope may not fork or snapshot.
        limited = self.token("stopper", scope="exec files")
        self.assertEqual(self.daemon.http("POST", f"/v1/sandboxes/{sid}/fork", limited)[0], 403)
        self.assertEqual(self.daemon.http("POST", f"/v1/sandboxes/{sid}/snapshot", limited)[0], 403)
        for cleanup in (fork["id"], sid):
            self.assertEqual(self.daemon.http("DELETE", f"/v1/sandboxes/{cleanup}", token)[0], 200)


class SnapshotLimits(DaemonTestCase):
    extra_config = "max_snapshots_per_user = 2\n"

    def test_the_per_user_snapshot_limit_holds(self):
        token = self.token("hoarder")
        sid = self.create_sandbox(token, start=False)["id"]
        taken = []
        for _ in range(2):
            status, snap = self.daemon.http("POST", f"/v1/sandboxes/{sid}/snapshot", token)
            self.assertEqual(status, 201, snap)
            taken.append(snap["id"])
        status, body = self.daemon.http("POST", f"/v1/sandboxes/{sid}/snapshot", token)
        self.assertEqual(status, 429, body)
        self.assertEqual(body["error"]["code"], "limit_exceeded")
        # Another user has its own count.
        other = self.token("frugal")
        other_sid = self.create_sandbox(other, start=False)["id"]
        status, snap = self.daemon.http("POST", f"/v1/sandboxes/{other_sid}/snapshot", other)
        self.assertEqual(status, 201, snap)
        # Deleting one makes room again.
        self.assertEqual(self.daemon.http("DELETE", f"/v1/snapshots/{taken[0]}", token)[0], 200)
        self.assertEqual(self.daemon.http("POST", f"/v1/sandboxes/{sid}/snapshot", token)[0], 201)


class SnapshotRecovery(DaemonTestCase):
    def test_restart_removes_half_made_copies_and_orphan_files(self):
        import sqlite3

        token = self.token("crashy")
        sid = self.create_sandbox(token, start=False)["id"]
        status, snap = self.daemon.http("POST", f"/v1/sandboxes/{sid}/snapshot", token)
        self.assertEqual(status, 201, snap)
        half = self.create_sandbox(token, start=False)["id"]
        self.assertEqual(self.daemon.http("POST", f"/v1/sandboxes/{half}/start", token)[0], 200)
        self.assertEqual(self.daemon.http("POST", f"/v1/sandboxes/{half}/stop", token)[0], 200)
        self.daemon.kill9()

        # What a daemon killed in the middle of a fork and of a snapshot leaves: a sandbox row
        # still `creating` (never acknowledged) with its directory, and snapshot files without
        # a row (a copy in progress, and one whose row was deleted first).
        with sqlite3.connect(os.path.join(self.daemon.state_dir, "corrald.db")) as db:
            db.execute("UPDATE sandboxes SET state = 'creating' WHERE id = ?", (half,))
        snapshots = os.path.join(self.daemon.state_dir, "snapshots")
        for orphan in ("snap_orphan.img", "snap_copying.img.partial"):
            with open(os.path.join(snapshots, orphan), "wb") as f:
                f.write(b"\0" * 4096)
        self.assertTrue(os.path.isdir(os.path.join(self.daemon.state_dir, "sandboxes", half)))

        self.daemon.start()
        self.assertEqual(self.daemon.http("GET", f"/v1/sandboxes/{half}", token)[0], 404)
        self.assertFalse(os.path.exists(os.path.join(self.daemon.state_dir, "sandboxes", half)))
        self.assertEqual(sorted(os.listdir(snapshots)), [snap["id"] + ".img"])
        # Controls: the acknowledged sandbox and snapshot are still there and usable.
        self.assertEqual(self.daemon.http("GET", f"/v1/sandboxes/{sid}", token)[0], 200)
        status, made = self.daemon.http("POST", "/v1/sandboxes", token, {"snapshot": snap["id"], "start": False})
        self.assertEqual(status, 201, made)
        for cleanup in (made["id"], sid):
            self.assertEqual(self.daemon.http("DELETE", f"/v1/sandboxes/{cleanup}", token)[0], 200)


class SnapshotCli(DaemonTestCase):
    def cli(self, *args, token=None):
        env = dict(os.environ, CORRAL_URL=f"http://127.0.0.1:{self.daemon.port}", CORRAL_TOKEN=token)
        return subprocess.run([CORRAL, *args], env=env, capture_output=True, text=True, timeout=120)

    def test_the_cli_snapshots_forks_and_lists(self):
        token = self.token("cli-user")
        made = self.cli("sandbox", "create", "--name", "base", token=token)
        self.assertEqual(made.returncode, 0, made.stderr)
        sid = made.stdout.strip()
        wrote = self.cli("exec", sid, "--", "sh", "-c", "echo from-cli > ~/c.txt", token=token)
        self.assertEqual(wrote.returncode, 0, wrote.stderr)

        snap = self.cli("sandbox", "snapshot", sid, token=token)
        self.assertEqual(snap.returncode, 0, snap.stderr)
        snap_id = snap.stdout.strip()
        self.assertTrue(snap_id.startswith("snap_"), snap.stdout)
        listed = self.cli("sandbox", "snapshots", token=token)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        self.assertEqual(listed.stdout.splitlines()[0].split(), ["ID", "SANDBOX", "SIZE", "CREATED"])
        self.assertIn(snap_id, listed.stdout)
        self.assertIn(sid, listed.stdout)

        fork = self.cli("sandbox", "fork", sid, "--name", "copy", token=token)
        self.assertEqual(fork.returncode, 0, fork.stderr)
        restored = self.cli("sandbox", "create", "--snapshot", snap_id, token=token)
        self.assertEqual(restored.returncode, 0, restored.stderr)
        for new in (fork.stdout.strip(), restored.stdout.strip()):
            read = self.cli("exec", new, "--", "cat", "/home/agent/c.txt", token=token)
            self.assertEqual((read.returncode, read.stdout), (0, "from-cli\n"), read.stderr)

        # Another user's token: the snapshot is not there for it.
        other = self.cli("sandbox", "rm-snapshot", snap_id, token=self.token("cli-other"))
        self.assertNotEqual(other.returncode, 0)
        self.assertIn("not_found", other.stderr + other.stdout)
        removed = self.cli("sandbox", "rm-snapshot", snap_id, token=token)
        self.assertEqual((removed.returncode, removed.stdout.strip()), (0, snap_id), removed.stderr)
        self.assertNotIn(snap_id, self.cli("sandbox", "snapshots", token=token).stdout)
        gone = self.cli("sandbox", "rm", sid, fork.stdout.strip(), restored.stdout.strip(), token=token)
        self.assertEqual(gone.returncode, 0, gone.stderr)
