"""Upgrade in place: the previous release's corrald (dist/previous-release, built from `git archive`
by tests/upgrade/build-previous.sh) runs sandboxes, stops, and this tree's corrald starts on the
same state directory: it copies the store before migrating it, migrates it, and adopts the running
sandbox with its processes; the stopped one starts again with its workspace."""
import os
import signal
import sqlite3
import subprocess
import unittest

from corral_e2e import BUILD_DIR, CORRAL, CORRALD, Daemon, init_pids, mint, wait_until

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def schema_version(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute("PRAGMA user_version").fetchone()[0]
    finally:
        db.close()


class UpgradeInPlace(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("corrald needs root (namespaces, cgroups, mounts)")
        if not os.path.exists(CORRALD):
            raise unittest.SkipTest(f"{CORRALD} is not built")
        built = subprocess.run([os.path.join(SOURCE_DIR, "tests", "upgrade", "build-previous.sh"), SOURCE_DIR],
                               capture_output=True, text=True)
        if built.returncode == 77:
            raise unittest.SkipTest(built.stderr.strip())
        if built.returncode != 0:
            raise RuntimeError("building the previous release failed:\n" + built.stderr[-4000:])
        cls.old_build = built.stdout.strip().splitlines()[-1]
        with open(os.path.join(SOURCE_DIR, "dist", "previous-release")) as f:
            cls.previous = f.readline().split()[0]

    def corral(self, binary, token, port, *args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        env.update(CORRAL_URL=f"http://127.0.0.1:{port}", CORRAL_TOKEN=token)
        proc = subprocess.run([binary, *args], env=env, capture_output=True, timeout=120)
        self.assertEqual(proc.returncode, 0, (args, proc.stdout[-2000:], proc.stderr[-2000:]))
        return proc.stdout.decode()

    def test_the_next_corrald_migrates_the_store_and_adopts_running_sandboxes(self):
        daemon = Daemon()
        self.addCleanup(daemon.cleanup)
        daemon.corrald = os.path.join(self.old_build, "tools", "corrald")
        old_corral = os.path.join(self.old_build, "tools", "corral")
        daemon.start()
        token = mint("acme", daemon.add_issuer("acme"), "alice")

        # Under the previous release: one sandbox running a process of its own, one stopped.
        ids = []
        for _ in range(2):
            status, body = daemon.http("POST", "/v1/sandboxes", token, {})
            self.assertIn(status, (200, 201), body)
            ids.append(body["id"])
        running, stopped = ids
        self.corral(old_corral, token, daemon.port, "exec", running, "--", "sh", "-c", "echo before > ~/kept")
        # A command that outlives the old daemon (its client goes with the daemon; the command runs on).
        env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
        env.update(CORRAL_URL=f"http://127.0.0.1:{daemon.port}", CORRAL_TOKEN=token)
        client = subprocess.Popen([old_corral, "exec", running, "--", "sleep", "1000"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: client.poll() is not None or client.kill())
        wait_until(lambda: "sleep 1000" in self.corral(old_corral, token, daemon.port, "exec", running, "--",
                                                         "ps", "-eo", "args"), 20, what="sleep 1000 to run")
        self.corral(old_corral, token, daemon.port, "exec", stopped, "--", "sh", "-c", "echo parked > ~/kept")
        status, body = daemon.http("POST", f"/v1/sandboxes/{stopped}/stop", token)
        self.assertEqual(status, 200, body)
        init_before = init_pids(daemon, running)
        self.assertEqual(len(init_before), 1)
        db = os.path.join(daemon.state_dir, "corrald.db")
        old_schema = schema_version(db)
        daemon.stop(signal.SIGTERM)
        self.assertEqual(daemon.proc.returncode, 0, daemon.log()[-2000:])

        # This tree's corrald on the same state directory and config.
        daemon.corrald = CORRALD
        offset = len(daemon.log())
        daemon.start()
        log = daemon.log()[offset:]
        status, health = daemon.http("GET", "/healthz")
        self.assertEqual(status, 200)

        # The store: copied as it was, then migrated.
        copies = [n for n in os.listdir(daemon.state_dir)
                  if n.startswith(f"corrald.db.schema-{old_schema}.before-migration-")]
        latest = schema_version(db)
        if latest > old_schema:
            self.assertEqual(len(copies), 1, os.listdir(daemon.state_dir))
            self.assertEqual(schema_version(os.path.join(daemon.state_dir, copies[0])), old_schema)
            self.assertIn("copied the store before migrating it", log)
        else:
            self.assertEqual(copies, [])  # the same schema: nothing to copy

        # The running sandbox: the same init, adopted, with its process and its files.
        status, body = daemon.http("GET", f"/v1/sandboxes/{running}", token)
        self.assertEqual((status, body.get("state")), (200, "running"), body)
        self.assertEqual(init_pids(daemon, running), init_before)
        self.assertEqual(self.corral(CORRAL, token, daemon.port, "exec", running, "--", "cat", "kept"), "before\n")
        self.assertIn("sleep 1000",
                      self.corral(CORRAL, token, daemon.port, "exec", running, "--", "ps", "-eo", "args"))
        status, body = daemon.http("GET", f"/v1/sandboxes/{running}/commands", token)
        self.assertEqual(status, 200, body)
        sleeping = [c for c in body["commands"] if c.get("argv") == ["sleep", "1000"]]
        self.assertEqual([c.get("state") for c in sleeping], ["running"], body)

        # The stopped one starts with its workspace; a new one works too.
        status, body = daemon.http("POST", f"/v1/sandboxes/{stopped}/start", token)
        self.assertEqual((status, body.get("state")), (200, "running"), body)
        self.assertEqual(self.corral(CORRAL, token, daemon.port, "exec", stopped, "--", "cat", "kept"), "parked\n")
        status, body = daemon.http("POST", "/v1/sandboxes", token, {})
        self.assertIn(status, (200, 201), body)
        self.assertEqual(self.corral(CORRAL, token, daemon.port, "exec", body["id"], "--", "echo", "new"), "new\n")
        for sid in (running, stopped, body["id"]):
            daemon.http("DELETE", f"/v1/sandboxes/{sid}", token)
        print(f"\nupgrade from {self.previous} (schema {old_schema}) to this tree (schema {latest}): "
              f"sandbox {running} adopted with init {sorted(init_before)[0]}")


if __name__ == "__main__":
    unittest.main()
