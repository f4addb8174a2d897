// Shared by the node tests: the daemon and scripted model that run_tests.py started, clients
// with minted tokens (closed after the file), and the model's scenario and request log.
import { readFileSync } from "node:fs";
import { after } from "node:test";

import { CorralClient } from "../dist/index.js";
import { createToken } from "../dist/token.js";

export const env = {
  url: process.env.CORRAL_URL,
  issuer: process.env.CORRAL_ISSUER,
  secret: process.env.CORRAL_SECRET,
  model: process.env.CORRAL_MODEL_URL,
  realKey: process.env.CORRAL_REAL_KEY,
  price: JSON.parse(process.env.CORRAL_PRICE ?? "{}"),
};
if (!env.url || !env.issuer || !env.secret || !env.model) {
  throw new Error("run through run_tests.py (CORRAL_URL, CORRAL_ISSUER, CORRAL_SECRET, CORRAL_MODEL_URL)");
}

const clients = [];
after(() => clients.forEach((c) => c.close()));

export function token(userId, extra = {}) {
  return createToken({ issuer: env.issuer, secret: env.secret, userId, ...extra });
}

export function client(userId, extra = {}, options = {}) {
  const c = new CorralClient({ url: env.url, token: token(userId, extra), ...options });
  clients.push(c);
  return c;
}

// The scripted model's next answers (tests/fixtures/scripted_model.py's scenario format).
export async function play(turns) {
  const response = await fetch(`${env.model}/_scripted/scenario`, { method: "PUT", body: JSON.stringify({ turns }) });
  if (!response.ok) throw new Error(`scenario refused: ${await response.text()}`);
}

// A scenario both SDKs' tests play (tests/e2e/sdk_scenarios.json; the Python SDK's tests too).
const scenarios = JSON.parse(readFileSync(new URL("../../../tests/e2e/sdk_scenarios.json", import.meta.url), "utf8"));
export function scenario(name) {
  if (!scenarios[name]) throw new Error(`no scenario ${name} in tests/e2e/sdk_scenarios.json`);
  return structuredClone(scenarios[name]);
}

// The model calls that carried the conversation (not the CLI's housekeeping calls).
export async function mainRequests() {
  return (await (await fetch(`${env.model}/_scripted/requests`)).json()).filter((r) => r.kind === "main");
}

export async function allRequests() {
  return (await fetch(`${env.model}/_scripted/requests`)).json();
}

// What the relay charges for a usage, in micro-dollars (prices are per million tokens).
export function microUsd(usage) {
  const p = env.price;
  return Math.round((usage.input_tokens ?? 0) * p.input + (usage.output_tokens ?? 0) * p.output +
                    (usage.cache_creation_input_tokens ?? 0) * p.cache_write + (usage.cache_read_input_tokens ?? 0) * p.cache_read);
}

export const usd = (micro) => `${Math.floor(micro / 1e6)}.${String(micro % 1e6).padStart(6, "0")}`;

// The text of the user messages of a Messages API request, and its tool results.
export function userTexts(request) {
  const texts = [];
  for (const m of request.body.messages) {
    if (m.role !== "user") continue;
    if (typeof m.content === "string") texts.push(m.content);
    else for (const c of m.content) if (c.type === "text" && c.text) texts.push(c.text);
  }
  return texts;
}

export function toolResults(request) {
  const last = request.body.messages.at(-1);
  return (Array.isArray(last.content) ? last.content : []).filter((c) => c.type === "tool_result").map((c) => ({
    isError: !!c.is_error,
    text: typeof c.content === "string" ? c.content : c.content.filter((x) => x.type === "text").map((x) => x.text).join(""),
  }));
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export async function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms); });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
