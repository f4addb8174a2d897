// Agent sessions through the SDK: the real Claude Code CLI in a real sandbox, its model calls
// answered by the scripted Messages API server behind corrald's relay. Events arrive as an
// async iterator and as callbacks; a turn's result carries its cost, and the session's ledger
// cost matches the scripted usage to the micro-dollar; resume continues the history, fork
// diverges from it; a tool registered by the client is called by the agent and its answer
// reaches the model.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { CorralError, SessionEndedError } from "../dist/index.js";
import { client, env, mainRequests, microUsd, play, scenario, toolResults, usd, userTexts, withTimeout } from "./helpers.mjs";

const c = client("ts-agent", { budget: { aiUsd: 5, window: "day" } });
let sandbox;
before(async () => { sandbox = await c.createSandbox({ name: "agent" }); });
after(async () => { if (sandbox) await c.destroySandbox(sandbox.id); });

test("a session streams the agent's work, its turn's result has the cost, and the ledger matches the usage", async () => {
  const turns = scenario("file_turn");
  await play(turns);
  const texts = [];
  const toolUses = [];
  const toolOutputs = [];
  const session = c.prepareSession(sandbox.id);
  session.on("text", (text) => texts.push(text));
  session.on("tool_use", (use) => toolUses.push(use));
  session.on("tool_output", (output) => toolOutputs.push(output));
  await session.start("create hello.txt containing hi");
  assert.match(session.id, /^ses_/);

  const result = await withTimeout(session.result(), 120000, "the first turn's result");
  assert.equal(result.isError, false);
  assert.equal(result.text, "Created hello.txt.");
  assert.ok(result.costUsd > 0, "the CLI's own estimate of the cost");
  assert.deepEqual(texts, ["I'll create the file.", "Created hello.txt."]);
  assert.deepEqual(toolUses.map((u) => [u.name, u.input.command]), [["Bash", "echo hi > hello.txt"]]);
  assert.equal(toolOutputs.length, 1);
  assert.equal(toolOutputs[0].id, toolUses[0].id);
  assert.equal(await c.readText(sandbox.id, "/home/agent/hello.txt"), "hi\n");

  // The relay's ledger: each scripted call's usage, priced, to the micro-dollar.
  const expected = usd(turns.reduce((sum, t) => sum + microUsd(t.usage), 0));
  assert.equal(session.costUsd, expected);
  assert.equal((await c.getSession(session.id)).cost_usd, expected);
  const usage = await c.usage();
  assert.equal(usage.sessions.find((s) => s.session === session.id).cost_usd, expected);

  // A second turn on the same session.
  await play(scenario("second_turn"));
  const second = await withTimeout(session.turn("are you there?"), 120000, "the second turn");
  assert.equal(second.text, "Still here.");
  assert.ok(userTexts((await mainRequests())[0]).some((t) => t.includes("create hello.txt containing hi")));

  await session.close();
  const end = await withTimeout(session.ended, 60000, "the session's end");
  assert.equal(end.outcome.outcome, "completed");
  assert.equal(session.state, "completed");

  // The iterator replays what this object received, in order, ending with the end.
  const events = [];
  for await (const event of session) events.push(event);
  assert.equal(events.at(-1).kind, "end");
  assert.deepEqual(events.map((e) => e.seq), events.map((_, i) => i + 1));
  const agentTypes = events.filter((e) => e.kind === "agent").map((e) => e.data.type);
  assert.equal(agentTypes[0], "system");
  assert.equal(agentTypes.filter((t) => t === "result").length, 2);
  // The upstream only ever saw the operator's key.
  for (const request of await mainRequests()) assert.equal(request.headers["x-api-key"], env.realKey);
  // A finished session's result() is the last turn's; one that is awaited after the end fails.
  await assert.rejects(session.turn("more?"), (e) => e instanceof CorralError && e.code === "conflict");
});

