// The SDK against a real corrald (started by run_tests.py, which passes its address and an
// issuer's name and secret): tokens minted by createToken verify; sandboxes are made, listed,
// run commands whose output streams, and are destroyed; errors are CorralErrors with codes.
import assert from "node:assert/strict";
import { test } from "node:test";

import { CorralClient, CorralError } from "../dist/index.js";
import { createToken } from "../dist/token.js";
import { client, env } from "./helpers.mjs";

const { url, issuer } = env;

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

test("files: write, read, stat, list, mkdir, rename, remove; refusals are CorralErrors", async () => {
  const c = client("ts-files");
  const sandbox = await c.createSandbox({ name: "files" });
  try {
    await c.mkdir(sandbox.id, "/home/agent/a/b", { parents: true });
    const bytes = new Uint8Array([0, 1, 2, 250, 255]);
    assert.deepEqual(await c.writeFile(sandbox.id, "/home/agent/a/b/bin", bytes), { path: "/home/agent/a/b/bin", size: 5 });
    assert.deepEqual(await c.readFile(sandbox.id, "/home/agent/a/b/bin"), bytes);
    await c.writeFile(sandbox.id, "/home/agent/a/note.txt", "one\n", { mode: 0o600 });
    await c.writeFile(sandbox.id, "/home/agent/a/note.txt", "two\n", { append: true });
    assert.equal(await c.readText(sandbox.id, "/home/agent/a/note.txt"), "one\ntwo\n");
    const stat = await c.stat(sandbox.id, "/home/agent/a/note.txt");
    assert.deepEqual([stat.type, stat.size, stat.mode], ["file", 8, "0600"]);
    // The agent wrote it: the file is the agent's, as the sandbox sees it.
    assert.equal((await c.run(sandbox.id, ["stat", "-c", "%U", "/home/agent/a/note.txt"])).stdout, "agent\n");
    await c.rename(sandbox.id, "/home/agent/a/note.txt", "/home/agent/a/renamed.txt");
    assert.deepEqual((await c.listDir(sandbox.id, "/home/agent/a")).map((e) => [e.name, e.type]),
                     [["b", "dir"], ["renamed.txt", "file"]]);
    await assert.rejects(c.readFile(sandbox.id, "/home/agent/a/note.txt"), (e) => e instanceof CorralError && e.code === "not_found");
    await assert.rejects(c.readFile(sandbox.id, "/proc/1/environ"), (e) => e.code === "forbidden" && e.status === 403);
    await assert.rejects(c.mkdir(sandbox.id, "/home/agent/a"), (e) => e.code === "conflict");
    await c.remove(sandbox.id, "/home/agent/a", { recursive: true });
    await assert.rejects(c.stat(sandbox.id, "/home/agent/a"), (e) => e.code === "not_found");
  } finally {
    await c.destroySandbox(sandbox.id);
  }
});

test("a snapshot outlives its sandbox and seeds a new one; a fork copies a running sandbox", async () => {
  const c = client("ts-snap");
  const first = await c.createSandbox({ name: "original" });
  const made = [first.id];
  try {
    await c.writeFile(first.id, "/home/agent/state.txt", "v1\n");
    const snap = await c.snapshot(first.id);
    assert.match(snap.id, /^snap_/);
    assert.equal(snap.sandbox, first.id);
    assert.deepEqual((await c.listSnapshots()).map((s) => s.id), [snap.id]);

    await c.writeFile(first.id, "/home/agent/state.txt", "v2\n");
    const fork = await c.forkSandbox(first.id, { name: "fork" });
    made.push(fork.id);
    assert.equal(fork.source, first.id);
    assert.equal(fork.state, "running");
    assert.equal(await c.readText(fork.id, "/home/agent/state.txt"), "v2\n");
    // The fork diverges: its writes are its own.
    await c.writeFile(fork.id, "/home/agent/state.txt", "fork\n");
    assert.equal(await c.readText(first.id, "/home/agent/state.txt"), "v2\n");

    await c.destroySandbox(first.id);
    made.shift();
    const restored = await c.createSandbox({ name: "restored", snapshot: snap.id });
    made.push(restored.id);
    assert.equal(await c.readText(restored.id, "/home/agent/state.txt"), "v1\n");
    await c.deleteSnapshot(snap.id);
    assert.deepEqual(await c.listSnapshots(), []);
  } finally {
    for (const id of made) await c.destroySandbox(id).catch(() => {});
    for (const s of await c.listSnapshots()) await c.deleteSnapshot(s.id).catch(() => {});
  }
});

test("a command takes stdin, a signal, and a PTY of the size asked", async () => {
  const c = client("ts-stdin");
  const sandbox = await c.createSandbox({ name: "stdin" });
  try {
    const cat = await c.exec(sandbox.id, ["sh", "-c", "tr a-z A-Z"], { stdin: true });
    await cat.write("hello ");
    await cat.write(new TextEncoder().encode("world\n"));
    await cat.closeStdin();
    let out = "";
    for await (const chunk of cat.output) out += new TextDecoder().decode(chunk.data);
    assert.equal(out, "HELLO WORLD\n");
    assert.equal((await cat.outcome).exit_code, 0);

    const sleeper = await c.exec(sandbox.id, ["sleep", "60"]);
    await sleeper.signal("TERM");
    const outcome = await sleeper.outcome;
    assert.deepEqual([outcome.outcome, outcome.signal], ["signaled", 15]);

    const tty = await c.exec(sandbox.id, ["sh", "-c", "stty size; test -t 0 && echo tty"], { pty: { rows: 33, cols: 101 } });
    let screen = "";
    for await (const chunk of tty.output) screen += new TextDecoder().decode(chunk.data);
    assert.match(screen, /33 101\r?\n/);
    assert.match(screen, /tty/);
  } finally {
    await c.destroySandbox(sandbox.id);
  }
});
