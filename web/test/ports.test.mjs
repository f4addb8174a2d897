// The page's list of ports, in Debian's Chromium: a port a process in the sandbox listens on is
// shown from the page's form, listed with a link (a signed URL: the tab it opens needs no token)
// that serves the app, one shown by another client appears without a reload, and closing it from
// the page takes it off the list and off the daemon. Screenshot to $CORRAL_ARTIFACTS.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { chromium } from "playwright-core";

import { client, env, token as mint } from "../../sdk/typescript/test/helpers.mjs";

const artifacts = process.env.CORRAL_ARTIFACTS;
if (!artifacts) throw new Error("run through web/run_tests.py");

const token = mint("web-ports-user");
const sdk = client("web-ports-user");
let browser;
let sandbox;

before(async () => {
  browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
  sandbox = await sdk.createSandbox({ name: "ports" });
  for (const port of [8000, 8001]) {
    // Each serves a page naming its port (until the sandbox goes).
    await sdk.exec(sandbox.id, ["sh", "-c", `cd "$(mktemp -d)" && echo '<h1>app on ${port}</h1>' > index.html && ` +
                                `exec python3 -m http.server ${port} --bind 127.0.0.1`]);
  }
});
after(async () => {
  await browser?.close();
  if (sandbox) await sdk.destroySandbox(sandbox.id);
});

test("the page shows a port, links it with a signed URL that serves the app, follows others' and closes it", async () => {
  const context = await browser.newContext({ viewport: { width: 1200, height: 800 } });
  const page = await context.newPage();
  const problems = [];
  page.on("pageerror", (error) => problems.push(error.message));
  await page.goto(`${env.url}/#token=${token}`);
  await page.locator("button.sandbox", { hasText: "ports" }).click();
  await page.locator("#ports-none").waitFor();

  await page.locator("#port-number").fill("8000");
  await page.locator("#port-form button").click();
  const link = page.locator('#ports-list li[data-port="8000"] a');
  await link.waitFor().catch(async (error) => {
    throw new Error(`${error.message}\nthe page's ports error: ${await page.locator("#ports-error").innerText()}`);
  });
  const href = await link.getAttribute("href");
  assert.match(href, new RegExp(`/v1/sandboxes/${sandbox.id}/ports/8000/\\?corral_sig=[A-Za-z0-9_-]{43}&corral_exp=\\d+$`));
  assert.ok(await page.locator("#ports-none").isHidden());

  // The link in a tab of its own, without the page's token: the app, served as an opaque origin.
  const tab = await context.newPage();
  let response;
  const deadline = Date.now() + 30000;
  do {
    response = await tab.goto(href);
    if (response.status() !== 502) break;
    await tab.waitForTimeout(200);  // the app still starting
  } while (Date.now() < deadline);
  assert.equal(response.status(), 200);
  assert.equal(await tab.locator("h1").innerText(), "app on 8000");
  assert.match(response.headers()["content-security-policy"], /^sandbox /);
  // Opaque origin: the page's token in corral's origin's storage is out of its reach.
  assert.equal(await tab.evaluate(() => { try { return String(sessionStorage.length); } catch (e) { return e.name; } }),
               "SecurityError");
  await tab.close();

  // Another client shows a port: the list follows without a reload.
  await sdk.openPort(sandbox.id, 8001);
  await page.locator('#ports-list li[data-port="8001"] a').waitFor();  // within a poll or two (5 s each)
  await page.screenshot({ path: join(artifacts, "ports.png") });

  // Closed from the page: off the list and off the daemon.
  await page.locator('#ports-list li[data-port="8000"] button').click();
  await page.locator('#ports-list li[data-port="8000"]').waitFor({ state: "detached" });
  assert.deepEqual((await sdk.listPorts(sandbox.id)).map((p) => p.port), [8001]);
  // A port corral keeps for itself: the daemon's error on the page.
  await page.locator("#port-number").fill("7880");
  await page.locator("#port-form button").click();
  await page.locator("#ports-error", { hasText: "bad_request" }).waitFor();
  assert.deepEqual(problems, []);
  await context.close();
});
