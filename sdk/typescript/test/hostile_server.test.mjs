// A malformed or hostile daemon (or whatever answers at its address) must not crash the
// client's process nor stop its routing: the server here is a small one of the test's own (HTTP
// for the session's start, a WebSocket for the rest) that sends a burst of junk before each
// reply (text that is no JSON, JSON that is no object, ids of every type, replies for no request,
// short binary frames, fields whose toString is no function), then the real reply; a session's
// well-formed events come between junk events (seq as a string, todos not an array, files that
// are no objects, data null, ...). The client goes on: later requests are answered on the same
// socket (no reconnect), the good events arrive typed, a command's output and outcome arrive,
// and a listener of the user's that throws stops neither its neighbours nor the routing. No
// corrald: the server is the attacker (run_tests.py starts one anyway; it is not used).
import assert from "node:assert/strict";
import http from "node:http";
import { after, before, test } from "node:test";
import { WebSocketServer } from "ws";

import { CorralClient, CorralError } from "../dist/index.js";

const TRAP = '{"toString": 1, "valueOf": 1}';  // String() or Number() of it throws
const JUNK_TEXT = ["not json", "[1, 2]", "null", "42", '"str"', "true", "{".repeat(5000) + "}".repeat(5000),
  '{"id": [1], "ok": true}', '{"id": {"a": 1}, "ok": false, "error": "boom"}', '{"id": 1.5, "ok": true}',
  '{"id": "1", "ok": true}', '{"id": 999999, "ok": true}', '{"id": null, "ok": false, "error": null}',
  '{"event": 5}', '{"event": null}', '{"event": "exit"}', `{"event": "exit", "command": ${TRAP}, "seq": "NaN", "outcome": "x"}`,
  '{"event": "exit", "command": "cmd_none", "seq": 1, "outcome": null}', `{"event": "session", "session": ${TRAP}, "seq": 1}`,
  '{"event": "session_end", "session": "ses_none"}', '{"__proto__": {"event": "exit"}, "event": "session", "session": "ses_x"}'];
const frame = (fd, channel, seq, text) => {
  const data = Buffer.from(text);
  const bytes = Buffer.alloc(14 + data.length);
  bytes[0] = 1;
  bytes[1] = fd;
  bytes.writeUInt32BE(channel, 2);
  bytes.writeBigUInt64BE(BigInt(seq), 6);
  data.copy(bytes, 14);
  return bytes;
};
const JUNK_BINARY = [Buffer.alloc(0), Buffer.from([1]), Buffer.from([1, 1, 0, 0, 0, 7, 255, 255, 255]),
  Buffer.from([2, 1, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 9, 65]), frame(9, 7, 1, "bad fd"), frame(1, 12345, 1, "no channel")];

// Session events as raw JSON (1e400 and the traps cannot be made by JSON.stringify).
const JUNK_SESSION = ['"seq": "x", "kind": "state", "state": "ready"', '"seq": "1", "kind": "state", "state": "ready"',
  '"seq": [1], "kind": "agent"', '"seq": 1e400, "kind": "todo"', '"seq": null, "kind": "todo"', '"seq": -3, "kind": "todo"',
  '"seq": 1, "kind": "agent", "data": "a string"',
  '"seq": 2, "kind": "agent", "data": null',
  '"seq": 3, "kind": "agent", "data": {"type": "assistant", "message": {"content": ["text", 5, null]}}',
  '"seq": 4, "kind": "agent", "data": {"type": "assistant", "message": {"content": 5}}',
  '"seq": 5, "kind": "agent", "data": {"type": "assistant", "message": {"content": {"type": "text"}}}',
  '"seq": 6, "kind": "agent", "data": {"type": "user", "message": {"content": [null, {"type": "tool_result", "content": {"x": 1}}]}}',
  '"seq": 7, "kind": "agent", "data": {"type": "user", "message": "no"}',
  '"seq": 8, "kind": "todo", "todos": {"not": "a list"}',
  `"seq": 9, "kind": "todo", "todos": [null, 5, {"content": ${TRAP}, "status": ${TRAP}}]`,
  `"seq": 10, "kind": "file_change", "path": ${TRAP}, "size": "big"`,
  '"seq": 11, "kind": "file_change", "size": 1',
  `"seq": 12, "kind": "result", "turn": "one", "files": [1, "x", null, {"path": ${TRAP}}], "diff": "all"`,
  `"seq": 13, "kind": "result", "turn": ${TRAP}, "diff": {"files": ${TRAP}}, "text": ${TRAP}`,
  '"seq": 14, "kind": "usage", "input_tokens": {"x": 1}, "session_cost_usd": null',
  `"seq": 15, "kind": "tool_call", "call": ${TRAP}, "name": ["x"]`,
  '"seq": 16, "kind": "tool_call", "call": "call_junk", "name": "echo"',
  `"seq": 17, "kind": "permission_request", "call": "perm_junk", "tool_name": ${TRAP}`,
  `"seq": 18, "kind": "awaiting_input", "call": ${TRAP}, "name": ${TRAP}`,
  '"seq": 19, "kind": 5', '"seq": 20', '"seq": 21, "kind": "state", "state": {"x": 1}',
  '"seq": 22, "kind": "agent", "data": {"type": "result", "result": 5, "usage": "x", "total_cost_usd": {"x": 1}}'];
