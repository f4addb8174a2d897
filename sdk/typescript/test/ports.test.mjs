// Preview URLs through the SDK against a real corrald: a port a process in the sandbox listens on
// is shown, reached at its path URL with the token and with a signed URL (no token), listed, and
// closed; a changed signature, another user and a port not listening get their errors. (Both URL
// forms, WebSocket, cookies and the hostile cases: tests/e2e/test_ports.py.)
import assert from "node:assert/strict";
import { test } from "node:test";

import { client, token } from "./helpers.mjs";

async function eventually(fn, what) {
  const deadline = Date.now() + 30000;
  for (;;) {
    const result = await fn();
    if (result) return result;
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

test("a shown port is reached with the token and with a signed URL, then closed", async () => {
  const c = client("ts-ports");
  const sandbox = await c.createSandbox({});
  try {
    // Runs until the sandbox goes (its output is not read: the test is about the port).
    await c.exec(sandbox.id, ["sh", "-c", "cd \"$(mktemp -d)\" && echo 'hi from the sandbox' > hello.txt && " +
                              "exec python3 -m http.server 8000 --bind 127.0.0.1"]);
    const shown = await c.openPort(sandbox.id, 8000);
    assert.equal(shown.port, 8000);
    assert.equal(shown.public, false);
    assert.equal(shown.path_url, `/v1/sandboxes/${sandbox.id}/ports/8000/`);
    assert.deepEqual((await c.listPorts(sandbox.id)).map((p) => p.port), [8000]);

    const withToken = await eventually(async () => {
      const r = await fetch(c.urlOf(shown.path_url + "hello.txt"), { headers: { Authorization: `Bearer ${token("ts-ports")}` } });
      return r.status === 502 ? null : r;  // the server still starting
    }, "the server in the sandbox");
    assert.equal(withToken.status, 200);
    assert.equal(await withToken.text(), "hi from the sandbox\n");

    const signed = await c.signPortUrl(sandbox.id, 8000, { ttlS: 60 });
    assert.ok(signed.expires_at > Date.now() / 1000);
    const [path, query] = signed.path_url.split("?");
    const byLink = await fetch(c.urlOf(`${path}hello.txt?${query}`));
    assert.equal(byLink.status, 200);
    assert.match(byLink.headers.get("set-cookie") ?? "", /^corral_port=/);
    // A changed signature, no signature, another user's token: the 404 of no sandbox.
    const changed = query.replace(/corral_sig=(.)/, (_, c0) => `corral_sig=${c0 === "A" ? "B" : "A"}`);
    assert.equal((await fetch(c.urlOf(`${path}hello.txt?${changed}`))).status, 404);
    assert.equal((await fetch(c.urlOf(`${path}hello.txt`))).status, 404);
    const bob = client("ts-ports-bob");
    await assert.rejects(bob.signPortUrl(sandbox.id, 8000), (e) => e.code === "not_found" && e.status === 404);
    await assert.rejects(bob.openPort(sandbox.id, 8001), (e) => e.code === "not_found");
    // Public needs its scope; corral's own services are not shown.
    await assert.rejects(c.openPort(sandbox.id, 8000, { public: true }), (e) => e.code === "forbidden");
    await assert.rejects(c.openPort(sandbox.id, 0), (e) => e.code === "bad_request");

    // A port nothing listens on: 502 bad_gateway, with the API's error body.
    const empty = await c.openPort(sandbox.id, 8002);
    const nothing = await fetch(c.urlOf(empty.path_url), { headers: { Authorization: `Bearer ${token("ts-ports")}` } });
    assert.equal(nothing.status, 502);
    assert.equal((await nothing.json()).error.code, "bad_gateway");

    await c.closePort(sandbox.id, 8000);
    await c.closePort(sandbox.id, 8002);
    assert.deepEqual(await c.listPorts(sandbox.id), []);
    assert.equal((await fetch(c.urlOf(`${path}hello.txt?${query}`))).status, 404, "closed: the signed URL too");
    await assert.rejects(c.closePort(sandbox.id, 8000), (e) => e.code === "not_found");
  } finally {
    await c.destroySandbox(sandbox.id);
  }
});
