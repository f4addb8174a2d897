"""Lifecycle webhooks ([webhooks], docs/PROTOCOL.md "Webhooks"): a real corrald POSTs its events to
receivers on loopback (Python's http.server in threads, one plain, one https with a test CA), from
a durable outbox in its store.

- A receiver that fails the first deliveries still gets every event: the same id and the same
  body bytes on every retry, a signature that an independent implementation (hmac) accepts,
  each body byte-identical to the outbox row the store recorded, one webhook per lifecycle event
  of the store's event log (stopped with its reason: request, idle, compute_budget).
- A compute budget spent by two sandboxes of a user is one budget.exhausted (one id) for the window.
- A receiver that is down while events happen and corrald restarts gets all of them afterwards.
- THREATS row 47: a body changed under the same signature, and a delivery replayed later than the
  receiver's window, fail the receiver's check (beside the positive control that passes).
"""
import hashlib
import hmac
import http.server
import json
import os
import sqlite3
import ssl
import sys
import threading
import time
import unittest

from corral_e2e import SPIN, DaemonTestCase, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "fixtures"))
from fake_internet_tls import make_certificates  # noqa: E402

SECRET = b"webhook-secret-of-the-e2e-test-0123456789"
TOLERANCE = 300  # seconds: the receiver's replay window


def verify(secret, header, body, now, tolerance=TOLERANCE):
    """A receiver's check, written from docs/PROTOCOL.md alone: True or the reason it fails."""
    parts = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    if "t" not in parts or "v1" not in parts:
        return "malformed"
    expected = hmac.new(secret, parts["t"].encode() + b"." + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, parts["v1"]):
        return "bad signature"
    if abs(now - int(parts["t"])) > tolerance:
        return "too old"
    return True


class Receiver:
    """An HTTP(S) receiver on loopback that records every request and answers 503 to the first
    `fail_first` of them, then 200. Stopped and started again on the same port."""

    def __init__(self, tls_files=None):
        self.requests = []  # (headers dict, raw body bytes, status answered)
        self.fail_first = 0
        self.lock = threading.Lock()
        self.tls_files = tls_files
        self.port = 0
        self.server = None
        self.start()

    def start(self):
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    status = 503 if receiver.fail_first > 0 else 200
                    receiver.fail_first = max(0, receiver.fail_first - 1)
                    receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body, status))
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self.server.server_address[1]
        if self.tls_files:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*self.tls_files)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def url(self):
        return f"{'https' if self.tls_files else 'http'}://127.0.0.1:{self.port}/hooks/corral"

    def delivered(self, sandbox_id=None):
        """The bodies answered 200, parsed, with their headers and raw bytes."""
        with self.lock:
            requests = list(self.requests)
        out = []
        for headers, body, status in requests:
            event = json.loads(body)
            if status == 200 and (sandbox_id is None or event["sandbox_id"] == sandbox_id):
                out.append((event, headers, body))
        return out


