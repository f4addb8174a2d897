// The SDK against a real corrald (started by run_tests.py, which passes its address and an
// issuer's name and secret): tokens minted by createToken verify; sandboxes are made, listed,
// run commands whose output streams, and are destroyed; errors are CorralErrors with codes.
import assert from "node:assert/strict";
import { after, test } from "node:test";

import { CorralClient, CorralError } from "../dist/index.js";
import { createToken } from "../dist/token.js";

const url = process.env.CORRAL_URL;
const issuer = process.env.CORRAL_ISSUER;
const secret = process.env.CORRAL_SECRET;
if (!url || !issuer || !secret) throw new Error("run through run_tests.py (CORRAL_URL, CORRAL_ISSUER, CORRAL_SECRET)");

const clients = [];
function client(userId, extra = {}) {
  const c = new CorralClient({ url, token: createToken({ issuer, secret, userId, ...extra }) });
  clients.push(c);
  return c;
}
after(() => clients.forEach((c) => c.close()));

test("a token from createToken verifies; a wrong secret is unauthorized", async () => {
  assert.deepEqual(await client("ts-alice").listSandboxes(), []);
  const forged = new CorralClient({ url, token: createToken({ issuer, secret: "x".repeat(43), userId: "ts-alice" }) });
  await assert.rejects(forged.listSandboxes(), (e) => e instanceof CorralError && e.code === "unauthorized" && e.status === 401);
  assert.throws(() => createToken({ issuer, secret: "short", userId: "u" }), /at least 32 bytes/);
});

test("scopes and budget reach corrald", async () => {
  const readOnly = client("ts-scoped", { scopes: ["exec"] });
  await assert.rejects(readOnly.createSandbox({ start: false }), (e) => e.code === "forbidden" && e.status === 403);
  // Positive control: the default scopes may create.
  const full = client("ts-scoped", { budget: { computeSeconds: 3600, window: "day" } });
  const sandbox = await full.createSandbox({ start: false, name: "scoped" });
  assert.equal(sandbox.state, "created");
  await full.destroySandbox(sandbox.id);
});

test("a sandbox is created, listed, runs a command with streamed output, and is destroyed", async () => {
  const c = client("ts-bob");
  const sandbox = await c.createSandbox({ name: "sdk", egress: { domains: [] } });
  try {
    assert.equal(sandbox.state, "running");
    assert.equal(sandbox.network, "loopback");
    assert.deepEqual((await c.listSandboxes()).map((s) => s.id), [sandbox.id]);
    assert.equal((await c.getSandbox(sandbox.id)).name, "sdk");

    const command = await c.exec(sandbox.id, ["sh", "-c", "echo one; sleep 0.2; echo two >&2; echo three; exit 3"]);
    const seen = [];
    for await (const chunk of command.output) seen.push([chunk.fd, new TextDecoder().decode(chunk.data)]);
    const outcome = await command.outcome;
    assert.deepEqual([outcome.outcome, outcome.exit_code], ["exited", 3]);
    assert.equal(seen.filter(([fd]) => fd === 1).map(([, t]) => t).join(""), "one\nthree\n");
    assert.equal(seen.filter(([fd]) => fd === 2).map(([, t]) => t).join(""), "two\n");

    const ran = await c.run(sandbox.id, ["id", "-un"]);
    assert.deepEqual([ran.stdout, ran.outcome.exit_code], ["agent\n", 0]);
    const asRoot = await c.run(sandbox.id, ["id", "-un"], { user: "root" });
    assert.equal(asRoot.stdout, "root\n");
  } finally {
    await c.destroySandbox(sandbox.id);
  }
  await assert.rejects(c.getSandbox(sandbox.id), (e) => e instanceof CorralError && e.code === "not_found" && e.status === 404);
});

test("errors over the WebSocket are CorralErrors too", async () => {
  const c = client("ts-carol");
  await assert.rejects(c.exec("sb_aaaaaaaaaaaaaaaaaaaa", ["true"]), (e) => e instanceof CorralError && e.code === "not_found");
  await assert.rejects(c.exec("sb_aaaaaaaaaaaaaaaaaaaa", []), /argv must not be empty/);
  // Another user's sandbox is not found either, exactly like a missing one.
  const owner = client("ts-dave");
  const theirs = await owner.createSandbox({ start: false });
  try {
    await assert.rejects(c.getSandbox(theirs.id), (e) => e.code === "not_found");
  } finally {
    await owner.destroySandbox(theirs.id);
  }
});
