"""verify_webhook against a signature computed by an independent implementation (the vector of
tests/unit/webhooks_test.cc and sdk/typescript/test/webhook.test.mjs) and against a body signed
here as corrald signs it: the positive controls pass; a body changed under the same signature, a
delivery replayed after the window, a timestamp moved forward, another secret and malformed
headers fail, each with its reason."""
import hashlib
import hmac
import json
import unittest

from corral import WebhookVerificationError, verify_webhook

SECRET = "0123456789abcdef0123456789abcdef"


class Webhook(unittest.TestCase):
    def fails(self, reason, *args, **kwargs):
        with self.assertRaises(WebhookVerificationError) as caught:
            verify_webhook(*args, **kwargs)
        self.assertEqual(caught.exception.reason, reason, (args, kwargs))

    def test_a_signature_made_by_another_implementation_verifies_and_a_changed_body_does_not(self):
        signature = "t=1700000000,v1=edd672f8eea00a2e3f67b12baa524da625c798fbb7fdd35204a02298f64a6307"
        self.assertEqual(verify_webhook(SECRET, signature, '{"id":"wh_x"}', now=1700000010)["id"], "wh_x")
        self.fails("signature", SECRET, signature, '{"id":"wh_y"}', now=1700000010)

    def test_header_forms_the_window_a_moved_timestamp_another_secret_and_malformed_headers(self):
        body = json.dumps({"id": "wh_abc", "type": "sandbox.stopped", "created_at": 1700000000, "node": "n",
                           "iss": "acme", "sub": "alice", "sandbox_id": "sb_1", "data": {"reason": "idle"}})
        t = 1700000000
        mac = hmac.new(SECRET.encode(), f"{t}.{body}".encode(), hashlib.sha256).hexdigest()
        signature = f"t={t},v1={mac}"
        # Positive controls: each form of headers, a bytes body, within the window either way.
        self.assertEqual(verify_webhook(SECRET, {"Corral-Signature": signature}, body, now=t + 299)["type"],
                         "sandbox.stopped")
        self.assertEqual(verify_webhook(SECRET, {"corral-signature": [signature]}, body.encode(), now=t - 299)["data"],
                         {"reason": "idle"})
        self.assertEqual(verify_webhook(SECRET.encode(), signature, body, now=t, tolerance_seconds=0)["id"], "wh_abc")
        self.assertEqual(verify_webhook(SECRET, f"t={t},v1={'0' * 64},v1={mac}", body, now=t)["sub"], "alice")

        self.fails("timestamp", SECRET, signature, body, now=t + 301)
        self.fails("timestamp", SECRET, signature, body, now=t + 61, tolerance_seconds=60)
        self.fails("signature", SECRET, f"t={t + 1000},v1={mac}", body, now=t + 1000)
        self.fails("signature", "another secret of 32 bytes or more!!", signature, body, now=t)
        self.fails("signature", SECRET, signature, body.replace("alice", "mallory"), now=t)
        for bad in ("", f"t={t}", f"v1={mac}", f"t=soon,v1={mac}"):
            self.fails("malformed", SECRET, bad, body, now=t)
        self.fails("malformed", SECRET, {}, body, now=t)
