// The page corrald serves at /, in Debian's Chromium driven by Playwright (playwright-core;
// no browser download): sign in with a token, use the terminal (type a command, read its output
// from the screen, resize, reload and find the scrollback the daemon still holds), run a scripted
// agent session and watch its tool calls, todo list and file changes live, result and cost, and let the agent call a
// tool the page registered, whose answer reaches the model. Screenshots of each go to
// $CORRAL_ARTIFACTS.
import assert from "node:assert/strict";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { chromium } from "playwright-core";

import { client, env, mainRequests, microUsd, play, token as mint, usd } from "../../sdk/typescript/test/helpers.mjs";

const { url } = env;
const artifacts = process.env.CORRAL_ARTIFACTS;
if (!artifacts) throw new Error("run through web/run_tests.py");

const token = mint("web-user", { budget: { aiUsd: 5, window: "day" } });
const sdk = client("web-user", { budget: { aiUsd: 5, window: "day" } });
let browser;
let sandbox;

before(async () => {
  browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox"] });
  sandbox = await sdk.createSandbox({ name: "web" });
});
after(async () => {
  await browser?.close();
  if (sandbox) await sdk.destroySandbox(sandbox.id);
});

async function openPage(size = { width: 1200, height: 800 }) {
  const context = await browser.newContext({ viewport: size });
  const page = await context.newPage();
  const problems = [];
  page.on("pageerror", (error) => problems.push(error.message));
  page.on("console", (message) => { if (message.type() === "error") problems.push(message.text()); });
  await page.goto(`${url}/#token=${token}`);
  await page.locator("button.sandbox", { hasText: "web" }).click();
  return { page, context, problems };
}

// The terminal's screen as text (xterm.js's DOM renderer writes spaces as no-break spaces).
async function screen(page) {
  return (await page.locator("#terminal .xterm-rows").innerText()).replace(/\u00a0/g, " ");
}

async function typeInTerminal(page, text) {
  await page.locator("#terminal .xterm-helper-textarea").focus();
  await page.keyboard.type(text);
  await page.keyboard.press("Enter");
}

async function waitForScreen(page, pattern, what) {
  const deadline = Date.now() + 20000;
  let text = "";
  while (Date.now() < deadline) {
    text = await screen(page);
    if (pattern.test(text)) return text;
    await page.waitForTimeout(100);
  }
  assert.fail(`${what}: not on the screen after 20 s:\n${text}`);
}

test("a wrong token is refused at sign-in with the daemon's error; the page itself needs none", async () => {
  const context = await browser.newContext();
  const page = await context.newPage();
  const response = await page.goto(`${url}/`);
  assert.equal(response.status(), 200);
  assert.match(response.headers()["content-security-policy"], /script-src 'self'/);
  await page.locator("#token").fill("not-a-token");
  await page.locator("#sign-in-form button").click();
  await page.locator("#sign-in-error", { hasText: "unauthorized" }).waitFor();
  // Positive control: the real token signs in and lists the user's sandbox.
  await page.locator("#token").fill(token);
  await page.locator("#sign-in-form button").click();
  await page.locator("button.sandbox", { hasText: "web" }).waitFor();
  assert.match(await page.locator("#who").innerText(), /web-user \(web-tests\)/);
  await context.close();
});

test("the terminal runs what is typed, follows the window's size, and keeps its scrollback across a reload", async () => {
  const { page, context, problems } = await openPage();
  await waitForScreen(page, /\$\s*$/m, "the shell's prompt");
  await typeInTerminal(page, "echo corral-$((6*7)); id -un");
  await waitForScreen(page, /^corral-42\s*\nagent\s*$/m, "the command's output");
  await typeInTerminal(page, "echo big=$(stty size)");
  const big = (await waitForScreen(page, /^big=\d+ \d+\s*$/m, "stty size")).match(/^big=(\d+) (\d+)\s*$/m);
  await page.screenshot({ path: join(artifacts, "terminal.png") });

  await page.setViewportSize({ width: 900, height: 500 });
  await page.waitForTimeout(300);  // the fit addon resizes, the page sends the new size
  await typeInTerminal(page, "echo small=$(stty size)");
  const small = (await waitForScreen(page, /^small=\d+ \d+\s*$/m, "stty size after the resize")).match(/^small=(\d+) (\d+)\s*$/m);
  assert.ok(Number(small[1]) < Number(big[1]), `rows ${small[1]} < ${big[1]}`);
  assert.ok(Number(small[2]) < Number(big[2]), `cols ${small[2]} < ${big[2]}`);

  // A reload attaches the same shell again: the daemon replays its output (the earlier command
  // is on the screen again) and the shell goes on.
  const command = await page.locator("#terminal").getAttribute("data-command");
  await typeInTerminal(page, "echo before-reload");
  await waitForScreen(page, /^before-reload\s*$/m, "before the reload");
  await page.reload();
  await waitForScreen(page, /^before-reload\s*$/m, "the scrollback after the reload");
  assert.equal(await page.locator("#terminal").getAttribute("data-command"), command);
  await typeInTerminal(page, "echo after-reload");
  await waitForScreen(page, /^after-reload\s*$/m, "the same shell after the reload");
  await page.screenshot({ path: join(artifacts, "terminal-after-reload.png") });
  assert.deepEqual(problems, []);
  await context.close();
});

