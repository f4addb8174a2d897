// Secrets through the SDK against a real corrald (run_tests.py gives it [secrets] key_file and
// the egress proxy): kept and listed without their values, named by a sandbox whose commands see
// only a placeholder, replaced on a sandbox, deleted; bad input and a token without the scope are
// CorralErrors with their codes. (What the proxy does with them: tests/e2e/test_secrets.py.)
import assert from "node:assert/strict";
import { test } from "node:test";

import { client } from "./helpers.mjs";

const VALUE = "ghp_" + "s3cr3t".repeat(6);
const BINDINGS = [{ hosts: ["github.test"], basic_user: "x-access-token" }];

test("a secret is kept, listed without its value, and a sandbox sees only its placeholder", async () => {
  const c = client("ts-secrets");
  const stored = await c.putSecret("GITHUB_TOKEN", VALUE, BINDINGS);
  assert.equal(stored.name, "GITHUB_TOKEN");
  assert.equal(stored.owner, "user");
  assert.deepEqual(stored.bindings[0].hosts, ["github.test"]);
  assert.equal(stored.bindings[0].basic_user, "x-access-token");
  const listed = await c.listSecrets();
  assert.deepEqual(listed.secrets.map((s) => s.name), ["GITHUB_TOKEN"]);
  assert.ok(!JSON.stringify(listed).includes(VALUE));

  const sandbox = await c.createSandbox({ secrets: ["GITHUB_TOKEN"] });
  try {
    assert.deepEqual(sandbox.secrets, ["GITHUB_TOKEN"]);
    const { stdout } = await c.run(sandbox.id, ["sh", "-c", 'echo "$GITHUB_TOKEN"']);
    assert.match(stdout.trim(), /^corral-placeholder-[0-9a-f]{32}$/);
    assert.ok(!stdout.includes(VALUE));
    // The same placeholder for the next command (and across restarts).
    assert.equal((await c.run(sandbox.id, ["sh", "-c", 'echo "$GITHUB_TOKEN"'])).stdout, stdout);

    await c.putSecret("NPM_TOKEN", "npm_" + "x".repeat(20), [{ hosts: ["registry.test"], path_prefixes: ["/private/"] }]);
    const set = await c.setSandboxSecrets(sandbox.id, ["NPM_TOKEN", "GITHUB_TOKEN"]);
    assert.deepEqual(set.secrets, ["GITHUB_TOKEN", "NPM_TOKEN"]);
    assert.equal(set.ca_trusted, true);  // it started naming secrets: its trust store has corral's CA
    assert.deepEqual(await c.getSandboxSecrets(sandbox.id), ["GITHUB_TOKEN", "NPM_TOKEN"]);
    const { stdout: both } = await c.run(sandbox.id, ["sh", "-c", 'echo "$NPM_TOKEN"; echo "$SSL_CERT_FILE"']);
    const [npm, bundle] = both.trim().split("\n");
    assert.match(npm, /^corral-placeholder-/);
    assert.equal(bundle, "/run/corral/tls/ca-certificates.crt");
    const { stdout: pem } = await c.run(sandbox.id, ["sh", "-c", "grep -c 'BEGIN CERTIFICATE' /run/corral/tls/ca-certificates.crt"]);
    assert.ok(Number(pem.trim()) >= 1);
  } finally {
    await c.destroySandbox(sandbox.id);
    await c.deleteSecret("NPM_TOKEN");
  }
  await c.deleteSecret("GITHUB_TOKEN");
  assert.deepEqual((await c.listSecrets()).secrets, []);
  await assert.rejects(c.deleteSecret("GITHUB_TOKEN"), (e) => e.code === "not_found" && e.status === 404);
});

test("bad names, values and bindings, unknown secrets and a token without the scope are refused", async () => {
  const c = client("ts-secrets-bad");
  await assert.rejects(c.putSecret("bad-name", VALUE, BINDINGS), (e) => e.code === "bad_request");
  await assert.rejects(c.putSecret("PATH", VALUE, BINDINGS), (e) => e.code === "bad_request");
  await assert.rejects(c.putSecret("OK", "a\r\nX-Evil: 1", BINDINGS), (e) => e.code === "bad_request");
  await assert.rejects(c.putSecret("OK", VALUE, []), (e) => e.code === "bad_request");
  await assert.rejects(c.putSecret("OK", VALUE, [{ hosts: ["a.test"], header: "Host" }]), (e) => e.code === "bad_request");
  await assert.rejects(c.createSandbox({ start: false, secrets: ["UNKNOWN"] }), (e) => e.code === "not_found");
  const narrow = client("ts-secrets-bad", { scopes: ["sandboxes", "exec"] });
  await assert.rejects(narrow.putSecret("OK", VALUE, BINDINGS), (e) => e.code === "forbidden" && e.status === 403);
  // Positive control: the same with the default scopes.
  await c.putSecret("OK", VALUE, BINDINGS);
  await c.deleteSecret("OK");
});
