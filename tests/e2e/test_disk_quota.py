"""corrald end to end with its state dir on a file system with project quotas: each sandbox's
writable layer is a directory capped by a project quota (sandboxes/writable_layer.h), not an ext4
image on a loop device. Run once on XFS and once on ext4 (-O quota,project); a kernel without the
quota support skips, saying why (the cgroup v2 guest's Debian kernel has both).

And anywhere: `disk_quota = "project"` on a file system without project quotas refuses to start,
with the reason.
"""
import asyncio
import fcntl
import json
import os
import shutil
import struct
import subprocess
import tempfile
import unittest

from corral_e2e import CORRAL, Daemon, DaemonTestCase, WsClient
from quota_fs import have_quota_fs, quota_state_dir

FS_IOC_FSGETXATTR = 0x801C581F


def project_id(path):
    """The project id of a host file (FS_IOC_FSGETXATTR), read without following a symlink."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        buf = bytearray(28)
        fcntl.ioctl(fd, FS_IOC_FSGETXATTR, buf)
        return struct.unpack_from("I", buf, 12)[0]
    finally:
        os.close(fd)


def loops_backed_under(prefix):
    found = []
    for name in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                if f.read().strip().startswith(prefix):
                    found.append(name)
        except OSError:
            pass
    return found


class QuotaLayers:
    """The tests; a subclass names the file system (FS) and is a DaemonTestCase."""
    FS = None

    @classmethod
    def setUpClass(cls):
        ok, why = have_quota_fs(cls.FS)
        if not ok:
            raise unittest.SkipTest(why)
        cls.fs_parent = tempfile.mkdtemp(prefix=f"corral-e2e-{cls.FS}-")
        cls.fs = quota_state_dir(cls.fs_parent, cls.FS, size_mb=2048)
        try:
            mount = cls.fs.__enter__()
            cls.state_dir = os.path.join(mount, "state")
            cls.extra_config = 'disk_quota = "project"'
            super().setUpClass()
        except BaseException:
            cls.fs.__exit__(None, None, None)
            shutil.rmtree(cls.fs_parent, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()  # the sandboxes go first: the file system is busy until then
        finally:
            cls.fs.__exit__(None, None, None)
            shutil.rmtree(cls.fs_parent, ignore_errors=True)

    def run_in(self, token, sid, script, user=None):
        async def go():
            client = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                fields = {"user": user} if user else {}
                return await client.run(sid, ["sh", "-c", script], **fields)
            finally:
                await client.close()
        out, err, outcome, _ = self.run_async(go())
        return out.decode(), err.decode(), outcome

    def ok_in(self, token, sid, script, user=None):
        out, err, outcome = self.run_in(token, sid, script, user)
        self.assertEqual((outcome["outcome"], outcome.get("exit_code")), ("exited", 0), (script, out, err, outcome))
        return out

    def test_the_daemon_chose_project_quotas(self):
        lines = [json.loads(line) for line in self.daemon.log().splitlines() if "disk caps" in line]
        self.assertEqual(len(lines), 1, self.daemon.log()[-2000:])
        self.assertEqual(lines[0]["kind"], "project quota")
        self.assertIn(f"{self.FS} enforces project quotas", lines[0]["why"])
        doctor = subprocess.run([CORRAL, "doctor", "--state-dir", self.state_dir], capture_output=True, text=True)
        layers = [line for line in doctor.stdout.splitlines() if line.split()[1:2] == ["layers"]]
        self.assertEqual(len(layers), 1, doctor.stdout)
        self.assertIn("directories capped by project quotas", layers[0])

    def test_a_layer_is_a_directory_and_its_cap_holds(self):
        token = self.token("capped")
        sid = self.create_sandbox(token)["id"]  # the daemon's default_disk: 256M
        home = os.path.join(self.state_dir, "sandboxes", sid)
        self.assertTrue(os.path.isdir(os.path.join(home, "layer", "upper")), os.listdir(home))
        self.assertFalse(os.path.exists(os.path.join(home, "disk.img")))
        self.assertEqual(loops_backed_under(self.state_dir), [])
        project = project_id(os.path.join(home, "layer", "upper"))
        self.assertGreaterEqual(project, 0xC0000000 // 65536)

        total_kib = int(self.ok_in(token, sid, "df -k / | tail -1 | awk '{print $2}'"))
        self.assertTrue(200 * 1024 <= total_kib <= 260 * 1024, total_kib)
        self.ok_in(token, sid, "dd if=/dev/zero of=$HOME/a bs=1M count=100 conv=fsync 2>&1")
        self.assertEqual(project_id(os.path.join(home, "layer", "upper", "home", "agent", "a")), project)
        out, err, outcome = self.run_in(token, sid, "dd if=/dev/zero of=$HOME/b bs=1M count=200 conv=fsync 2>&1")
        self.assertNotEqual(outcome.get("exit_code"), 0, out)
        self.assertTrue("Disk quota exceeded" in out or "No space left on device" in out, out)
        # Stop and start: the files and the cap are still there.
        for action in ("stop", "start"):
            self.assertEqual(self.daemon.http("POST", f"/v1/sandboxes/{sid}/{action}", token)[0], 200)
        self.assertEqual(self.ok_in(token, sid, "ls -s --block-size=1M $HOME/a | cut -d' ' -f1"), "100\n")
        self.ok_in(token, sid, "rm -f $HOME/a $HOME/b && dd if=/dev/zero of=$HOME/c bs=1M count=150 2>&1")
        self.assertEqual(self.daemon.http("DELETE", f"/v1/sandboxes/{sid}", token)[0], 200)
        self.assertFalse(os.path.exists(home))

    def test_snapshots_and_forks_copy_the_files_into_a_project_of_their_own(self):
        token = self.token("copier")
        sid = self.create_sandbox(token)["id"]
        self.ok_in(token, sid, "mkdir -p ~/proj && echo v1 > ~/proj/main.c && ln -s main.c ~/proj/link")
        self.ok_in(token, sid, "echo secret > /root/r.txt && chmod 600 /root/r.txt && rm /etc/hosts", user="root")
        status, snap = self.daemon.http("POST", f"/v1/sandboxes/{sid}/snapshot", token)
        self.assertEqual(status, 201, snap)
        snap_dir = os.path.join(self.state_dir, "snapshots", snap["id"] + ".layer")
        self.assertTrue(os.path.isdir(os.path.join(snap_dir, "upper")))
        self.assertGreater(snap["bytes"], 0)

        status, fork = self.daemon.http("POST", f"/v1/sandboxes/{sid}/fork", token, {})
        self.assertEqual(status, 201, fork)
        status, made = self.daemon.http("POST", "/v1/sandboxes", token, {"snapshot": snap["id"]})
        self.assertEqual(status, 201, made)
        projects = set()
        for copy in (sid, fork["id"], made["id"]):
            out = self.ok_in(token, copy, "cat /home/agent/proj/link; stat -c '%U %a' /root/r.txt; "
                                          "ls /etc/hosts 2>&1 || true", user="root")
            self.assertEqual(out, "v1\nroot 600\nls: cannot access '/etc/hosts': No such file or directory\n", copy)
            upper = os.path.join(self.state_dir, "sandboxes", copy, "layer", "upper")
            projects.add(project_id(os.path.join(upper, "home", "agent", "proj", "main.c")))
        self.assertEqual(len(projects), 3, "each copy is charged to its own project")

        self.assertEqual(self.daemon.http("DELETE", f"/v1/snapshots/{snap['id']}", token)[0], 200)
        self.assertFalse(os.path.exists(snap_dir))
        for copy in (sid, fork["id"], made["id"]):
            self.assertEqual(self.daemon.http("DELETE", f"/v1/sandboxes/{copy}", token)[0], 200)


class XfsLayers(QuotaLayers, DaemonTestCase):
    FS = "xfs"


class Ext4Layers(QuotaLayers, DaemonTestCase):
    FS = "ext4"


class ProjectQuotasRequired(unittest.TestCase):
    def test_without_them_corrald_refuses_to_start_and_says_why(self):
        if os.geteuid() != 0:
            self.skipTest("corrald needs root")
        daemon = Daemon()
        try:
            # The state dir on a tmpfs: no project quotas there, on any kernel.
            os.makedirs(daemon.state_dir)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m", "corral-e2e", daemon.state_dir], check=True)
            try:
                daemon.extra_config = 'disk_quota = "project"'
                with self.assertRaises(RuntimeError) as refused:
                    daemon.start()
                self.assertIn('sandbox.disk_quota = \\"project\\"', str(refused.exception))
                self.assertIn("tmpfs, which has no project quotas", str(refused.exception))
                # The positive control: the same dir with "auto" starts, with image layers.
                daemon.extra_config = 'disk_quota = "auto"'
                daemon.start()
                lines = [json.loads(line) for line in daemon.log().splitlines() if "disk caps" in line]
                self.assertEqual(lines[-1]["kind"], "ext4 image", lines)
                daemon.stop()
            finally:
                daemon.stop()
                subprocess.run(["umount", "-l", daemon.state_dir], check=False)
        finally:
            daemon.cleanup()


if __name__ == "__main__":
    unittest.main()