const todo = (...items) => ({ name: "TodoWrite", input: { todos: items.map(([content, status]) => ({ content, status, activeForm: `${content}...` })) } });

test("a scripted session shows the agent's text, tool call and output, its todo list and the files changed live, the result and the cost", async () => {
  const turns = [
    { text: "Planning.", tool_use: todo(["Write notes", "in_progress"], ["Count them", "pending"]),
      usage: { input_tokens: 900, output_tokens: 20 } },
    // Slow answers: the page shows the list and the written file while the turn goes on.
    { text: "I'll write the notes.", tool_use: { name: "Write", input: { file_path: "/home/agent/notes.md", content: "# Notes\n" } },
      usage: { input_tokens: 1000, output_tokens: 30 }, delay: 3 },
    { text: "Now I'll check it.", tool_use: { name: "Bash", input: { command: "wc -c notes.md > count.txt; cat count.txt", description: "count" } },
      usage: { input_tokens: 1100, output_tokens: 20 }, delay: 6 },
    { tool_use: todo(["Write notes", "completed"], ["Count them", "completed"]), usage: { input_tokens: 1150, output_tokens: 10 } },
    { text: "notes.md is written.", usage: { input_tokens: 1200, output_tokens: 8 } },
  ];
  await play(turns);
  const { page, context, problems } = await openPage();
  await page.locator("#tab-session").click();
  await page.locator("#prompt").fill("write notes.md");
  await page.locator("#send").click();
  // Live, before the turn's result: the todo list in progress, then the file the Write tool made.
  await page.locator("#todo-list li[data-status=in_progress]", { hasText: "Write notes..." }).waitFor({ timeout: 120000 });
  assert.deepEqual(await page.locator("#todo-list li").allInnerTexts(), ["[>] Write notes...", "[ ] Count them"]);
  await page.locator("#files-list li[data-path='/home/agent/notes.md']").waitFor({ timeout: 30000 });
  assert.equal(await page.locator(".entry.result").count(), 0, "the file showed before the turn ended");
  await page.screenshot({ path: join(artifacts, "session-live.png"), fullPage: true });
  await page.locator(".entry.result").waitFor({ timeout: 120000 });
  assert.equal(await page.locator(".entry.user").first().innerText(), "write notes.md");
  assert.deepEqual(await page.locator(".entry.assistant").allInnerTexts(),
                   ["Planning.", "I'll write the notes.", "Now I'll check it.", "notes.md is written."]);
  const bash = page.locator(".entry.tool[data-tool=Bash]");
  assert.match(await bash.innerText(), /Bash\(wc -c notes\.md > count\.txt; cat count\.txt\)/);
  assert.match(await bash.locator("pre.output").innerText(), /8 notes\.md/);
  // The file the Bash tool wrote is there too: changes are seen in the workspace, not in tool calls.
  assert.deepEqual((await page.locator("#files-list li").allInnerTexts()).sort(),
                   ["created /home/agent/count.txt", "created /home/agent/notes.md"]);
  assert.deepEqual(await page.locator("#todo-list li").allInnerTexts(), ["[x] Write notes", "[x] Count them"]);
  assert.match(await page.locator(".entry.result").innerText(), /2 file\(s\) changed/);
  assert.equal(await sdk.readText(sandbox.id, "/home/agent/notes.md"), "# Notes\n");
  const expected = usd(turns.reduce((sum, t) => sum + microUsd(t.usage), 0));
  assert.equal(await page.locator("#session-cost").innerText(), expected);
  assert.equal(await page.locator("#session-state").innerText(), "ready");
  assert.match(await page.locator(".entry.result").innerText(), new RegExp(`USD ${expected.replace(".", "\\.")}`));
  await page.screenshot({ path: join(artifacts, "session.png"), fullPage: true });

  // Interrupt: a slow answer, stopped from the page.
  await play([{ text: "slow", delay: 30 }]);
  await page.locator("#prompt").fill("take your time");
  await page.locator("#send").click();
  await page.locator("#interrupt:not([disabled])").waitFor({ timeout: 30000 });
  for (let i = 0; i < 300 && (await mainRequests()).length === 0; i++) await page.waitForTimeout(100);
  await page.locator("#interrupt").click();
  await page.locator(".entry.result.error").waitFor({ timeout: 60000 });
  assert.deepEqual(problems, []);
  await context.close();
});