const GOOD_SESSION = [
  { seq: 30, kind: "todo", todos: [{ content: "Work", status: "in_progress", active_form: "Working" }] },
  { seq: 31, kind: "agent", data: { type: "assistant", message: { content: [{ type: "text", text: "hello" }] } } },
  { seq: 32, kind: "agent", data: { type: "result", result: "fine", is_error: false, num_turns: 1 } },
  { seq: 33, kind: "file_change", path: "/home/agent/a", change: "create", type: "file", size: 1 },
  { seq: 34, kind: "tool_call", call: "call_good", name: "echo", input: { x: 1 } },
  { seq: 35, kind: "permission_request", call: "perm_good", tool_name: "Bash", input: {} },
  { seq: 36, kind: "result", turn: 1, is_error: false, text: "fine",
    files: [{ path: "/home/agent/a", change: "create", type: "file", size: 1 }],
    diff: { files: 1, created: 1, modified: 0, deleted: 0, truncated: false, observed: true } },
];

let server;
let client;
let connections = 0;
const ops = [];  // every request the client sent: {op, ...fields}

function junk(ws) {
  for (const text of JUNK_TEXT) ws.send(text);
  for (const bytes of JUNK_BINARY) ws.send(bytes);
}

function answer(ws, request) {
  const reply = (result) => ws.send(JSON.stringify({ id: request.id, ok: true, result }));
  switch (request.op) {
    case "session.attach":
      reply({ session: { id: "ses_x", sandbox: "sb_x", state: "processing" }, first_seq: 1 });
      for (const fields of JUNK_SESSION) {
        ws.send(`{"event": "session", "session": "ses_x", ${fields}}`);
        ws.send("junk between events");
        ws.send(Buffer.from([1, 1]));
      }
      for (const event of GOOD_SESSION) {
        ws.send(JSON.stringify({ event: "session", session: "ses_x", ...event }));
        junk(ws);
      }
      return;
    case "exec":
      if (request.argv[0] === "null_result") return reply(null);
      if (request.argv[0] === "junk_exit") {
        reply({ command: "cmd_junk", channel: 8 });
        ws.send(`{"event": "exit", "command": "cmd_junk", "seq": "NaN", "outcome": "x"}`);
        return;
      }
      reply({ command: "cmd_good", channel: 7 });
      junk(ws);
      ws.send(frame(1, 7, 2, "out"));
      junk(ws);
      ws.send(frame(2, 7, 3, "err"));
      ws.send('{"event": "exit", "command": "cmd_none", "seq": 4, "outcome": {"outcome": "exited"}}');
      ws.send(JSON.stringify({ event: "exit", command: "cmd_good", seq: 4, outcome: { outcome: "exited", exit_code: 0 } }));
      return;
    case "bad_error":
      ws.send(`{"id": ${request.id}, "ok": false, "error": {"code": ${TRAP}, "message": ${TRAP}}}`);
      return;
    default:
      return reply({ echo: request.op });
  }
}

before(async () => {
  const web = http.createServer((req, res) => {
    if (req.method === "POST" && req.url === "/v1/sandboxes/sb_x/sessions") {
      res.writeHead(201, { "Content-Type": "application/json" });
      res.end(JSON.stringify({ id: "ses_x", sandbox: "sb_x", state: "initializing" }));
      return;
    }
    res.writeHead(404).end();
  });
  const wss = new WebSocketServer({ server: web, handleProtocols: (protocols) => (protocols.has("corral.v1") ? "corral.v1" : false) });
  wss.on("connection", (ws) => {
    connections++;
    ws.on("message", (data, binary) => {
      if (binary) return;
      const request = JSON.parse(String(data));
      ops.push(request);
      junk(ws);
      answer(ws, request);
    });
  });
  await new Promise((resolve) => web.listen(0, "127.0.0.1", resolve));
  server = { web, wss };
  client = new CorralClient({ url: `http://127.0.0.1:${web.address().port}`, token: "x.y.z" });
});

after(async () => {
  client?.close();
  for (const ws of server?.wss.clients ?? []) ws.terminate();
  server?.wss.close();
  await new Promise((resolve) => server ? server.web.close(resolve) : resolve());
});

