// verifyWebhook (src/webhook.ts) against a signature computed by an independent implementation
// (Python's hmac module, the same vector as tests/unit/webhooks_test.cc) and against a body
// signed here as corrald signs it: the positive controls pass; a body changed under the same
// signature, a delivery replayed after the window, a timestamp moved forward, another secret and
// malformed headers fail, each with its reason.
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { test } from "node:test";

import { verifyWebhook, WebhookVerificationError } from "../dist/webhook.js";

const secret = "0123456789abcdef0123456789abcdef";

const fails = (reason) => (e) => e instanceof WebhookVerificationError && e.reason === reason;

test("a signature made by another implementation verifies; a changed body does not", () => {
  // python3 -c "import hmac,hashlib; print(hmac.new(b'0123456789abcdef0123456789abcdef',
  //   b'1700000000.{\"id\":\"wh_x\"}', hashlib.sha256).hexdigest())"
  const signature = "t=1700000000,v1=edd672f8eea00a2e3f67b12baa524da625c798fbb7fdd35204a02298f64a6307";
  const event = verifyWebhook(secret, signature, '{"id":"wh_x"}', { now: 1700000010 });
  assert.equal(event.id, "wh_x");
  assert.throws(() => verifyWebhook(secret, signature, '{"id":"wh_y"}', { now: 1700000010 }), fails("signature"));
});

test("headers of fetch and of node:http, a replay after the window, a moved timestamp, another secret", () => {
  const body = JSON.stringify({ id: "wh_abc", type: "sandbox.stopped", created_at: 1700000000, node: "n", iss: "acme",
                                sub: "alice", sandbox_id: "sb_1", data: { reason: "idle" } });
  const t = 1700000000;
  const mac = createHmac("sha256", secret).update(`${t}.${body}`).digest("hex");
  const signature = `t=${t},v1=${mac}`;
  // Positive controls: each form of headers, a Buffer body, within the window either way.
  assert.equal(verifyWebhook(secret, new Headers({ "Corral-Signature": signature }), body, { now: t + 299 }).type,
               "sandbox.stopped");
  assert.deepEqual(verifyWebhook(secret, { "corral-signature": signature }, Buffer.from(body), { now: t - 299 }).data,
                   { reason: "idle" });
  assert.equal(verifyWebhook(Buffer.from(secret), signature, body, { now: t, toleranceSeconds: 0 }).id, "wh_abc");
  // Several v1 MACs: one match is enough.
  assert.equal(verifyWebhook(secret, `t=${t},v1=${"0".repeat(64)},v1=${mac}`, body, { now: t }).sub, "alice");

  assert.throws(() => verifyWebhook(secret, signature, body, { now: t + 301 }), fails("timestamp"));
  assert.throws(() => verifyWebhook(secret, signature, body, { now: t + 61, toleranceSeconds: 60 }), fails("timestamp"));
  assert.throws(() => verifyWebhook(secret, `t=${t + 1000},v1=${mac}`, body, { now: t + 1000 }), fails("signature"));
  assert.throws(() => verifyWebhook("another secret of 32 bytes or more!!", signature, body, { now: t }),
                fails("signature"));
  assert.throws(() => verifyWebhook(secret, signature, body.replace("alice", "mallory"), { now: t }), fails("signature"));
  for (const bad of ["", `t=${t}`, `v1=${mac}`, `t=soon,v1=${mac}`]) {
    assert.throws(() => verifyWebhook(secret, bad, body, { now: t }), fails("malformed"), bad);
  }
  assert.throws(() => verifyWebhook(secret, {}, body, { now: t }), fails("malformed"));
});