test("a tool the page registers is called by the agent and its answer, from the page, reaches the model", async () => {
  await play([
    { text: "Let me read your notes.", tool_use: { name: "mcp__corral__read_page_notes", input: {} } },
    { text: "The word is OTTER." },
  ]);
  const { page, context, problems } = await openPage();
  await page.locator("#tab-session").click();
  await page.locator("#new-session").click();
  await page.locator("#notes-box summary").click();
  await page.locator("#notes").fill("the secret word is OTTER");
  await page.locator("#prompt").fill("what is the word in my notes?");
  await page.locator("#send").click();
  await page.locator(".entry.result").waitFor({ timeout: 120000 });
  assert.match(await page.locator(".entry.page-tool").innerText(), /read_page_notes/);
  const requests = await mainRequests();
  assert.ok(requests[0].body.tools.some((t) => t.name === "mcp__corral__read_page_notes"));
  const last = requests[1].body.messages.at(-1).content.filter((c) => c.type === "tool_result");
  assert.equal(last.length, 1);
  const text = typeof last[0].content === "string" ? last[0].content : last[0].content.map((c) => c.text).join("");
  assert.equal(text, "the secret word is OTTER");
  assert.ok(!last[0].is_error);
  await page.screenshot({ path: join(artifacts, "browser-tool.png"), fullPage: true });
  assert.deepEqual(problems, []);
  await context.close();
});

// corrald closes a connection when its token ends (close 1008). The page renews its token on the
// open connection instead: a fresh token handed over in the address (#token=...) or pasted in the
// header's form. The terminal's shell, on one connection, works past the first token's end; a
// token of another user is refused there. The control: a page left with a short token loses its
// connection at the token's end (corrald counts it in corral_auth_ended_connections_total).
async function endedConnections() {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(/^corral_auth_ended_connections_total (\d+)$/m.exec(text)?.[1] ?? NaN);
}

async function signedInWith(shortToken) {
  const context = await browser.newContext({ viewport: { width: 1200, height: 800 } });
  const page = await context.newPage();
  const problems = [];
  page.on("pageerror", (error) => problems.push(error.message));
  await page.goto(`${url}/#token=${shortToken}`);
  await page.locator("button.sandbox", { hasText: "web" }).click();
  await waitForScreen(page, /\$\s*$/m, "the shell's prompt");
  return { page, context, problems };
}

test("a fresh token given to the page keeps its terminal's connection open past the old token's end", async () => {
  const exp = Math.floor(Date.now() / 1000) + 5;
  const before = await endedConnections();
  const { page, context, problems } = await signedInWith(mint("web-user", { ttl: exp - Math.floor(Date.now() / 1000) }));
  await page.locator("#renew-form").waitFor();  // offered: the token ends within minutes
  assert.match(await page.locator("#token-expiry").innerText(), /token ends in \d+ s/);
  // Another user's token is refused, and the page keeps its own.
  await page.locator("#renew-token").fill(mint("somebody-else"));
  await page.locator("#renew-form button").click();
  await page.locator("#renew-error", { hasText: "forbidden" }).waitFor();
  // A fresh token of the same user, handed over in the address.
  await page.evaluate((fresh) => { location.hash = `#token=${fresh}`; }, mint("web-user", { ttl: 3600 }));
  await page.locator("#renew-form").waitFor({ state: "hidden" });
  await page.waitForTimeout(Math.max(0, (exp + 2) * 1000 - Date.now()));
  await typeInTerminal(page, "echo still-$((40+2))");
  await waitForScreen(page, /^still-42\s*$/m, "the shell after the first token's end");
  assert.equal(await endedConnections(), before, "no connection was ended for its token");
  await page.screenshot({ path: join(artifacts, "token-renewed.png") });
  assert.deepEqual(problems, []);
  await context.close();
});

test("without a fresh token the page's connection ends with its token (the control)", async () => {
  const exp = Math.floor(Date.now() / 1000) + 3;
  const before = await endedConnections();
  const { context } = await signedInWith(mint("web-user", { ttl: exp - Math.floor(Date.now() / 1000) }));
  const deadline = Date.now() + 10000;
  while ((await endedConnections()) === before && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
  assert.ok((await endedConnections()) > before, "corrald ended the expired connection");
  await context.close();
});
