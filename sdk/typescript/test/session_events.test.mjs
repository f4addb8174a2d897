// The SDK's typed derived events (docs/PROTOCOL.md "Agent sessions"): the agent's todo list,
// the files a turn changed (seen in the workspace, so the Bash tool's count), a permission
// prompt awaiting input, and a turn's result that carries the files and their diff summary.
// The real Claude Code CLI in a real sandbox, the scripted Messages API behind corrald's relay,
// playing scenarios shared with the Python SDK's test (tests/e2e/sdk_scenarios.json).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { client, play, scenario, withTimeout } from "./helpers.mjs";

const c = client("ts-events", { budget: { aiUsd: 5, window: "day" } });
let sandbox;
before(async () => { sandbox = await c.createSandbox({ name: "events" }); });
after(async () => { if (sandbox) await c.destroySandbox(sandbox.id); });

test("todo, file_change and the turn's result with its files arrive typed, in order", async () => {
  await play(scenario("events_notes"));  // shared with the Python SDK's test
  const todos = [];
  const changes = [];
  const order = [];
  const session = c.prepareSession(sandbox.id);
  session.on("todo", (list) => { todos.push(list); order.push("todo"); });
  session.on("file_change", (change) => { changes.push(change); order.push("file_change"); });
  session.on("result", () => order.push("result"));
  await session.start("make notes");
  const result = await withTimeout(session.result(), 120000, "the turn's result");

  assert.deepEqual(todos, [[{ content: "Make notes", status: "in_progress", activeForm: "Make notes..." }],
                           [{ content: "Make notes", status: "completed", activeForm: "Make notes..." }]]);
  assert.deepEqual(session.todos, todos[1]);
  const made = ["/home/agent/b.txt", "/home/agent/notes", "/home/agent/notes/a.md"];
  assert.deepEqual(changes.map((f) => f.path).sort(), made);
  assert.ok(changes.every((f) => f.change === "create"));
  assert.equal(changes.find((f) => f.path === "/home/agent/notes").type, "dir");
  assert.equal(changes.find((f) => f.path === "/home/agent/b.txt").size, 2);
  assert.deepEqual([...session.changedFiles.keys()].sort(), made);

  assert.equal(result.text, "Notes made.");
  assert.equal(result.isError, false);
  assert.equal(result.turn, 1);
  assert.deepEqual(result.files.map((f) => [f.path, f.change]).sort(), made.map((p) => [p, "create"]));
  assert.deepEqual(result.diff, { files: 3, created: 3, modified: 0, deleted: 0, truncated: false, observed: true });
  assert.ok(result.costUsd > 0, "the agent's own figures come along");
  // The turn's result comes after its last file change, and once.
  assert.equal(order.filter((o) => o === "result").length, 1);
  assert.equal(order.at(-1), "result");

  // The next turn's result holds only its own changes.
  await play(scenario("events_remove"));
  const second = await withTimeout(session.turn("remove b.txt"), 120000, "the second turn");
  assert.equal(second.turn, 2);
  assert.deepEqual(second.files.map((f) => [f.path, f.change]), [["/home/agent/b.txt", "delete"]]);
  assert.equal(session.changedFiles.get("/home/agent/b.txt").change, "delete");
  await session.abort();
});

test("a permission prompt is awaiting input until the handler answers", async () => {
  await play(scenario("events_permission"));
  const waiting = [];
  const session = c.prepareSession(sandbox.id, { permissionMode: "default", onPermission: () => ({ allow: true }) });
  session.on("awaiting_input", (input) => waiting.push(input));
  await session.start("ask first");
  const result = await withTimeout(session.result(), 120000, "the turn's result");
  assert.equal(waiting.length, 1);
  assert.equal(waiting[0].reason, "permission");
  assert.equal(waiting[0].name, "Bash");
  const request = session.history.find((e) => e.kind === "permission_request");
  assert.equal(waiting[0].call, request.call);
  assert.deepEqual(result.files.map((f) => f.path), ["/home/agent/asked.txt"]);
  await session.abort();
});
