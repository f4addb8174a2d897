"""corral doctor from the command line, and corrald's own run of it at start: every check
listed (text and JSON) and passing on this host; a state directory on a small tmpfs is a FAIL
that makes `corral doctor` exit 1 and corrald refuse to start with the same message; one with
some room but not much is a WARN that corrald logs and starts with."""
import json
import os
import subprocess
import tempfile
import unittest

from corral_e2e import CORRAL, CORRALD, Daemon

CHECKS = ["kernel", "user_namespaces", "overlayfs", "cgroups", "seccomp", "openat2", "landlock", "pidfd_clone3",
          "network_namespaces", "state_dir", "open_files", "namespace_limits", "layers", "cgroup_join", "images", "claude_code"]


@unittest.skipUnless(os.geteuid() == 0 and os.path.exists(CORRALD), "needs root and a build")
class Doctor(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="corral-e2e-doctor-")
        self.addCleanup(subprocess.run, ["rm", "-rf", self.tmp], check=False)

    def tmpfs(self, path, size):
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", path], check=False)

    def doctor(self, *args):
        return subprocess.run([CORRAL, "doctor", "--cgroup-parent", f"corral/e2e-doctor-{os.getpid()}", *args],
                              capture_output=True, text=True, timeout=120)

    def test_every_check_is_listed_and_passes_here(self):
        parent = f"corral/e2e-doctor-{os.getpid()}"
        run = self.doctor("--state-dir", self.tmp)
        # Its cgroup probe leaves nothing, not even the parent it had to make.
        self.assertEqual([h for h in os.listdir("/sys/fs/cgroup") if os.path.exists(f"/sys/fs/cgroup/{h}/{parent}")]
                         + ([parent] if os.path.exists(f"/sys/fs/cgroup/{parent}") else []), [])
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertEqual([line.split()[1] for line in run.stdout.splitlines()], CHECKS)
        self.assertNotIn("FAIL", run.stdout)
        report = json.loads(self.doctor("--json", "--state-dir", self.tmp).stdout)
        self.assertTrue(report["ok"])
        self.assertEqual([c["name"] for c in report["checks"]], CHECKS)

    def test_project_quotas_asked_for_where_there_are_none_fail_the_layers_check(self):
        fs = os.path.join(self.tmp, "fs")
        self.tmpfs(fs, "512m")  # room enough for state_dir's check; no project quotas, on any kernel
        config = os.path.join(self.tmp, "quota.toml")
        details = {}
        for mode, level in (("project", "fail"), ("auto", "ok"), ("image", "ok")):
            with open(config, "w") as f:
                f.write(f'[daemon]\nstate_dir = "{fs}/state"\n[sandbox]\ndisk_quota = "{mode}"\n')
            run = self.doctor("--json", "--config", config)
            self.assertEqual(run.returncode, 1 if level == "fail" else 0, run.stdout + run.stderr)
            layers = next(c for c in json.loads(run.stdout)["checks"] if c["name"] == "layers")
            self.assertEqual(layers["level"], level, layers)
            details[mode] = layers["detail"]
        self.assertIn('sandbox.disk_quota = "project"', details["project"])
        self.assertIn("tmpfs, which has no project quotas", details["project"])
        self.assertIn("sparse ext4 images", details["auto"])
        self.assertIn("tmpfs, which has no project quotas", details["auto"])
        self.assertIn('disk_quota = "image"', details["image"])
        with open(config, "w") as f:
            f.write('[sandbox]\ndisk_quota = "zfs"\n')
        bad = self.doctor("--config", config)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn('sandbox.disk_quota: expected "auto", "project" or "image"', bad.stdout + bad.stderr)

    def test_a_state_dir_without_room_fails_the_doctor_and_the_daemon(self):
        small = os.path.join(self.tmp, "small")
        self.tmpfs(small, "64m")
        run = self.doctor("--json", "--state-dir", small)
        self.assertEqual(run.returncode, 1, run.stdout + run.stderr)
        report = json.loads(run.stdout)
        self.assertFalse(report["ok"])
        state = next(c for c in report["checks"] if c["name"] == "state_dir")
        self.assertEqual(state["level"], "fail")
        self.assertIn("64 MiB free", state["detail"])

        daemon = Daemon()
        self.addCleanup(daemon.cleanup)
        daemon.state_dir = os.path.join(small, "state")
        with self.assertRaises(RuntimeError) as refused:
            daemon.start()
        self.assertIn("this host cannot run corrald (corral doctor says why): state_dir:", str(refused.exception))
        self.assertIn("64 MiB free", str(refused.exception))
        self.assertFalse(os.path.exists(daemon.state_dir), "nothing is made before the checks")

    def test_a_warning_is_logged_and_the_daemon_starts(self):
        some = os.path.join(self.tmp, "some")
        self.tmpfs(some, "1g")
        daemon = Daemon()
        self.addCleanup(daemon.cleanup)
        daemon.state_dir = os.path.join(some, "state")
        daemon.start()
        warnings = [json.loads(line) for line in daemon.log().splitlines()
                    if line.startswith("{") and '"component":"doctor"' in line]
        self.assertEqual([(w["level"], w["check"]) for w in warnings], [("warn", "state_dir")], warnings)
        status, body = daemon.http("GET", "/healthz")
        self.assertEqual(status, 200, body)


if __name__ == "__main__":
    unittest.main()
