// Reconnection: the client reaches corrald through a TCP relay that the test cuts (every
// connection reset, as a network drop would). The WebSocket is opened again and each stream
// attaches again from the last sequence number it saw: a command's output arrives whole, in
// order, without duplicates; a session's events likewise. A relay that stays down makes the
// streams fail with CorralConnectionError once the client gives up. A socket dropped again while
// the streams attach again leaves them to the next reconnect.
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";

import { CorralClient, CorralConnectionError } from "../dist/index.js";
import { client, env, play, scenario, sleep, token, withTimeout } from "./helpers.mjs";

// A TCP relay to corrald that can cut every connection and refuse new ones.
class Relay {
  constructor(target) {
    this.target = new URL(target);
    this.sockets = new Set();
    this.accepting = true;
    this.connections = 0;
    this.cutAtFirstFrame = false;  // the next connection is reset when the client sends its first WebSocket frame
    this.cutAtFrame = 0;           // how many connections were reset so
    this.server = net.createServer((downstream) => {
      if (!this.accepting) return downstream.destroy();
      this.connections++;
      const upstream = net.connect(Number(this.target.port), this.target.hostname);
      for (const s of [downstream, upstream]) {
        this.sockets.add(s);
        s.on("close", () => this.sockets.delete(s));
        s.on("error", () => {});
      }
      const cutting = this.cutAtFirstFrame;
      this.cutAtFirstFrame = false;
      let reads = 0;
      // The client's first read is its HTTP upgrade request; the next comes after the 101: its
      // first frame (after a reconnect, a stream attaching again).
      downstream.on("data", (data) => {
        if (cutting && ++reads === 2) {
          this.cutAtFrame++;
          for (const s of [downstream, upstream]) s.resetAndDestroy ? s.resetAndDestroy() : s.destroy();
          return;
        }
        upstream.write(data);
      });
      upstream.pipe(downstream);
      downstream.on("close", () => upstream.destroy());
      upstream.on("close", () => downstream.destroy());
    });
  }
  listen() {
    return new Promise((resolve) => this.server.listen(0, "127.0.0.1", () => resolve(`http://127.0.0.1:${this.server.address().port}`)));
  }
  cut() {
    for (const s of this.sockets) s.resetAndDestroy ? s.resetAndDestroy() : s.destroy();
  }
  close() {
    this.cut();
    return new Promise((resolve) => this.server.close(resolve));
  }
}

const relay = new Relay(env.url);
let relayUrl;
const direct = client("ts-reconnect", { budget: { aiUsd: 5, window: "day" } });
let sandbox;
const made = [];
before(async () => {
  relayUrl = await relay.listen();
  sandbox = await direct.createSandbox({ name: "reconnect" });
});
after(async () => {
  made.forEach((c) => c.close());
  if (sandbox) await direct.destroySandbox(sandbox.id);
  await relay.close();
});

function relayed(options = {}) {
  const c = new CorralClient({ url: relayUrl, token: () => token("ts-reconnect", { budget: { aiUsd: 5, window: "day" } }), ...options });
  made.push(c);
  return c;
}

test("a command's output survives dropped connections: all of it, in order, once", async () => {
  const c = relayed({ reconnect: { initialDelayMs: 50 } });
  // 60 numbered lines over ~3 s, across three cuts.
  const command = await c.exec(sandbox.id, ["sh", "-c", "i=1; while [ $i -le 60 ]; do echo line$i; i=$((i+1)); sleep 0.05; done"]);
  const chunks = [];
  const reading = (async () => { for await (const chunk of command.output) chunks.push(chunk); })();
  for (let cut = 0; cut < 3; cut++) {
    await sleep(600);
    relay.cut();
  }
  await withTimeout(reading, 30000, "the output");
  const outcome = await command.outcome;
  assert.equal(outcome.exit_code, 0);
  assert.ok(c.connection.reconnects >= 3, `reconnected ${c.connection.reconnects} times`);
  const text = chunks.map((ch) => new TextDecoder().decode(ch.data)).join("");
  assert.deepEqual(text.trim().split("\n"), Array.from({ length: 60 }, (_, i) => `line${i + 1}`));
  const seqs = chunks.map((ch) => ch.seq);
  assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b));
  assert.equal(new Set(seqs).size, seqs.length);
  assert.deepEqual(command.gaps, []);
});

test("a connection dropped again while the streams attach again: the next reconnect attaches them", async () => {
  const c = relayed({ reconnect: { initialDelayMs: 50 } });
  const command = await c.exec(sandbox.id, ["sh", "-c", "i=1; while [ $i -le 40 ]; do echo line$i; i=$((i+1)); sleep 0.05; done"]);
  const chunks = [];
  const reading = (async () => { for await (const chunk of command.output) chunks.push(chunk); })();
  await sleep(500);
  relay.cutAtFirstFrame = true;   // the reconnected socket is reset as the command attaches again
  relay.cut();
  await withTimeout(reading, 30000, "the output");
  assert.equal(relay.cutAtFrame, 1, "the re-attach was cut");
  assert.ok(c.connection.reconnects >= 2, `reconnected ${c.connection.reconnects} times`);
  assert.equal((await command.outcome).exit_code, 0);
  const text = chunks.map((ch) => new TextDecoder().decode(ch.data)).join("");
  assert.deepEqual(text.trim().split("\n"), Array.from({ length: 40 }, (_, i) => `line${i + 1}`));
});

test("a session's events survive a dropped connection, numbered without a hole", async () => {
  await play(scenario("reconnect_session"));
  const c = relayed({ reconnect: { initialDelayMs: 50 } });
  const session = await c.createSession(sandbox.id, { prompt: "do it slowly" });
  await sleep(1500);
  relay.cut();
  const result = await withTimeout(session.result(), 120000, "the result after a cut");
  assert.equal(result.text, "all done");
  assert.ok(c.connection.reconnects >= 1);
  assert.deepEqual(session.history.map((e) => e.seq), session.history.map((_, i) => i + 1));
  await session.abort();
  await session.ended;
});

test("when corrald stays unreachable the streams fail with CorralConnectionError; a control without cuts succeeds", async () => {
  const c = relayed({ reconnect: { initialDelayMs: 50, maxDelayMs: 100, giveUpAfterMs: 700 } });
  const command = await c.exec(sandbox.id, ["sleep", "30"]);
  relay.accepting = false;
  relay.cut();
  await assert.rejects(withTimeout(command.outcome, 10000, "giving up"), (e) => e instanceof CorralConnectionError && /gave up/.test(e.message));
  relay.accepting = true;
  // Control: a fresh client through the same relay works again.
  const ok = relayed();
  assert.equal((await ok.run(sandbox.id, ["echo", "back"])).stdout, "back\n");
  await direct.run(sandbox.id, ["pkill", "-x", "sleep"]).catch(() => {});
});