const within = (promise, ms, what) => Promise.race([promise,
  new Promise((_, reject) => setTimeout(() => reject(new Error(`${what}: nothing after ${ms} ms`)), ms).unref())]);

async function until(check, what, ms = 5000) {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`${what}: not after ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

test("junk never stops the socket's routing: requests go on on the same socket", async () => {
  for (let n = 0; n < 3; n++) assert.deepEqual(await within(client.connection.op(`op${n}`, {}), 5000, `op${n}`), { echo: `op${n}` });
  await assert.rejects(client.connection.op("bad_error", {}), (error) => error instanceof CorralError && error.code === "internal");
  await assert.rejects(client.exec("sb_x", ["null_result"]), TypeError);
  assert.deepEqual(await within(client.connection.op("after", {}), 5000, "after"), { echo: "after" });
  assert.equal(connections, 1);
  assert.equal(client.connection.reconnects, 0);
});

test("a command's output and outcome arrive between junk frames and junk exits", async () => {
  const { stdout, stderr, outcome } = await within(client.run("sb_x", ["good"]), 5000, "run");
  assert.equal(stdout, "out");
  assert.equal(stderr, "err");
  assert.deepEqual(outcome, { outcome: "exited", exit_code: 0 });
  const junked = await client.exec("sb_x", ["junk_exit"]);
  assert.deepEqual(await within(junked.outcome, 5000, "junk exit"), { outcome: "unknown" });
  assert.equal(connections, 1);
});

test("a session's good events arrive typed between junk; a throwing listener stops nothing", async () => {
  const asked = [];
  const session = client.prepareSession("sb_x", {
    tools: [{ name: "echo", handler: (input) => JSON.stringify(input) }],
    // Returns nothing for the junk call (a bug of the user's): denied, not a crash.
    onPermission: (request) => { asked.push(request); return request.call === "perm_good" ? { allow: true } : undefined; },
  });
  const results = [];
  const todos = [];
  const texts = [];
  const kinds = [];
  session.on("event", () => { throw new Error("a listener's bug"); });
  session.on("todo", () => { throw new Error("another listener's bug"); });
  session.on("todo", (list) => todos.push(list));
  session.on("result", (result) => results.push(result));
  session.on("text", (text) => texts.push(text));
  session.on("event", (event) => kinds.push(event.kind));
  await within(session.start("go"), 5000, "start");
  await until(() => session.lastSeq >= 36, "the last good event");

  const good = results.at(-1);
  assert.equal(good.text, "fine");
  assert.equal(good.turn, 1);
  assert.equal(good.numTurns, 1);
  assert.deepEqual(good.files, [{ path: "/home/agent/a", change: "create", type: "file", size: 1 }]);
  assert.equal(good.diff.created, 1);
  assert.deepEqual(todos.at(-1), [{ content: "Work", status: "in_progress", activeForm: "Working" }]);
  assert.deepEqual(session.todos, todos.at(-1));
  assert.deepEqual([...session.changedFiles.keys()], ["/home/agent/a"]);
  assert.deepEqual(texts, ["hello"]);
  assert.deepEqual(kinds.slice(-GOOD_SESSION.length), GOOD_SESSION.map((e) => e.kind));
  // Junk with numbers was taken as far as it fits: what does not fit keeps its default.
  for (const result of results) {
    assert.equal(typeof result.text, "string");
    assert.ok(Number.isFinite(result.turn) && Number.isFinite(result.diff.files));
    assert.ok(result.files.every((f) => typeof f.path === "string" && f.path));
  }
  assert.ok(session.history.every((e) => Number.isSafeInteger(e.seq) && typeof e.kind === "string"));

  // The tool and the permission handler ran for the good calls and were answered.
  await until(() => ops.some((o) => o.op === "session.tool_result" && o.call === "call_good"), "the tool's answer");
  await until(() => ops.some((o) => o.op === "session.permission" && o.call === "perm_good"), "the permission's answer");
  assert.equal(ops.find((o) => o.op === "session.tool_result" && o.call === "call_good").text, '{"x":1}');
  assert.equal(ops.find((o) => o.op === "session.permission" && o.call === "perm_good").allow, true);
  await until(() => ops.some((o) => o.op === "session.permission" && o.call === "perm_junk"), "the junk permission's answer");
  assert.equal(ops.find((o) => o.op === "session.permission" && o.call === "perm_junk").allow, false);
  assert.ok(asked.every((r) => typeof r.toolName === "string"));

  assert.deepEqual(await within(client.connection.op("after", {}), 5000, "after"), { echo: "after" });
  assert.equal(connections, 1);
  assert.equal(client.connection.reconnects, 0);
});
