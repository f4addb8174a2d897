"""Image builds end to end: `corral image build` of a recipe on busybox (make_image.sh's layout,
imported as busybox:test): RUN in a sandbox of the image so far (a file made, /etc/passwd
removed), COPY from the context, ENV and WORKDIR. The image has the base's layer plus one a RUN
and one a COPY; a sandbox of it sees the RUN's file, the copied file, no /etc/passwd (the
whiteout), X=1 in its commands' environment and /app as their working directory. The same
recipe again is all cache hits (the same digest); a changed COPY source misses from that step on
(the RUN before it still hits); FROM scratch with a rootfs archive, a WORKDIR the image lacks
made; FROM debian:bookworm made by mmdebstrap; a failing RUN and a COPY out of the context leave no image, each
beside the good build."""
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest

from corral_e2e import CORRAL, DaemonTestCase, WsClient

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from image_layouts import layout  # noqa: E402

RECIPE = """FROM busybox:test
RUN echo hi > /greeting && rm /etc/passwd
COPY file.txt /app/file.txt
ENV X=1
WORKDIR /app
"""


class ImageBuildTest(DaemonTestCase):

    @classmethod
    def setUpClass(cls):
        cls.busybox = layout("busybox")
        super().setUpClass()
        cls.work = tempfile.mkdtemp(prefix="corral-image-build-")

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.work, ignore_errors=True)

    def setUp(self):
        super().setUp()
        status, body = self.daemon.admin("POST", "/v1/images/import", {"path": self.busybox, "name": "busybox:test",
                                                                     "force": True})
        self.assertEqual(status, 201, body)
        self.base = body
        self.context = tempfile.mkdtemp(dir=self.work)
        with open(os.path.join(self.context, "file.txt"), "w") as f:
            f.write("one\n")
        with open(os.path.join(self.context, "Recipe"), "w") as f:
            f.write(RECIPE)

    def build(self, *args, recipe=None):
        """Builds the context's Recipe, or `recipe` (given with -f; the Recipe stays)."""
        if recipe is not None:
            other = os.path.join(self.work, "recipe-%d" % len(os.listdir(self.work)))
            with open(other, "w") as f:
                f.write(recipe)
            args = ("-f", other, *args)
        argv = [CORRAL, "image", "build", "--admin-socket", self.daemon.admin_socket, "--json", *args, self.context]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
        result = json.loads(proc.stdout) if proc.stdout.strip() else None
        return proc.returncode, result, proc.stderr

    def names(self):
        status, body = self.daemon.admin("GET", "/v1/images")
        self.assertEqual(status, 200, body)
        return sorted(n for image in body["images"] for n in image["names"])

    def digests(self):
        status, body = self.daemon.admin("GET", "/v1/images")
        self.assertEqual(status, 200, body)
        return sorted(image["digest"] for image in body["images"])

    def run_in(self, token, sandbox, argv, user="root"):
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                return await c.run(sandbox, argv, **({"user": user} if user else {}))
            finally:
                await c.close()
        return self.run_async(go())

    def test_build_run_cache_and_a_changed_source(self):
        before_digests = self.digests()
        code, built, err = self.build("-t", "app:1")
        self.assertEqual(code, 0, err + self.daemon_errors())
        self.assertEqual(built["state"], "succeeded", built)
        image = built["image"]
        self.assertEqual(image["names"], ["app:1"])
        self.assertEqual(image["layers"][0], self.base["layers"][0])
        self.assertEqual(len(image["layers"]), len(self.base["layers"]) + 2)
        self.assertIn("X=1", image["config"]["env"])
        self.assertEqual(image["config"]["working_dir"], "/app")
        self.assertEqual(built["cached"], 0, err)
        self.assertIn("echo hi", err)  # the log went to stderr with --json
        # The untagged image the RUN's sandbox was made of is gone again.
        self.assertEqual(self.digests(), sorted(before_digests + [image["digest"]]))

        token = self.token("build-user")
        sandbox = self.create_sandbox(token, image="app:1")
        out, errout, outcome, _ = self.run_in(token, sandbox["id"], [
            "sh", "-c", "cat /greeting /app/file.txt; test -e /etc/passwd && echo passwd; "
                        "echo X=$X; pwd; stat -c %u /greeting"])
        self.assertEqual(outcome.get("exit_code"), 0, (out, errout, outcome, self.daemon_errors()))
        self.assertEqual(out.decode(), "hi\none\nX=1\n/app\n0\n")
        # The RUN had a sandbox's network, not the host's: its /proc/net/dev, kept in the image by a
        # second build, lists loopback only (the host has more: the control).
        code, netdev, err = self.build("-t", "net:1", recipe="FROM busybox:test\nRUN cat /proc/net/dev > /netdev\n")
        self.assertEqual(code, 0, err)
        box = self.create_sandbox(token, image="net:1")
        out, _, outcome, _ = self.run_in(token, box["id"], ["cat", "/netdev"])
        interfaces = sorted(line.split(":")[0].strip() for line in out.decode().splitlines()[2:])
        self.assertEqual(interfaces, ["lo"], (out, outcome))
        with open("/proc/net/dev") as f:
            self.assertNotEqual(sorted(line.split(":")[0].strip() for line in f.read().splitlines()[2:]), ["lo"])
        # The base is untouched: its sandboxes still have /etc/passwd (the whiteout is app:1's).
        base_box = self.create_sandbox(token, image="busybox:test")
        out, _, outcome, _ = self.run_in(token, base_box["id"], ["sh", "-c", "test -e /etc/passwd && echo passwd"])
        self.assertEqual(out.decode(), "passwd\n", outcome)

        # Again: every layer step from the cache, the same image.
        code, again, err = self.build("-t", "app:1")
        self.assertEqual(code, 0, err)
        self.assertEqual(again["cached"], 2, err)
        self.assertEqual(again["image"]["digest"], image["digest"])

        # A changed COPY source: the RUN still hits, the COPY misses, a new image.
        with open(os.path.join(self.context, "file.txt"), "w") as f:
            f.write("two\n")
        code, changed, err = self.build("-t", "app:2")
        self.assertEqual(code, 0, err)
        self.assertEqual(changed["cached"], 1, err)
        self.assertNotEqual(changed["image"]["digest"], image["digest"])
        self.assertEqual(changed["image"]["layers"][:2], image["layers"][:2])
        self.assertNotEqual(changed["image"]["layers"][2], image["layers"][2])

        # --no-cache runs the RUN again.
        code, fresh, err = self.build("-t", "app:3", "--no-cache")
        self.assertEqual(code, 0, err)
        self.assertEqual(fresh["cached"], 0, err)

    def test_a_failing_run_and_a_copy_out_of_the_context_leave_no_image(self):
        before, before_digests = self.names(), self.digests()
        code, built, err = self.build("-t", "bad:1", recipe="FROM busybox:test\nRUN echo about to fail; exit 3\n")
        self.assertEqual(code, 1, err)
        self.assertEqual(built["state"], "failed", built)
        self.assertIn("exit code 3", built["error"]["message"])
        self.assertIn("about to fail", built["error"]["message"])  # the output's tail
        self.assertEqual(self.names(), before)
        self.assertEqual(self.digests(), before_digests)  # no untagged step image either
        status, body = self.daemon.admin("GET", "/v1/admin/sandboxes")
        self.assertEqual(status, 200, body)
        builders = [s for s in body["sandboxes"] if s.get("name", "").startswith("image-build-")]
        self.assertEqual(builders, [], body)  # the RUN's sandbox is destroyed

        with open(os.path.join(self.work, "secret"), "w") as f:
            f.write("s")
        code, built, err = self.build("-t", "bad:2", recipe="FROM busybox:test\nCOPY ../secret /x\n")
        self.assertEqual(code, 1, err)
        self.assertIn("recipe line 2: COPY: source ../secret leaves the build context", err)
        self.assertEqual(self.names(), before)

        # The control: the same shapes that succeed.
        code, built, err = self.build("-t", "good:1", recipe="FROM busybox:test\nRUN echo fine\nCOPY file.txt /x\n")
        self.assertEqual(code, 0, err + self.daemon_errors())
        self.assertEqual(self.names(), sorted(before + ["good:1"]))

    def test_user_is_who_runs_and_who_commands_run_as(self):
        # RUN runs as root until USER names another user, then as the sandbox's agent; USER root
        # makes root the default of the image's commands, any other USER (or none) agent.
        code, built, err = self.build("-t", "users:1", recipe="FROM busybox:test\nRUN id -u > /as-root\n"
                                                              "USER 1000:1000\nRUN id -u > /home/agent/as-user\n"
                                                              "USER root\n")
        self.assertEqual(code, 0, err + self.daemon_errors())
        self.assertEqual(built["image"]["config"]["user"], "root")
        code, plain, err = self.build("-t", "users:2", recipe="FROM users:1\nUSER user\n")
        self.assertEqual(code, 0, err + self.daemon_errors())
        token = self.token("user-user")
        box = self.create_sandbox(token, image="users:1")
        out, errout, outcome, _ = self.run_in(token, box["id"], ["sh", "-c", "cat /as-root /home/agent/as-user; id -u; pwd"],
                                              user=None)
        self.assertEqual(outcome.get("exit_code"), 0, (out, errout, outcome))
        self.assertEqual(out.decode(), "0\n1000\n0\n/\n", errout)  # busybox:test says WORKDIR /
        # Asked for, agent it is.
        out, _, outcome, _ = self.run_in(token, box["id"], ["id", "-u"], user="agent")
        self.assertEqual(out.decode(), "1000\n", outcome)
        # The controls: USER user, and the base without USER, run commands as agent.
        for image in ("users:2", "busybox:test"):
            other = self.create_sandbox(token, image=image)
            out, _, outcome, _ = self.run_in(token, other["id"], ["id", "-u"], user=None)
            self.assertEqual(out.decode(), "1000\n", (image, outcome))

    def test_from_scratch_with_a_rootfs_archive(self):
        # A busybox root file system as a gzip tarball in the context: no registry, no base image.
        with tarfile.open(os.path.join(self.context, "rootfs.tar.gz"), "w:gz") as tar:
            for name, mode in (("bin", 0o755), ("etc", 0o755), ("tmp", 0o1777), ("root", 0o700)):
                info = tarfile.TarInfo(name)
                info.type, info.mode = tarfile.DIRTYPE, mode
                tar.addfile(info)
            tar.add("/bin/busybox", "bin/busybox")
            for applet in ("sh", "echo", "cat"):
                info = tarfile.TarInfo("bin/" + applet)
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, "busybox", 0o777
                tar.addfile(info)
            data = b"root:x:0:0:root:/root:/bin/sh\n"
            info = tarfile.TarInfo("etc/passwd")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        # WORKDIR of a directory the image lacks makes it (a layer of its own), as Docker's.
        code, built, err = self.build("-t", "scratchy:1", recipe="FROM scratch\nADD rootfs.tar.gz /\nENV PATH=/bin\n"
                                                                 "WORKDIR /work\nRUN echo built > /built; pwd > here\n")
        self.assertEqual(code, 0, err + self.daemon_errors())
        self.assertEqual(len(built["image"]["layers"]), 3)
        token = self.token("scratch-user")
        sandbox = self.create_sandbox(token, image="scratchy:1")
        out, errout, outcome, _ = self.run_in(token, sandbox["id"], ["sh", "-c", "cat /built /work/here; echo $PATH; pwd"])
        self.assertEqual(outcome.get("exit_code"), 0, (out, errout, outcome))
        self.assertEqual(out.decode(), "built\n/work\n/bin\n/work\n")
        # ADD takes only an archive at /: the recipe is refused before anything runs.
        code, _, err = self.build("-t", "scratchy:2", recipe="FROM scratch\nADD rootfs.tar.gz /opt\n")
        self.assertEqual(code, 1, err)
        self.assertIn("recipe line 2: ADD unpacks one local archive at / only", err)

    def test_from_debian_bookworm_made_by_mmdebstrap(self):
        if shutil.which("mmdebstrap") is None:
            self.skipTest("mmdebstrap is not installed (dist/install-deps.sh)")
        mirrors = subprocess.run(["apt-get", "indextargets", "--format", "$(RELEASE)"], capture_output=True, text=True)
        if "bookworm" not in mirrors.stdout.split():
            self.skipTest("no Debian bookworm mirror in the host's apt configuration")
        status, _ = self.daemon.admin("GET", "/v1/images/debian:bookworm")
        self.assertEqual(status, 404)
        code, built, err = self.build("-t", "deb:1", recipe="FROM debian:bookworm\nRUN cat /etc/debian_version > /v\n")
        if code != 0 and "mmdebstrap exited" in err:
            self.skipTest("mmdebstrap failed (is the Debian mirror reachable?): " + err[-500:])
        self.assertEqual(code, 0, err + self.daemon_errors())
        status, base = self.daemon.admin("GET", "/v1/images/debian:bookworm")
        self.assertEqual(status, 200, base)
        self.assertEqual(len(base["layers"]), 1)
        self.assertEqual(built["image"]["layers"][0], base["layers"][0])
        token = self.token("deb-user")
        sandbox = self.create_sandbox(token, image="deb:1")
        out, errout, outcome, _ = self.run_in(token, sandbox["id"], ["sh", "-c", "cat /v; stat -c %U /etc/passwd"])
        self.assertEqual(outcome.get("exit_code"), 0, (out, errout, outcome))
        self.assertTrue(out.decode().startswith("12."), out)
        self.assertTrue(out.decode().endswith("root\n"), out)

    def builders(self):
        status, body = self.daemon.admin("GET", "/v1/admin/sandboxes")
        self.assertEqual(status, 200, body)
        return [s["id"] for s in body["sandboxes"] if s.get("name", "").startswith("image-build-")]

    def step_images(self):
        status, body = self.daemon.admin("GET", "/v1/images")
        self.assertEqual(status, 200, body)
        return [i["digest"] for i in body["images"] if i["source"] == "build step" and not i["names"]]

    def test_a_build_cut_by_a_daemon_restart_leaves_no_sandbox_or_step_image(self):
        status, started = self.daemon.admin("POST", "/v1/images/build", {
            "recipe": "FROM busybox:test\nENV STEP=1\nRUN sleep 120\n", "context": self.context, "name": "cut:1"})
        self.assertEqual(status, 202, started)
        deadline = time.time() + 60
        while not self.builders() and time.time() < deadline:
            time.sleep(0.2)
        self.assertTrue(self.builders(), self.daemon_errors())
        self.assertTrue(self.step_images())  # the image its RUN's sandbox was made of
        self.daemon.kill9()  # the sandbox outlives the daemon
        self.daemon.start()
        deadline = time.time() + 60
        while (self.builders() or self.step_images()) and time.time() < deadline:
            time.sleep(0.2)
        self.assertEqual((self.builders(), self.step_images()), ([], []), self.daemon_errors())
        self.assertNotIn("cut:1", self.names())
        status, _ = self.daemon.admin("GET", "/v1/images/builds/" + started["id"])
        self.assertEqual(status, 404)  # a restart forgets builds
        # The control: a build after the restart succeeds.
        code, built, err = self.build("-t", "after:1", recipe="FROM busybox:test\nRUN true\n")
        self.assertEqual(code, 0, err + self.daemon_errors())

    def test_a_daemon_stopping_during_a_build_ends_it_and_exits_cleanly(self):
        status, started = self.daemon.admin("POST", "/v1/images/build", {
            "recipe": "FROM busybox:test\nRUN sleep 120\n", "context": self.context, "name": "stopped:1"})
        self.assertEqual(status, 202, started)
        deadline = time.time() + 60
        while not self.builders() and time.time() < deadline:
            time.sleep(0.2)
        self.assertTrue(self.builders(), self.daemon_errors())
        began = time.time()
        self.daemon.stop()  # SIGTERM: the build gives up instead of waiting for its RUN
        self.assertEqual(self.daemon.proc.returncode, 0, self.daemon.log()[-2000:])
        self.assertLess(time.time() - began, 15)
        self.assertIn("the daemon is stopping", self.daemon.log())
        self.daemon.start()
        deadline = time.time() + 60
        while (self.builders() or self.step_images()) and time.time() < deadline:
            time.sleep(0.2)
        self.assertEqual((self.builders(), self.step_images()), ([], []), self.daemon_errors())
        self.assertNotIn("stopped:1", self.names())


if __name__ == "__main__":
    unittest.main()
