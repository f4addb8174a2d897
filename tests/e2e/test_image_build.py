"""Image builds end to end: `corral image build` of a recipe on busybox (make_image.sh's layout,
imported as busybox:test): RUN in a sandbox of the image so far (a file made, /etc/passwd
removed), COPY from the context, ENV and WORKDIR. The image has the base's layer plus one a RUN
and one a COPY; a sandbox of it sees the RUN's file, the copied file, no /etc/passwd (the
whiteout), X=1 in its commands' environment and /app as their working directory. The same
recipe again is all cache hits (the same digest); a changed COPY source misses from that step on
(the RUN before it still hits); a failing RUN and a COPY out of the context leave no image, each
beside the good build."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
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
        if recipe is not None:
            with open(os.path.join(self.context, "Recipe"), "w") as f:
                f.write(recipe)
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

    def run_in(self, token, sandbox, argv):
        async def go():
            c = await WsClient.connect(self.daemon.ws_url(), token)
            try:
                return await c.run(sandbox, argv, user="root")
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


if __name__ == "__main__":
    unittest.main()
