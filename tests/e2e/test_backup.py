"""The store's backup and restore (supervisor/store/store_backup.h): `corral admin backup FILE` copies
the store through the running daemon's admin socket while clients keep creating and destroying
sandboxes, minting tokens and reading usage (none of their requests fails or waits for it); each
copy is a whole, consistent SQLite database, mode 0600, of the current schema. `corral admin
restore FILE` is refused while corrald runs; with it stopped, it puts the copy in place, keeps
the replaced store aside, and the next corrald serves what the copy held."""
import json
import os
import sqlite3
import stat
import subprocess
import threading
import time

from corral_e2e import CORRAL, DaemonTestCase


class Backup(DaemonTestCase):
    extra_api_config = "requests_per_minute = 0"  # the load is one user's, flat out

    def corral(self, *args):
        return subprocess.run([CORRAL, *args], capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, CORRAL_ADMIN_SOCKET=self.daemon.admin_socket))

    def issuers(self, db_path):
        with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as db:
            return sorted(row[0] for row in db.execute("SELECT name FROM issuers"))

    def test_backups_under_load_are_whole_and_private(self):
        token = self.token("backup-load")
        errors, requests = [], [0]
        stop = threading.Event()

        def load(worker):
            while not stop.is_set():
                status, sandbox = self.daemon.http("POST", "/v1/sandboxes", token, {"start": False, "name": f"w{worker}"})
                if status != 201:
                    errors.append(("create", status, sandbox))
                    continue
                status, _ = self.daemon.http("GET", "/v1/usage", token)
                if status != 200:
                    errors.append(("usage", status))
                status, minted = self.daemon.admin("POST", "/v1/admin/tokens", {"issuer": "acme", "sub": f"u{worker}"})
                if status != 200 or "token" not in minted:
                    errors.append(("mint", status, minted))
                status, body = self.daemon.http("DELETE", f"/v1/sandboxes/{sandbox['id']}", token)
                if status != 200:
                    errors.append(("delete", status, body))
                requests[0] += 4
        workers = [threading.Thread(target=load, args=(i,)) for i in range(3)]
        for w in workers:
            w.start()
        try:
            time.sleep(0.5)
            copies = []
            for i in range(3):
                path = os.path.join(self.daemon.tmp, f"backup-{i}.db")
                run = self.corral("admin", "backup", path, "--json")
                self.assertEqual(run.returncode, 0, run.stderr)
                copies.append((path, json.loads(run.stdout)))
                time.sleep(0.3)
        finally:
            stop.set()
            for w in workers:
                w.join()
        self.assertEqual(errors, [])
        self.assertGreater(requests[0], 20, "the load ran while the backups were made")
        for path, reply in copies:
            self.assertEqual(reply["path"], path)
            self.assertEqual(reply["bytes"], os.path.getsize(path))
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
            self.assertFalse(os.path.exists(path + ".tmp"))
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
                self.assertEqual(db.execute("PRAGMA integrity_check").fetchone()[0], "ok")
                self.assertEqual(db.execute("PRAGMA journal_mode").fetchone()[0], "delete")
                self.assertEqual(db.execute("PRAGMA user_version").fetchone()[0], reply["schema_version"])
                # Consistent: every command of the copy belongs to a sandbox of the copy.
                self.assertEqual(db.execute("PRAGMA foreign_key_check").fetchall(), [])
            self.assertIn("acme", self.issuers(path))

    def test_a_backup_does_not_overwrite_and_needs_the_admin_socket(self):
        path = os.path.join(self.daemon.tmp, "exists.db")
        with open(path, "w") as f:
            f.write("mine")
        run = self.corral("admin", "backup", path)
        self.assertEqual(run.returncode, 1)
        self.assertIn("exists", run.stderr)
        with open(path) as f:
            self.assertEqual(f.read(), "mine")
        status, body = self.daemon.http("POST", "/v1/admin/backup", self.token("not-admin"), {"path": path + "2"})
        self.assertEqual(status, 404, body)  # admin routes do not exist on the TCP listener
        self.assertFalse(os.path.exists(path + "2"))
        status, body = self.daemon.admin("POST", "/v1/admin/backup", {"path": "relative.db"})
        self.assertEqual((status, body["error"]["code"]), (400, "bad_request"))
        # Control: a new name works, also given relative to the working directory.
        run = subprocess.run([CORRAL, "admin", "backup", "fresh.db"], capture_output=True, text=True, timeout=60,
                             cwd=self.daemon.tmp, env=dict(os.environ, CORRAL_ADMIN_SOCKET=self.daemon.admin_socket))
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("acme", self.issuers(os.path.join(self.daemon.tmp, "fresh.db")))

    def test_restore_puts_a_backup_back_with_corrald_stopped(self):
        self.assertEqual(self.daemon.admin("POST", "/v1/admin/issuers", {"name": "before"})[0], 201)
        path = os.path.join(self.daemon.tmp, "restore-me.db")
        self.assertEqual(self.corral("admin", "backup", path).returncode, 0)
        self.assertEqual(self.daemon.admin("POST", "/v1/admin/issuers", {"name": "after"})[0], 201)

        running = self.corral("admin", "restore", path, "--state-dir", self.daemon.state_dir)
        self.assertEqual(running.returncode, 1)
        self.assertIn("a corrald is running on", running.stderr)
        not_a_store = os.path.join(self.daemon.tmp, "junk.db")
        with open(not_a_store, "wb") as f:
            f.write(b"\0" * 4096)
        self.daemon.stop()
        junk = self.corral("admin", "restore", not_a_store, "--state-dir", self.daemon.state_dir)
        self.assertEqual(junk.returncode, 1)
        self.assertIn("not", junk.stderr)

        run = self.corral("admin", "restore", path, "--state-dir", self.daemon.state_dir, "--json")
        self.assertEqual(run.returncode, 0, run.stderr)
        restored = json.loads(run.stdout)
        self.assertEqual(restored["db"], os.path.join(self.daemon.state_dir, "corrald.db"))
        self.assertIn("after", self.issuers(restored["set_aside"]))  # the replaced store is kept
        self.assertEqual(stat.S_IMODE(os.stat(restored["db"]).st_mode), 0o600)

        self.daemon.start()
        status, body = self.daemon.admin("GET", "/v1/admin/issuers")
        self.assertEqual(status, 200, body)
        names = [i["name"] for i in body["issuers"]]
        self.assertIn("before", names)
        self.assertNotIn("after", names)
        self.assertIn("acme", names)

    def test_the_secret_check_of_every_daemons_log_finds_a_leak(self):
        """corral_e2e.Daemon.cleanup fails a test class whose daemon logged a secret; the check
        itself, on a line planted in this daemon's log (and removed again)."""
        secret = self.daemon.add_issuer("leaky")
        self.assertEqual(self.daemon.leaked_secrets(), [])  # control: the real log is clean
        with open(self.daemon.log_path) as f:
            original = f.read()
        with open(self.daemon.log_path, "a") as f:
            f.write('{"msg":"oops","secret":"' + secret + '"}\n')
        try:
            leaked = self.daemon.leaked_secrets()
            self.assertEqual(len(leaked), 1)
            self.assertNotIn(secret, leaked[0])
            self.assertIn(secret[:4] + "...[redacted]", leaked[0])
        finally:
            with open(self.daemon.log_path, "w") as f:
                f.write(original)