class Webhooks(DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp_files = []
        cls.plain = Receiver()
        ca, cert, key = make_certificates(["localhost"], ["127.0.0.1"])
        paths = {}
        for name, data in (("ca.pem", ca), ("server.pem", cert), ("server.key", key)):
            paths[name] = f"/tmp/corral-webhooks-{os.getpid()}-{name}"
            with open(paths[name], "wb") as f:
                f.write(data)
            os.chmod(paths[name], 0o600)
            cls.tmp_files.append(paths[name])
        cls.tls = Receiver(tls_files=(paths["server.pem"], paths["server.key"]))
        cls.secret_file = f"/tmp/corral-webhooks-{os.getpid()}-secret"
        fd = os.open(cls.secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.write(fd, SECRET + b"\n")
        os.close(fd)
        cls.tmp_files.append(cls.secret_file)
        cls.extra_sections = f"""
[webhooks]
urls = ["{cls.plain.url()}", "{cls.tls.url()}"]
secret_file = "{cls.secret_file}"
ca_file = "{paths['ca.pem']}"
events = ["sandbox.created", "sandbox.started", "sandbox.stopped", "sandbox.destroyed", "budget.exhausted"]
timeout = 5
retry_min = 1
retry_max = 2
"""
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            for receiver in (cls.plain, cls.tls):
                try:
                    receiver.stop()
                except Exception:
                    pass
            for path in cls.tmp_files:
                if os.path.exists(path):
                    os.unlink(path)

    def outbox(self, sandbox_id):
        """The store's outbox rows of a sandbox's events, and its event log's types."""
        db = sqlite3.connect(f"file:{self.daemon.state_dir}/corrald.db?mode=ro", uri=True, timeout=10)
        try:
            rows = db.execute("SELECT id, url, type, body, attempts, delivered_at, given_up_at FROM webhook_outbox "
                              "ORDER BY created_at, id, url").fetchall()
            events = [r[0] for r in db.execute("SELECT type FROM events WHERE sandbox_id = ? ORDER BY seq",
                                               (sandbox_id,))]
        finally:
            db.close()
        mine = [r for r in rows if json.loads(r[3])["sandbox_id"] == sandbox_id]
        return mine, events

    def lifecycle(self, token, **create):
        """A sandbox created (and started), stopped and destroyed; its id."""
        sandbox = self.create_sandbox(token, **create)
        status, _ = self.daemon.http("POST", f"/v1/sandboxes/{sandbox['id']}/stop", token)
        self.assertEqual(status, 200)
        status, _ = self.daemon.http("DELETE", f"/v1/sandboxes/{sandbox['id']}", token)
        self.assertEqual(status, 200)
        return sandbox["id"]

    def assert_delivered_as_recorded(self, sandbox_id, expect_types):
        """Every outbox row of the sandbox delivered, to both receivers, as the store recorded it."""
        def all_delivered():
            rows, _ = self.outbox(sandbox_id)
            return len(rows) == 2 * len(expect_types) and all(r[5] > 0 for r in rows) and rows
        rows = wait_until(all_delivered, timeout=60, interval=0.2, what="every webhook delivered")
        rows, events = self.outbox(sandbox_id)
        lifecycle_events = [t for t in events if t in ("sandbox.created", "sandbox.started", "sandbox.stopped",
                                                        "sandbox.destroyed")]
        self.assertEqual(lifecycle_events, expect_types)
        for receiver in (self.plain, self.tls):
            got = receiver.delivered(sandbox_id)
            # At least once; a receiver dedupes by id, after which there is one per event.
            by_id = {}
            for event, headers, body in got:
                by_id.setdefault(event["id"], (event, headers, body))
            self.assertEqual(sorted(e["type"] for e, _, _ in by_id.values()), sorted(expect_types))
            recorded = {r[0]: r for r in rows if r[1] == receiver.url()}
            self.assertEqual(set(recorded), set(by_id))
            for event_id, (event, headers, body) in by_id.items():
                self.assertEqual(body, recorded[event_id][3].encode(), "the body is the store's bytes")
                self.assertEqual(headers["corral-webhook-id"], event_id)
                self.assertEqual(headers["content-type"], "application/json")
                self.assertEqual(headers["corral-webhook-timestamp"],
                                 headers["corral-signature"].split(",")[0][2:])
                self.assertIs(verify(SECRET, headers["corral-signature"], body, time.time()), True)
                self.assertEqual(event["iss"], "acme")
                self.assertEqual(event["sub"], "alice")
                self.assertEqual(event["node"], json.loads(recorded[event_id][3])["node"])
        return rows

    def test_a_failing_receiver_gets_every_event_with_the_same_id_and_bytes(self):
        token = self.token()
        self.plain.fail_first = 3
        sandbox_id = self.lifecycle(token)
        rows = self.assert_delivered_as_recorded(
            sandbox_id, ["sandbox.created", "sandbox.started", "sandbox.stopped", "sandbox.destroyed"])
        # The failed attempts carried the same id and bytes as the one that was taken.
        with self.plain.lock:
            tries = [(json.loads(b)["id"], b, s) for _, b, s in self.plain.requests
                     if json.loads(b)["sandbox_id"] == sandbox_id]
        failed = [t for t in tries if t[2] == 503]
        self.assertEqual(len(failed), 3)
        accepted = {i: b for i, b, s in tries if s == 200}
        for event_id, body, _ in failed:
            self.assertEqual(body, accepted[event_id])
        plain_rows = [r for r in rows if r[1] == self.plain.url()]
        self.assertGreater(max(r[4] for r in plain_rows), 1, "a row took more than one attempt")
        stopped = [json.loads(r[3]) for r in plain_rows if r[2] == "sandbox.stopped"]
        self.assertEqual(stopped[0]["data"], {"reason": "request"})
        scrape = self.daemon.metrics()
        self.assertGreaterEqual(scrape.get("corral_webhook_attempts_total", result="failed"), 3)
        self.assertGreaterEqual(scrape.get("corral_webhook_attempts_total", result="delivered"), 8)

    def test_an_idle_stop_says_so(self):
        token = self.token()
        sandbox = self.create_sandbox(token, idle_timeout_s=1)
        def stopped():
            got = [e for e, _, _ in self.plain.delivered(sandbox["id"]) if e["type"] == "sandbox.stopped"]
            return got
        got = wait_until(stopped, timeout=30, interval=0.2, what="sandbox.stopped by the idle timeout")
        self.assertEqual(got[0]["data"], {"reason": "idle"})
        status, _ = self.daemon.http("DELETE", f"/v1/sandboxes/{sandbox['id']}", token)
        self.assertEqual(status, 200)

    def test_a_spent_compute_budget_stops_with_its_reason_and_is_told_once(self):
        token = self.token("spender", budget={"compute_s": 1, "window": "day"})
        first = self.create_sandbox(token)["id"]
        outcome, _ = self.exec_once(token, first, SPIN)
        self.assertEqual(outcome["outcome"], "budget_exhausted", outcome)

        def told():
            events = [e for e, _, _ in self.plain.delivered()]
            stopped = [e for e in events if e["type"] == "sandbox.stopped" and e["sandbox_id"] == first]
            spent = [e for e in events if e["type"] == "budget.exhausted" and e["sub"] == "spender"]
            return (stopped, spent) if stopped and spent else None
        stopped, spent = wait_until(told, timeout=40, interval=0.2, what="sandbox.stopped and budget.exhausted")
        self.assertEqual(stopped[0]["data"], {"reason": "compute_budget"})
        data = spent[0]["data"]
        self.assertEqual((data["kind"], data["window"], data["limit_cpu_ms"]), ("compute", "day", 1000))
        self.assertGreaterEqual(data["spent_cpu_ms"], 1000)
        self.assertLess(data["window_start"], spent[0]["created_at"] + 1)
        self.assertGreater(data["window_end"], spent[0]["created_at"])
        self.assertEqual(spent[0]["sandbox_id"], first)
        # The budget is spent for the day: once told, never again for this window, whatever
        # else finds it spent (a start refused here). One id, however many deliveries.
        status, _ = self.daemon.http("POST", f"/v1/sandboxes/{first}/start", token)
        self.assertEqual(status, 402)
        rows = [r for r in self.outbox(first)[0] if r[2] == "budget.exhausted"]
        self.assertEqual(len({r[0] for r in rows}), 1)
        self.assertEqual(len({e["id"] for e in spent}), 1)
        status, _ = self.daemon.http("DELETE", f"/v1/sandboxes/{first}", token)
        self.assertEqual(status, 200)

    def test_a_receiver_down_across_a_restart_gets_everything_after(self):
        token = self.token()
        self.tls.stop()  # down: connections refused
        try:
            sandbox_id = self.lifecycle(token)
            rows, _ = self.outbox(sandbox_id)
            self.assertEqual(len(rows), 8)
            # The plain receiver took its four (the control); none reached the one that is down.
            wait_until(lambda: all(r[5] > 0 for r in self.outbox(sandbox_id)[0] if r[1] == self.plain.url()),
                       timeout=30, interval=0.2, what="the plain receiver's deliveries")
            down = [r for r in self.outbox(sandbox_id)[0] if r[1] == self.tls.url()]
            self.assertEqual([r[5] for r in down], [0, 0, 0, 0])
            self.daemon.stop()
            self.assertEqual([r[5] for r in self.outbox(sandbox_id)[0] if r[1] == self.tls.url()], [0, 0, 0, 0])
        finally:
            self.tls.start()  # the same port
            if self.daemon.proc.poll() is not None:
                self.daemon.start()
        self.assert_delivered_as_recorded(
            sandbox_id, ["sandbox.created", "sandbox.started", "sandbox.stopped", "sandbox.destroyed"])
        self.assertIn("attempt failed; will retry", self.daemon.log())

    def test_a_changed_body_or_a_late_replay_fails_the_receivers_check(self):
        token = self.token()
        sandbox_id = self.lifecycle(token)
        self.assert_delivered_as_recorded(
            sandbox_id, ["sandbox.created", "sandbox.started", "sandbox.stopped", "sandbox.destroyed"])
        event, headers, body = self.plain.delivered(sandbox_id)[0]
        signature = headers["corral-signature"]
        sent_at = int(headers["corral-webhook-timestamp"])
        # The positive control: as delivered, within the window.
        self.assertIs(verify(SECRET, signature, body, sent_at + 10), True)
        # A body changed under the same signature.
        changed = body.replace(b'"sub":"alice"', b'"sub":"mallory"')
        self.assertNotEqual(changed, body)
        self.assertEqual(verify(SECRET, signature, changed, sent_at + 10), "bad signature")
        # The same delivery replayed later than the window.
        self.assertEqual(verify(SECRET, signature, body, sent_at + TOLERANCE + 1), "too old")
        # Its timestamp moved forward to fit the window: the MAC covers the timestamp.
        moved = signature.replace(f"t={sent_at}", f"t={sent_at + TOLERANCE + 1}")
        self.assertEqual(verify(SECRET, moved, body, sent_at + TOLERANCE + 1), "bad signature")
        # Another secret.
        self.assertEqual(verify(b"x" * 40, signature, body, sent_at), "bad signature")


if __name__ == "__main__":
    unittest.main()
