// Tokens on an open connection (docs/PROTOCOL.md, op `auth`): corrald closes a WebSocket when its
// token expires (close 1008). A client with a token function renews the token on the open socket
// before it expires, so a command that outlives several tokens streams to its end on one
// connection; the control, a client with a fixed token, loses its connection at the expiry.
// (The harness's corrald allows 1 s of clock skew.)
import assert from "node:assert/strict";
import { test } from "node:test";

import { CorralClient, CorralConnectionError } from "../dist/index.js";
import { client, env, token, withTimeout } from "./helpers.mjs";

test("getToken renews the open WebSocket's token before it expires", async () => {
  const owner = client("ts-renew");
  const sandbox = await owner.createSandbox({ name: "renewal" });
  let asked = 0;
  const renewing = new CorralClient({
    url: env.url,
    getToken: () => { asked++; return token("ts-renew", { ttl: 3 }); },
    renewBeforeMs: 1500,
  });
  try {
    const result = await withTimeout(renewing.run(sandbox.id, ["sh", "-c", "sleep 7; echo done"]), 20000);
    assert.equal(result.stdout, "done\n");
    assert.equal(result.outcome.outcome, "exited");
    assert.ok(renewing.connection.renewals >= 3, `renewed ${renewing.connection.renewals} times`);
    assert.equal(renewing.connection.reconnects, 0, "one connection all along");
    assert.ok(asked >= 4, `asked for ${asked} tokens`);
  } finally {
    renewing.close();
    await owner.destroySandbox(sandbox.id);
  }
});

test("a fixed token's connection ends at its expiry (the control)", async () => {
  const owner = client("ts-fixed");
  const sandbox = await owner.createSandbox({ name: "fixed" });
  const fixed = new CorralClient({ url: env.url, token: token("ts-fixed", { ttl: 2 }),
                                   reconnect: { giveUpAfterMs: 1500 } });
  try {
    await assert.rejects(withTimeout(fixed.run(sandbox.id, ["sh", "-c", "sleep 6; echo done"]), 20000),
                         CorralConnectionError);
    assert.equal(fixed.connection.renewals, 0);
  } finally {
    fixed.close();
    await owner.destroySandbox(sandbox.id);
  }
});
