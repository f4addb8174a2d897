"""The web page as corrald serves it (api/web_page.h): / and /assets/ without a token, with a
content security policy; nothing else of the page's directory; off with `api.web = false`; a
web_dir that has no page stops the daemon at start with a message that says so. The page's
behaviour in a browser is tested by web/run_tests.py (ctest web_page)."""
import http.client
import os
import subprocess
import tempfile
import unittest

from corral_e2e import CORRALD, Daemon, DaemonTestCase

BUILT_PAGE = os.path.join(os.environ.get("CORRAL_BUILD_DIR", "build"), "tools", "web", "index.html")


def get(port, path, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers=headers or {})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, dict((k.lower(), v) for k, v in response.getheaders()), body


@unittest.skipUnless(os.path.exists(BUILT_PAGE), "the build made no web page (npm ci in web/, then build)")
class WebPage(DaemonTestCase):
    def test_the_page_and_its_assets_need_no_token_and_carry_a_strict_policy(self):
        status, headers, body = get(self.daemon.port, "/")
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-type"], "text/html; charset=utf-8")
        self.assertIn(b'src="/assets/main.js"', body)
        self.assertIn("script-src 'self'", headers["content-security-policy"])
        self.assertIn("frame-ancestors 'none'", headers["content-security-policy"])
        self.assertEqual(headers["x-content-type-options"], "nosniff")
        status, headers, body = get(self.daemon.port, "/assets/main.js")
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-type"], "text/javascript; charset=utf-8")
        self.assertGreater(len(body), 10000)
        status, headers, _ = get(self.daemon.port, "/assets/main.css")
        self.assertEqual((status, headers["content-type"]), (200, "text/css; charset=utf-8"))

    def test_nothing_else_is_served(self):
        for path in ["/assets/missing.js", "/assets/.hidden", "/assets/..%2findex.html", "/index.html/x",
                     "/assets/%2e%2e", "/etc/passwd"]:
            status, _, body = get(self.daemon.port, path)
            self.assertEqual(status, 404, (path, body))
        # The API is still the API: a token is needed there.
        status, _, _ = get(self.daemon.port, "/v1/sandboxes")
        self.assertEqual(status, 401)

    def test_the_pages_own_origin_may_call_the_api_and_another_may_not(self):
        token = self.token("web-origin")
        auth = {"Authorization": "Bearer " + token}
        own = f"http://127.0.0.1:{self.daemon.port}"
        status, headers, _ = get(self.daemon.port, "/v1/sandboxes", dict(auth, Origin=own))
        self.assertEqual(status, 200)
        self.assertEqual(headers.get("access-control-allow-origin"), own)
        status, _, _ = get(self.daemon.port, "/v1/sandboxes", dict(auth, Origin="http://evil.example"))
        self.assertEqual(status, 403)


class WebPageOff(DaemonTestCase):
    extra_api_config = "web = false"

    def test_web_false_serves_no_page(self):
        status, _, _ = get(self.daemon.port, "/")
        self.assertEqual(status, 404)
        status, _, _ = get(self.daemon.port, "/healthz")
        self.assertEqual(status, 200)  # control: the daemon is up


class WebDirWithoutPage(unittest.TestCase):
    def test_a_configured_web_dir_without_a_page_stops_the_start(self):
        if os.geteuid() != 0 or not os.path.exists(CORRALD):
            self.skipTest("corrald needs root and a build")
        empty = tempfile.mkdtemp(prefix="corral-e2e-web-")
        daemon = Daemon()
        daemon.extra_api_config = f'web_dir = "{empty}"'
        try:
            with self.assertRaises(RuntimeError) as raised:
                daemon.start()
            self.assertIn("api.web_dir", str(raised.exception))
            self.assertIn("no index.html", str(raised.exception))
            # Control: the same directory with a page starts.
            with open(os.path.join(empty, "index.html"), "w") as f:
                f.write("<!doctype html><title>custom</title>")
            daemon.start()
            status, _, body = get(daemon.port, "/")
            self.assertEqual((status, body), (200, b"<!doctype html><title>custom</title>"))
        finally:
            daemon.cleanup()
            subprocess.run(["rm", "-rf", empty], check=False)


if __name__ == "__main__":
    unittest.main()
