"""Images end to end: an OCI layout made here with umoci (busybox-static, a root-owned file and
one owned by 1000) imported with `corral image import`, listed by the CLI and by a user's token,
a sandbox created from it by name, root-owned files owned by root inside; removal refused while
the sandbox exists and allowed after; tags (with a '/' in the name); prune removes the layer
directories; a token's limits.images; every bad input of issue 18 refused through the API with its cause
named and nothing left (no image, no layer directory): a missing or relative path, `../`, an
absolute path, a write through a symlink, a hard link out, a device node, a whiteout outside, a
corrupt and a truncated blob, a layer over images.max_size (a gzip bomb of zeros), a manifest of
10,000 layers, a name with `/../`, a taken name without force; two imports of one image at once
end with one image. Every denial beside its positive control."""
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
import unittest

from corral_e2e import CORRAL, DaemonTestCase, WsClient

BUSYBOX = "/bin/busybox"


def layer_tar(path, entries):
    """A layer tar at `path`: entries are (name, kind, data_or_target, uid, mode); kind is dir,
    file, symlink or hardlink (data: the target), or chardev (data: (major, minor))."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data, uid, mode in entries:
            info = tarfile.TarInfo(name)
            info.uid = info.gid = uid
            info.mode = mode
            info.mtime = 1700000000
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind in ("symlink", "hardlink"):
                info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
                info.linkname = data
                tar.addfile(info)
            elif kind == "chardev":
                info.type = tarfile.CHRTYPE
                info.devmajor, info.devminor = data
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def busybox_entries():
    with open(BUSYBOX, "rb") as f:
        busybox = f.read()
    entries = [(d, "dir", None, 0, 0o755) for d in ("bin", "etc", "home", "proc", "dev", "sys")]
    entries += [("tmp", "dir", None, 0, 0o1777), ("root", "dir", None, 0, 0o700),
                ("home/user", "dir", None, 1000, 0o755),
                ("bin/busybox", "file", busybox, 0, 0o755)]
    entries += [(f"bin/{applet}", "symlink", "busybox", 0, 0o777) for applet in ("sh", "ls", "cat", "id", "stat")]
    entries += [("etc/passwd", "file", b"root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n", 0, 0o644),
                ("etc/group", "file", b"root:x:0:\nuser:x:1000:\n", 0, 0o644),
                ("etc/rootfile", "file", b"root's\n", 0, 0o644),
                ("home/user/userfile", "file", b"user's\n", 1000, 0o644)]
    return entries


def umoci_layout(work, name, entries):
    """An OCI layout directory at work/name with one layer of `entries`, tagged "latest"."""
    layout = os.path.join(work, name)
    tar = os.path.join(work, name + ".tar")
    layer_tar(tar, entries)
    image = f"{layout}:latest"
    for argv in (["umoci", "init", "--layout", layout], ["umoci", "new", "--image", image],
                 ["umoci", "raw", "add-layer", "--image", image, tar],
                 ["umoci", "config", "--image", image, "--config.env", "PATH=/bin", "--config.workingdir", "/"]):
        subprocess.run(argv, check=True, capture_output=True)
    return layout


def layout_blob(layout, what):
    """The path of the layout's (tagged "latest") manifest or first layer blob."""
    def blob(digest):
        return os.path.join(layout, "blobs", "sha256", digest.split(":", 1)[1])
    with open(os.path.join(layout, "index.json")) as f:
        manifest_path = blob(json.load(f)["manifests"][0]["digest"])
    if what == "manifest":
        return manifest_path
    with open(manifest_path) as f:
        return blob(json.load(f)["layers"][0]["digest"])


def many_layers_layout(work, base, count):
    """A copy of layout `base` whose manifest lists its one layer `count` times."""
    layout = os.path.join(work, f"many-{count}")
    shutil.copytree(base, layout)
    with open(layout_blob(layout, "manifest")) as f:
        manifest = json.load(f)
    manifest["layers"] = manifest["layers"][:1] * count
    data = json.dumps(manifest).encode()
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(layout, "blobs", "sha256", digest), "wb") as f:
        f.write(data)
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    index["manifests"][0].update({"digest": "sha256:" + digest, "size": len(data)})
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump(index, f)
    return layout