test("resume continues the history; a fork diverges from it; followSession replays from the start", async () => {
  await play(scenario("remember"));
  const first = await c.createSession(sandbox.id, { prompt: "remember PELICAN" });
  assert.equal((await withTimeout(first.result(), 120000, "first")).text, "noted: the word is PELICAN");
  await first.close();
  await first.ended;

  await play(scenario("recall"));
  const resumed = await c.resumeSession(first.id, { prompt: "what was it?" });
  assert.equal(resumed.id, first.id);
  assert.equal((await withTimeout(resumed.result(), 120000, "resumed")).text, "it was PELICAN");
  let texts = userTexts((await mainRequests())[0]);
  assert.ok(texts.some((t) => t.includes("remember PELICAN")), texts);
  assert.ok(texts.some((t) => t.includes("what was it?")), texts);

  // Another client follows the same running session from its first event.
  const watcher = client("ts-agent", { budget: { aiUsd: 5, window: "day" } });
  const followed = await watcher.followSession(first.id);
  await resumed.close();
  const end = await withTimeout(followed.ended, 60000, "the followed session's end");
  assert.equal(end.outcome.outcome, "completed");
  assert.deepEqual(followed.history.map((e) => e.seq), followed.history.map((_, i) => i + 1));
  assert.ok(followed.history.some((e) => e.kind === "agent" && e.data.type === "result"));
  await resumed.ended;

  await play(scenario("fork"));
  const fork = await c.forkSession(first.id, { prompt: "only in the fork" });
  assert.notEqual(fork.id, first.id);
  await withTimeout(fork.result(), 120000, "fork");
  assert.equal((await c.getSession(fork.id)).parent, first.id);
  assert.ok(userTexts((await mainRequests())[0]).some((t) => t.includes("remember PELICAN")));
  await fork.close();
  await fork.ended;

  await play(scenario("again"));
  const again = await c.resumeSession(first.id, { prompt: "and now?" });
  await withTimeout(again.result(), 120000, "again");
  texts = userTexts((await mainRequests())[0]);
  assert.ok(texts.some((t) => t.includes("what was it?")), texts);
  assert.ok(!texts.some((t) => t.includes("only in the fork")), texts);
  await again.abort();
  const aborted = await withTimeout(again.ended, 60000, "abort");
  assert.equal(aborted.outcome.outcome, "aborted");
  assert.ok((await c.listSessions(sandbox.id)).some((s) => s.id === fork.id));
});

test("a tool registered by the client is called by the agent and its answer reaches the model", async () => {
  await play(scenario("client_tools"));
  const calls = [];
  const session = c.prepareSession(sandbox.id);
  session.registerTool({
    name: "page_state",
    description: "Reads a key of the page's state",
    inputSchema: { type: "object", properties: { key: { type: "string" } }, required: ["key"] },
    handler: async (input, context) => {
      calls.push([input, context.call]);
      return { color: "teal" }[input.key] ?? "unknown";
    },
  });
  session.registerTool({ name: "broken", handler: () => { throw new Error("no such state"); } });
  assert.throws(() => session.registerTool({ name: "bad name!", handler: () => "" }), /A-Z a-z 0-9/);
  assert.throws(() => session.registerTool({ name: "page_state", handler: () => "" }), /registered already/);
  await session.start("what color is it?");
  assert.throws(() => session.registerTool({ name: "late", handler: () => "" }), /has started/);

  const result = await withTimeout(session.result(), 120000, "the tool turn");
  assert.equal(result.text, "The color is teal.",
               JSON.stringify((await mainRequests()).map((r) => [r.turn, r.body.messages.at(-1)])));
  assert.equal(calls.length, 1);
  assert.deepEqual(calls[0][0], { key: "color" });
  const requests = await mainRequests();
  const offered = Object.fromEntries(requests[0].body.tools.map((t) => [t.name, t]));
  assert.deepEqual(offered.mcp__corral__page_state.input_schema.required, ["key"]);
  assert.deepEqual(toolResults(requests[1]), [{ isError: false, text: "teal" }]);
  const failed = toolResults(requests[2]);
  assert.equal(failed.length, 1);
  assert.equal(failed[0].isError, true);
  assert.match(failed[0].text, /broken failed: no such state/);
  const kinds = session.history.map((e) => e.kind);
  assert.equal(kinds.filter((k) => k === "tool_call").length, 2);
  assert.equal(kinds.filter((k) => k === "tool_result").length, 2);
  await session.abort();
  await session.ended;
});

test("an interrupted turn ends with an error result; a session whose end comes first rejects result()", async () => {
  await play(scenario("slow"));
  const session = await c.createSession(sandbox.id, { prompt: "take your time" });
  // The model's answer takes 30 s; interrupt it once the call is under way.
  for (let i = 0; i < 600 && (await mainRequests()).length === 0; i++) await new Promise((r) => setTimeout(r, 100));
  await session.interrupt();
  const result = await withTimeout(session.result(), 60000, "the interrupted turn");
  assert.equal(result.isError, true);
  await play([{ text: "never answered", delay: 30 }]);
  const pending = session.turn("one more");
  await session.abort();
  await assert.rejects(withTimeout(pending, 60000, "abort"), (e) => e instanceof SessionEndedError && e.outcome.outcome === "aborted");
});
