"""Pulling images from a real registry on loopback (Debian's docker-registry, an image pushed to it
by skopeo): without and with a password, the password from the operator's config only (never in
corrald's log, its command lines or a sandbox), a pulled image equal to the same image imported
from its layout, and sandboxes made of it. Every refusal beside its positive control."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))

from corral_e2e import DaemonTestCase  # noqa: E402
from image_layouts import layout  # noqa: E402
from registry import Registry  # noqa: E402

USER, PASSWORD = "puller", "s3cret-registry-password-7f1c"


class ImagePullTest(DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        cls.busybox = layout("busybox")
        cls.open_registry = Registry()
        cls.auth_registry = Registry(auth=(USER, PASSWORD))
        # Class cleanups run after tearDownClass, and also when setUpClass fails part way.
        for registry in (cls.open_registry, cls.auth_registry):
            cls.addClassCleanup(registry.stop)
            registry.start()
        cls.open_registry.push(cls.busybox, "tools/busybox:1")
        cls.auth_registry.push(cls.busybox, "private/busybox:1")
        cls.password_file = os.path.join(cls.open_registry.tmpdir, "password")
        with open(cls.password_file, "w") as f:
            f.write(PASSWORD + "\n")
        os.chmod(cls.password_file, 0o600)
        cls.extra_config = f"""
[images]
max_size = "1G"

[[images.registry]]
host = "{cls.open_registry.address}"
insecure = true

[[images.registry]]
host = "{cls.auth_registry.address}"
insecure = true
username = "{USER}"
password_file = "{cls.password_file}"
"""
        super().setUpClass()

    def images(self):
        status, body = self.daemon.admin("GET", "/v1/images")
        self.assertEqual(status, 200, body)
        return body["images"]

    def pull(self, ref, **fields):
        return self.daemon.admin("POST", "/v1/images/pull", {"ref": ref, **fields})

    def run_in(self, image, argv):
        token = self.token()
        sandbox = self.create_sandbox(token, image=image)
        try:
            outcome, _ = self.exec_once(token, sandbox["id"], argv)
            return sandbox, outcome
        finally:
            self.daemon.http("DELETE", f"/v1/sandboxes/{sandbox['id']}", token)

    def test_pull_from_an_open_registry_equals_an_import_of_the_same_layout(self):
        ref = f"{self.open_registry.address}/tools/busybox:1"
        status, pulled = self.pull(ref)
        self.assertEqual(status, 201, f"{pulled}\n{self.daemon_errors()}")
        self.assertIn(ref, pulled["names"])  # (other tests pull the same image under other names)
        self.assertTrue(pulled["source"].startswith("pull "), pulled)
        status, imported = self.daemon.admin("POST", "/v1/images/import",
                                             {"path": self.busybox, "name": "local/busybox:1"})
        self.assertEqual(status, 201, imported)
        self.assertEqual(imported["digest"], pulled["digest"], "the same image is one image, however it came")
        self.assertIn(ref, imported["names"])
        self.assertIn("local/busybox:1", imported["names"])
        sandbox, outcome = self.run_in(ref, ["sh", "-c", "echo pulled-ok; id -u"])
        self.assertEqual(sandbox["image_digest"], pulled["digest"])
        self.assertEqual(outcome.get("exit_code"), 0, outcome)

    def test_a_registry_with_a_password_takes_the_configured_one_only(self):
        ref = f"{self.auth_registry.address}/private/busybox:1"
        # Denial first: a name the registry does not have is not found, and nothing is added.
        before = self.images()
        status, body = self.pull(f"{self.auth_registry.address}/private/missing:1")
        self.assertIn(status, (404, 403), body)
        self.assertEqual(self.images(), before)
        # Control: the configured credentials pull it.
        status, pulled = self.pull(ref, name="private:1")
        self.assertEqual(status, 201, f"{pulled}\n{self.daemon_errors()}")
        self.assertIn("private:1", pulled["names"])
        # The password is in no log line and in no process's command line while corrald runs.
        self.assertNotIn(PASSWORD, self.daemon.log())
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        self.assertNotIn(PASSWORD.encode(), f.read())
                except OSError:
                    pass
        # Nor inside a sandbox of the image: its environment and files (the kernel's trees aside).
        _, outcome = self.run_in("private:1", [
            "sh", "-c", f"env | grep -q '{PASSWORD}' && exit 3; "
                        f"grep -rqs '{PASSWORD}' /bin /etc /home /root /tmp /run /var && exit 4; exit 0"])
        self.assertEqual(outcome.get("exit_code"), 0, f"the password is inside: {outcome}")

    def test_a_wrong_password_is_refused_and_adds_nothing(self):
        with open(self.password_file) as f:
            right = f.read()
        before = self.images()
        try:
            with open(self.password_file, "w") as f:
                f.write("wrong\n")
            status, body = self.pull(f"{self.auth_registry.address}/private/busybox:1", name="wrong:1")
            self.assertEqual(status, 403, body)
            self.assertIn("skopeo", body["error"]["message"])
            self.assertEqual(self.images(), before)
        finally:
            with open(self.password_file, "w") as f:
                f.write(right)
        status, body = self.pull(f"{self.auth_registry.address}/private/busybox:1", name="right:1")
        self.assertEqual(status, 201, body)  # control: the same pull with the right password

    def test_bad_references_are_refused_before_any_network(self):
        for ref, cause in [("busybox:1", "registry"), ("127.0.0.1:1/../x:1", ""), ("Upper/Case:1", "")]:
            status, body = self.pull(ref)
            self.assertEqual(status, 400, f"{ref}: {body}")
            if cause:
                self.assertIn(cause, body["error"]["message"])
        # A registry that is not there: unavailable, not an internal error.
        status, body = self.pull("127.0.0.1:9/none/busybox:1")
        self.assertEqual(status, 503, body)


if __name__ == "__main__":
    unittest.main()