class ImagesTest(DaemonTestCase):
    # Small enough for a layer of zeros to be a bomb here (the busybox layout is ~2 MB).
    extra_config = """
[images]
max_size = "32M"
"""

    @classmethod
    def setUpClass(cls):
        for tool in ("umoci",):
            if shutil.which(tool) is None:
                raise unittest.SkipTest(f"{tool} is not installed (dist/install-deps.sh)")
        if not os.path.exists(BUSYBOX):
            raise unittest.SkipTest(f"{BUSYBOX} is missing (busybox-static)")
        super().setUpClass()
        cls.work = tempfile.mkdtemp(prefix="corral-images-")
        cls.layout = umoci_layout(cls.work, "busybox", busybox_entries())

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.work, ignore_errors=True)

    def cli(self, *args, cwd=None, token=None):
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        proc = subprocess.run([CORRAL, "image", *args], env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=120)
        return proc.returncode, proc.stdout, proc.stderr

    def admin_cli(self, *args, cwd=None):
        return self.cli(*args, "--admin-socket", self.daemon.admin_socket, cwd=cwd)

    def images(self):
        status, body = self.daemon.admin("GET", "/v1/images")
        self.assertEqual(status, 200, body)
        return body["images"]

    def import_busybox(self, name="busybox:test"):
        # A relative FILE: the CLI makes it absolute from its own working directory.
        code, out, err = self.admin_cli("import", "busybox", "--name", name, "--json", cwd=self.work)
        self.assertEqual(code, 0, err + self.daemon_errors())
        return json.loads(out)

    def run_in(self, token, sandbox, argv, user=None):
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                fields = {"user": user} if user else {}
                return await c.run(sandbox, argv, **fields)
            finally:
                await c.close()
        return self.run_async(go())

    def remove_all(self):
        for image in self.images():
            self.daemon.admin("DELETE", "/v1/images/" + image["digest"])

    def layer_dirs(self):
        """The store's layer directories, after every image is removed and pruned at the start."""
        path = os.path.join(self.daemon.state_dir, "images", "layers")
        return sorted(os.listdir(path)) if os.path.isdir(path) else []

    def from_nothing(self):
        self.remove_all()
        self.assertEqual(self.daemon.admin("POST", "/v1/images/prune")[0], 200)
        self.assertEqual(self.layer_dirs(), [])

    def test_import_list_run_remove_prune(self):
        image = self.import_busybox()
        self.addCleanup(self.remove_all)
        self.assertTrue(image["digest"].startswith("sha256:"), image)
        self.assertEqual(image["names"], ["busybox:test"])
        self.assertEqual(image["config"]["env"], ["PATH=/bin"])
        self.assertEqual(len(image["layers"]), 1)
        self.assertGreater(image["size"], os.path.getsize(BUSYBOX) - 1)

        # Listed: by the CLI on the admin socket, and by any user's token (API and CLI).
        code, out, err = self.admin_cli("ls")
        self.assertEqual(code, 0, err)
        self.assertIn("busybox:test", out)
        self.assertIn(image["digest"][7:19], out)
        token = self.token("img-alice")
        status, listed = self.daemon.http("GET", "/v1/images", token)
        self.assertEqual(status, 200, listed)
        self.assertEqual([i["digest"] for i in listed["images"]], [image["digest"]])
        code, out, err = self.cli("ls", "--url", f"http://127.0.0.1:{self.daemon.port}", "--token", token)
        self.assertEqual(code, 0, err)
        self.assertIn("busybox:test", out)
        for ref in ("busybox:test", "busybox%3Atest", image["digest"]):
            status, one = self.daemon.http("GET", "/v1/images/" + ref, token)
            self.assertEqual((status, one.get("digest")), (200, image["digest"]), ref)
        status, missing = self.daemon.http("GET", "/v1/images/nosuch:1", token)
        self.assertEqual(status, 404, missing)

        # A sandbox of it: root-owned files are root's inside, the 1000-owned one 1000's.
        sandbox = self.create_sandbox(token, image="busybox:test")
        self.assertEqual(sandbox["image"], "busybox:test")
        self.assertEqual(sandbox["image_digest"], image["digest"])
        out, err, outcome, _ = self.run_in(token, sandbox["id"], ["sh", "-c", "id -u; stat -c %u /etc/rootfile; "
                                                                   "stat -c %u /home/user/userfile; cat /etc/rootfile"],
                                           user="root")
        self.assertEqual(outcome.get("exit_code"), 0, (out, err, outcome, self.daemon_errors()))
        self.assertEqual(out.decode(), "0\n0\n1000\nroot's\n")

        # Removal refused while the sandbox exists; allowed once it is gone.
        status, body = self.daemon.admin("DELETE", "/v1/images/busybox:test")
        self.assertEqual(status, 409, body)
        self.assertEqual(body["error"]["code"], "conflict")
        self.assertEqual(len(self.images()), 1)
        status, body = self.daemon.http("DELETE", f"/v1/sandboxes/{sandbox['id']}", token)
        self.assertEqual(status, 200, body)

        layer_dirs = [os.path.join(self.daemon.state_dir, "images", "layers", layer["diff_id"].split(":", 1)[1])
                      for layer in image["layers"]]
        self.assertTrue(all(os.path.isdir(d) for d in layer_dirs), layer_dirs)
        code, out, err = self.admin_cli("rm", "busybox:test")
        self.assertEqual(code, 0, err)
        self.assertEqual(self.images(), [])
        # The layers stay until prune.
        self.assertTrue(all(os.path.isdir(d) for d in layer_dirs), layer_dirs)
        status, pruned = self.daemon.admin("POST", "/v1/images/prune")
        self.assertEqual(status, 200, pruned)
        self.assertGreaterEqual(pruned["layers_removed"], 1)
        self.assertGreater(pruned["bytes_freed"], 0)
        self.assertFalse(any(os.path.exists(d) for d in layer_dirs), layer_dirs)

    def test_tags_and_changes_only_on_the_admin_socket(self):
        image = self.import_busybox()
        self.addCleanup(self.remove_all)
        code, out, err = self.admin_cli("tag", "busybox:test", "acme/busybox:1")
        self.assertEqual(code, 0, err)
        token = self.token("img-bob")
        # A name with '/', percent-encoded or not.
        for ref in ("acme/busybox:1", "acme%2Fbusybox%3A1"):
            status, one = self.daemon.http("GET", "/v1/images/" + ref, token)
            self.assertEqual(status, 200, (ref, one))
            self.assertEqual(sorted(one["names"]), ["acme/busybox:1", "busybox:test"])
        # An existing name is not moved without force (here: onto the same image is fine).
        status, body = self.daemon.admin("POST", f"/v1/images/{image['digest']}/tag", {"name": "acme/busybox:1"})
        self.assertEqual(status, 200, body)

        # Changes are not on TCP, whatever the token; reads are.
        for method, path, body in (("POST", "/v1/images/import", {"path": self.layout}),
                                   ("POST", "/v1/images/busybox:test/tag", {"name": "x:1"}),
                                   ("DELETE", "/v1/images/busybox:test", None),
                                   ("POST", "/v1/images/prune", None)):
            status, reply = self.daemon.http(method, path, token, body)
            self.assertIn(status, (404, 405), (method, path, reply))
        self.assertEqual(sorted(self.images()[0]["names"]), ["acme/busybox:1", "busybox:test"])
        status, listed = self.daemon.http("GET", "/v1/images", token)
        self.assertEqual(status, 200, listed)
        # And the CLI refuses to send changes anywhere but the admin socket.
        code, _, err = self.cli("rm", "busybox:test", "--url", f"http://127.0.0.1:{self.daemon.port}")
        self.assertEqual(code, 2, err)
        self.assertIn("--url", err)

    def test_limits_images_narrow_what_a_user_may_pick(self):
        self.import_busybox()
        self.addCleanup(self.remove_all)
        python_only = self.token("img-carol", limits={"images": ["python:*"]})
        status, body = self.daemon.http("POST", "/v1/sandboxes", python_only, {"image": "busybox:test"})
        self.assertEqual(status, 403, body)
        self.assertEqual(body["error"]["code"], "forbidden")
        # Positive control: a token whose pattern matches.
        busybox_ok = self.token("img-carol", limits={"images": ["busybox:*"]})
        sandbox = self.create_sandbox(busybox_ok, image="busybox:test")
        self.assertEqual(sandbox["image"], "busybox:test")
        status, body = self.daemon.http("DELETE", f"/v1/sandboxes/{sandbox['id']}", busybox_ok)
        self.assertEqual(status, 200, body)

    def test_cli_creates_a_sandbox_of_an_image(self):
        image = self.import_busybox()
        self.addCleanup(self.remove_all)
        token = self.token("img-dave")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CORRAL_TOKEN": token,
               "CORRAL_URL": f"http://127.0.0.1:{self.daemon.port}"}
        proc = subprocess.run([CORRAL, "sandbox", "create", "--image", "busybox:test", "--json"], env=env,
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr + self.daemon_errors())
        sandbox = json.loads(proc.stdout)
        self.assertEqual((sandbox["image"], sandbox["image_digest"]), ("busybox:test", image["digest"]))
        proc = subprocess.run([CORRAL, "exec", sandbox["id"], "--", "cat", "/etc/rootfile"], env=env,
                              capture_output=True, text=True, timeout=120)
        self.assertEqual((proc.returncode, proc.stdout), (0, "root's\n"), proc.stderr)
        # Denial beside it: an image the daemon does not have.
        proc = subprocess.run([CORRAL, "sandbox", "create", "--image", "nosuch:1"], env=env,
                              capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 1, proc.stdout)
        self.assertIn("not_found", proc.stderr)
        self.assertEqual(self.daemon.http("DELETE", f"/v1/sandboxes/{sandbox['id']}", token)[0], 200)

    def test_a_pty_in_an_image_sandbox_is_a_terminal_of_the_asked_size(self):
        self.import_busybox("busybox:pty")
        self.addCleanup(self.remove_all)
        token = self.token(sub="pty-user")
        sandbox = self.create_sandbox(token, image="busybox:pty")
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sandbox['id']}", token)

        async def go(**fields):
            c = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                return await c.run(sandbox["id"], ["sh", "-c", "/bin/busybox tty; /bin/busybox stty size"], **fields)
            finally:
                await c.close()
        out, _, outcome, _ = self.run_async(go(pty={"rows": 40, "cols": 120}))
        self.assertEqual(outcome.get("exit_code"), 0, (out, outcome, self.daemon_errors()))
        self.assertIn(b"/dev/pts/", out)
        self.assertIn(b"40 120", out)
        # Control: without a PTY the same command has no terminal.
        out, _, outcome, _ = self.run_async(go())
        self.assertNotIn(b"/dev/pts/", out)
        self.assertIn(b"not a tty", out)

    def test_git_in_an_image_without_git_says_so(self):
        # The git routes run the sandbox's own git; busybox has none.
        self.import_busybox("busybox:git")
        self.addCleanup(self.remove_all)
        token = self.token(sub="git-user")
        sandbox = self.create_sandbox(token, image="busybox:git")
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{sandbox['id']}", token)
        status, body = self.daemon.http("GET", f"/v1/sandboxes/{sandbox['id']}/git/diff?path=/home", token)
        self.assertEqual(status, 501, body)
        self.assertEqual(body["error"]["code"], "unsupported")
        self.assertIn("has no git", body["error"]["message"])
        # The control: a host sandbox has the host's git, which answers about the directory.
        host = self.create_sandbox(token)
        self.addCleanup(self.daemon.http, "DELETE", f"/v1/sandboxes/{host['id']}", token)
        status, body = self.daemon.http("GET", f"/v1/sandboxes/{host['id']}/git/diff?path=/home", token)
        self.assertEqual(status, 400, body)
        self.assertIn("not a git repository", body["error"]["message"])

    def test_bad_imports_are_refused_and_change_nothing(self):
        self.from_nothing()
        self.addCleanup(self.remove_all)
        before = self.images()
        base = [("bin", "dir", None, 0, 0o755), ("etc", "dir", None, 0, 0o755)]

        def bad(name, entries):
            return umoci_layout(self.work, name, base + entries)
        corrupt = os.path.join(self.work, "corrupt")
        shutil.copytree(self.layout, corrupt)
        with open(layout_blob(corrupt, "layer"), "r+b") as f:
            f.seek(100)
            byte = f.read(1)
            f.seek(100)
            f.write(bytes([byte[0] ^ 0xff]))
        truncated = os.path.join(self.work, "truncated")
        shutil.copytree(self.layout, truncated)
        with open(layout_blob(truncated, "layer"), "r+b") as f:
            f.truncate(os.path.getsize(layout_blob(truncated, "layer")) // 2)
        cases = [
            ({"path": os.path.join(self.work, "nonexistent")}, 404, "not_found"),
            ({"path": "busybox"}, 400, "absolute"),
            ({"path": bad("escape", [("../escape", "file", b"out\n", 0, 0o644)]), "name": "escape:1"}, 400, ".."),
            ({"path": bad("absolute", [("/etc/absolute", "file", b"x", 0, 0o644)])}, 400, "absolute"),
            ({"path": bad("through-link", [("out", "symlink", "/tmp", 0, 0o777),
                                           ("out/through", "file", b"x", 0, 0o644)])}, 400, "symlink"),
            ({"path": bad("hardlink-out", [("etc/shadow", "hardlink", "../../etc/shadow", 0, 0o644)])}, 400, "link"),
            ({"path": bad("device", [("etc/mem", "chardev", (1, 1), 0, 0o666)])}, 400, "device"),
            ({"path": bad("whiteout-out", [("../.wh.passwd", "file", b"", 0, 0o644)])}, 400, ".."),
            ({"path": corrupt}, 400, "digest"),
            ({"path": truncated}, 400, "digest"),
            ({"path": bad("bomb", [("etc/zeros", "file", bytes(64 << 20), 0, 0o644)])}, 429, "max_size"),
            ({"path": many_layers_layout(self.work, self.layout, 10000)}, 400, "layers"),
            ({"path": self.layout, "name": "acme/../busybox:1"}, 400, ".."),
        ]
        for body, code, says in cases:
            status, reply = self.daemon.admin("POST", "/v1/images/import", body)
            self.assertEqual(status, code, (body, reply))
            self.assertIn(says, json.dumps(reply), (body, reply))
            self.assertEqual(self.images(), before, body)
        self.assertFalse(os.path.exists(os.path.join(self.daemon.state_dir, "images", "escape")))
        self.assertFalse(os.path.exists(os.path.join(self.daemon.state_dir, "escape")))
        self.assertEqual(self.layer_dirs(), [], "a refused import left a layer")
        # The CLI says why too.
        code, _, err = self.admin_cli("import", "nonexistent", cwd=self.work)
        self.assertEqual(code, 1)
        self.assertIn("not_found", err)
        # Positive control: the good layout, by the same route.
        status, image = self.daemon.admin("POST", "/v1/images/import", {"path": self.layout, "name": "busybox:good"})
        self.assertEqual(status, 201, (image, self.daemon_errors()))
        self.assertEqual([i["names"] for i in self.images()], [["busybox:good"]])
        # A name that is taken: refused without force, moved with it.
        other = umoci_layout(self.work, "other", base + [("etc/other", "file", b"o\n", 0, 0o644)])
        status, reply = self.daemon.admin("POST", "/v1/images/import", {"path": other, "name": "busybox:good"})
        self.assertEqual(status, 409, reply)
        self.assertIn("force", reply["error"]["message"])
        status, moved = self.daemon.admin("POST", "/v1/images/import", {"path": other, "name": "busybox:good",
                                                                       "force": True})
        self.assertEqual(status, 201, moved)
        self.assertNotEqual(moved["digest"], image["digest"])

    def test_two_imports_of_one_image_at_once_end_with_one_image(self):
        self.from_nothing()
        self.addCleanup(self.remove_all)
        results = []

        def one(name):
            results.append(self.daemon.admin("POST", "/v1/images/import", {"path": self.layout, "name": name}))
        threads = [threading.Thread(target=one, args=(f"twice:{i}",)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        statuses = sorted(status for status, _ in results)
        # Both in, or the second told the first is under way (conflict): never two images.
        self.assertIn(statuses, ([201, 201], [201, 409]), results)
        self.assertEqual(len(self.images()), 1, self.images())
        self.assertEqual(len(self.layer_dirs()), 1)

if __name__ == "__main__":
    unittest.main()
