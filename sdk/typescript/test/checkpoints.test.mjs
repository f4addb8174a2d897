// Checkpoints through the SDK: the real Claude Code CLI against the scripted model. A checkpoint
// after turn 1, turn 2 changing the file, then restoreCheckpoint: the file as of turn 1 and a
// history that ends there (the next model request has turn 1's prompt, not turn 2's); listed,
// fetched, deleted; another user's is not found. (The cases: tests/e2e/test_checkpoints.py.)
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { client, mainRequests, play, scenario, userTexts, withTimeout } from "./helpers.mjs";

const c = client("ts-checkpoints", { budget: { aiUsd: 5, window: "day" } });
let sandbox;
before(async () => { sandbox = await c.createSandbox({ name: "checkpoints" }); });
after(async () => { if (sandbox) await c.destroySandbox(sandbox.id); });

test("a restored checkpoint brings back the turn's file and its history", async () => {
  await play(scenario("checkpoint_turns"));
  const session = await c.createSession(sandbox.id, { prompt: "first: write note.txt" });
  await withTimeout(session.result(), 120000, "turn 1");
  const checkpoint = await c.checkpointSession(session.id);
  assert.match(checkpoint.id, /^chk_/);
  assert.equal(checkpoint.turns, 1);
  assert.equal(checkpoint.session, session.id);
  await withTimeout(session.turn("second: change it"), 120000, "turn 2");
  assert.equal(await c.readText(sandbox.id, "/home/agent/note.txt"), "two\n");
  await session.close();
  await withTimeout(session.ended, 60000, "the session's end");

  assert.deepEqual((await c.listCheckpoints(session.id)).map((k) => k.id), [checkpoint.id]);
  assert.equal((await c.getCheckpoint(checkpoint.id)).snapshot, checkpoint.snapshot);
  const stranger = client("ts-checkpoints-stranger");
  await assert.rejects(stranger.getCheckpoint(checkpoint.id), (e) => e.code === "not_found" && e.status === 404);

  await play(scenario("checkpoint_restored"));
  const restored = await c.restoreCheckpoint(checkpoint.id, { prompt: "third: where are we?" });
  await withTimeout(restored.result(), 120000, "the restored session's turn");
  assert.notEqual(restored.id, session.id);
  assert.equal((await c.getSession(restored.id)).parent, session.id);
  assert.equal(await c.readText(sandbox.id, "/home/agent/note.txt"), "one\n");
  const texts = userTexts((await mainRequests())[0]);
  assert.ok(texts.some((t) => t.includes("first: write note.txt")), texts);
  assert.ok(!texts.some((t) => t.includes("second: change it")), texts);
  await restored.close();
  await withTimeout(restored.ended, 60000, "the restored session's end");

  await c.deleteCheckpoint(checkpoint.id);
  await assert.rejects(c.getCheckpoint(checkpoint.id), (e) => e.code === "not_found");
});
