// The page corrald serves at /: sign in with a token, pick or create a sandbox, use a terminal
// in it (xterm.js on a PTY command), and watch and steer a Claude Code session there. It talks
// only the public protocol, through @corral/sdk (its sources, bundled by build.mjs).
import "@xterm/xterm/css/xterm.css";
import "./style.css";

import { FitAddon } from "@xterm/addon-fit";
import { Terminal } from "@xterm/xterm";

import { CorralClient } from "../../sdk/typescript/src/client.ts";
import type { CommandHandle, Sandbox } from "../../sdk/typescript/src/client.ts";
import { CorralError } from "../../sdk/typescript/src/errors.ts";
import type { FileChange, Session, SessionEvent, TodoItem, TurnResult } from "../../sdk/typescript/src/session.ts";
import { followPorts, wirePorts } from "./ports.ts";

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const TOKEN_KEY = "corral.token";

let client: CorralClient | null = null;
let current: Sandbox | null = null;
// The token the client uses; a fresh one replaces it (renewal) without a new connection.
let currentToken = "";
// Below this many seconds left, the header offers to renew the token.
const RENEW_OFFER_S = 300;

// ---- sign in ----

function tokenFromLocation(): string | null {
  // #token=... (what `corral` prints for the page): taken, then removed from the address bar.
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (!match) return null;
  history.replaceState(null, "", location.pathname + location.search);
  return decodeURIComponent(match[1]);
}

function describe(error: unknown): string {
  if (error instanceof CorralError) return `${error.code}: ${error.message}`;
  return (error as Error)?.message ?? String(error);
}

function claimsOf(token: string): { sub?: string; iss?: string; exp?: number } {
  try {
    return JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
  } catch {
    return {};
  }
}

function userOf(token: string): string {
  const claims = claimsOf(token);
  return claims.sub === undefined ? "" : `${claims.sub} (${claims.iss})`;
}

async function signIn(token: string) {
  const candidate = new CorralClient({ url: "", token });
  await candidate.listSandboxes();  // verifies the token
  candidate.close();
  currentToken = token;
  // The client asks for the current token each time: a renewal swaps it in place.
  client = new CorralClient({ url: "", getToken: () => currentToken });
  sessionStorage.setItem(TOKEN_KEY, token);
  $("who").textContent = userOf(token);
  $("sign-in").hidden = true;
  $("app").hidden = false;
  $("sign-out").hidden = false;
  showExpiry();
  await refreshSandboxes();
}

// A fresh token for the signed-in user (pasted, or handed over as #token=... in the address):
// the open connection takes it (op auth), the terminal and the session view stay as they are.
async function renewToken(fresh: string) {
  if (!client) return signIn(fresh);
  const previous = currentToken;
  currentToken = fresh;
  try {
    await client.renewToken();
    await client.listSandboxes();  // and HTTP requests, which send it too
  } catch (error) {
    currentToken = previous;
    throw error;
  }
  sessionStorage.setItem(TOKEN_KEY, fresh);
  $("renew-error").textContent = "";
  ($("renew-token") as HTMLInputElement).value = "";
  showExpiry();
}

function showExpiry() {
  const exp = claimsOf(currentToken).exp;
  const left = exp === undefined ? Infinity : exp - Date.now() / 1000;
  const offer = left < RENEW_OFFER_S;
  $("renew-form").hidden = !offer;
  $("token-expiry").textContent =
    !offer ? "" : left > 0 ? `token ends in ${Math.ceil(left)} s` : "token expired: paste a fresh one";
}

function signOut() {
  sessionStorage.clear();
  location.reload();
}

// ---- sandboxes ----

async function refreshSandboxes(select?: string) {
  const list = $("sandboxes");
  const sandboxes = await client!.listSandboxes();
  list.replaceChildren(...sandboxes.map((sb) => {
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.className = "sandbox";
    button.dataset.id = sb.id;
    button.textContent = `${sb.name || sb.id}`;
    const state = document.createElement("span");
    state.className = `state ${sb.state}`;
    state.textContent = sb.state;
    button.append(" ", state);
    button.setAttribute("aria-current", String(sb.id === current?.id));
    button.onclick = () => openSandbox(sb.id).catch((e) => ($("sandbox-error").textContent = describe(e)));
    item.append(button);
    return item;
  }));
  if (select) await openSandbox(select);
}

async function openSandbox(id: string) {
  $("sandbox-error").textContent = "";
  let sandbox = await client!.getSandbox(id);
  if (sandbox.state !== "running") sandbox = await client!.startSandbox(id);
  if (current?.id !== id) {
    closeTerminal();
    resetSession();
  }
  current = sandbox;
  sessionStorage.setItem("corral.sandbox", id);
  $("sandbox-title").textContent = sandbox.name || sandbox.id;
  $("workspace").hidden = false;
  for (const b of document.querySelectorAll<HTMLButtonElement>("button.sandbox")) {
    b.setAttribute("aria-current", String(b.dataset.id === id));
  }
  showTab(sessionStorage.getItem("corral.tab") === "session" ? "session" : "terminal");
  followPorts(client, id);
  await refreshSandboxes();
}

// ---- terminal ----

let term: Terminal | null = null;
let fit: FitAddon | null = null;
let shell: CommandHandle | null = null;
const encoder = new TextEncoder();

function terminalKey() {
  return `corral.terminal.${current!.id}`;
}

async function openTerminal() {
  if (!term) {
    term = new Terminal({ cursorBlink: true, scrollback: 10000, fontSize: 14, convertEol: false });
    fit = new FitAddon();
    term.loadAddon(fit);
    term.open($("terminal"));
    term.onData((data) => { shell?.write(encoder.encode(data)).catch(() => {}); });
    term.onResize(({ rows, cols }) => { shell?.resize(rows, cols).catch(() => {}); });
    // Copy: the selection, on Ctrl+Shift+C; paste comes with the browser's own Ctrl+Shift+V.
    term.attachCustomKeyEventHandler((event) => {
      if (event.type === "keydown" && event.ctrlKey && event.shiftKey && event.code === "KeyC") {
        navigator.clipboard?.writeText(term!.getSelection()).catch(() => {});
        return false;
      }
      return true;
    });
    new ResizeObserver(() => fit?.fit()).observe($("terminal"));
  }
  fit!.fit();
  if (shell) return;
  $("terminal-restart").hidden = true;
  const status = $("terminal-status");
  // After a reload: the shell this tab had is attached again; the daemon replays what it holds.
  const previous = sessionStorage.getItem(terminalKey());
  if (previous) {
    try {
      const attached = await client!.attach(previous, 0);
      if (attached.state === "running") {
        term!.reset();
        follow(attached);
        status.textContent = `reattached to ${attached.id}`;
        await attached.resize(term!.rows, term!.cols).catch(() => {});
        return;
      }
      await attached.detach();
    } catch {
      // ended and forgotten, or another sandbox's: start a new one
    }
  }
  const handle = await client!.exec(current!.id, ["/bin/bash", "-l"], {
    pty: { rows: term!.rows, cols: term!.cols },
    env: { TERM: "xterm-256color" },
    cwd: "/home/agent",
  });
  sessionStorage.setItem(terminalKey(), handle.id);
  follow(handle);
  status.textContent = `shell ${handle.id}`;
  term!.focus();
}

function follow(handle: CommandHandle) {
  shell = handle;
  $("terminal").dataset.command = handle.id;
  (async () => {
    for await (const chunk of handle.output) term!.write(chunk.data);
  })().catch(() => {});
  handle.outcome.then(
    (outcome) => {
      if (shell !== handle) return;
      shell = null;
      term!.write(`\r\n[${outcome.outcome}${outcome.exit_code !== undefined ? ` ${outcome.exit_code}` : ""}]\r\n`);
      $("terminal-status").textContent = "the shell ended";
      $("terminal-restart").hidden = false;
      sessionStorage.removeItem(terminalKey());
    },
    (error) => {
      if (shell !== handle) return;
      shell = null;
      $("terminal-status").textContent = `disconnected: ${describe(error)}`;
      $("terminal-restart").hidden = false;
    });
}

function closeTerminal() {
  if (shell) shell.detach().catch(() => {});
  shell = null;
  term?.reset();
}

// ---- agent session ----

let session: Session | null = null;
let lastSessionId = "";
const toolBlocks = new Map<string, HTMLElement>();
const CHANGED = { create: "created", modify: "modified", delete: "deleted" } as const;
const TODO_MARK = { pending: "[ ]", in_progress: "[>]", completed: "[x]" } as const;

function resetSession() {
  session?.detach().catch(() => {});
  session = null;
  lastSessionId = "";
  toolBlocks.clear();
  $("transcript").replaceChildren();
  $("files-list").replaceChildren();
  $("files-changed").hidden = true;
  $("todo-list").replaceChildren();
  $("todo-box").hidden = true;
  $("session-id").textContent = "none yet";
  $("session-state").textContent = "-";
  $("session-cost").textContent = "0.000000";
  ($("interrupt") as HTMLButtonElement).disabled = true;
}

function add(className: string, text: string): HTMLElement {
  const element = document.createElement("div");
  element.className = `entry ${className}`;
  element.textContent = text;
  $("transcript").append(element);
  element.scrollIntoView({ block: "end" });
  return element;
}

function summarize(input: any): string {
  if (!input || typeof input !== "object") return "";
  const value = input.command ?? input.file_path ?? input.path ?? input.pattern ?? input.url ?? JSON.stringify(input);
  const text = String(value);
  return text.length > 200 ? text.slice(0, 200) + "..." : text;
}

function watch(s: Session) {
  session = s;
  lastSessionId = s.id;
  $("session-id").textContent = s.id;
  const setState = (state: string) => {
    $("session-state").textContent = state;
    ($("interrupt") as HTMLButtonElement).disabled = !["processing", "waiting_tool"].includes(state);
  };
  setState(s.state ?? "initializing");
  s.on("state", (state) => setState(state));
  s.on("user", (event: SessionEvent) => add("user", String(event.text ?? "")));
  s.on("text", (text) => add("assistant", text));
  s.on("tool_use", (use) => {
    const block = add("tool", `${use.name}(${summarize(use.input)})`);
    block.dataset.tool = use.name;
    toolBlocks.set(use.id, block);
  });
  s.on("todo", (todos: TodoItem[]) => showTodos(todos));
  s.on("file_change", (change: FileChange) => showFileChange(change));
  s.on("tool_output", (output) => {
    const block = toolBlocks.get(output.id);
    const pre = document.createElement("pre");
    pre.className = output.isError ? "output error" : "output";
    pre.textContent = output.text.length > 4000 ? output.text.slice(0, 4000) + "\n..." : output.text;
    (block ?? $("transcript")).append(pre);
  });
  s.on("tool_call", (event: SessionEvent) => add("tool page-tool", `page tool ${event.name}(${summarize(event.input)})`));
  s.on("usage", () => ($("session-cost").textContent = s.costUsd));
  s.on("stderr", (event: SessionEvent) => add("stderr", String(event.text ?? "")));
  s.on("budget_exhausted", () => add("error", "the AI budget is spent"));
  s.on("result", (result: TurnResult) => {
    add(result.isError ? "result error" : "result",
        `${result.isError ? "stopped" : "done"}: ${result.numTurns} turn(s), ${(result.durationMs / 1000).toFixed(1)} s, ` +
        `${result.diff.files} file(s) changed${result.diff.truncated ? " (at least)" : ""}, USD ${s.costUsd} metered`);
  });
  s.on("end", (event: SessionEvent) => {
    setState(String(event.state));
    $("session-cost").textContent = s.costUsd;
    add("end", `session ${event.state} (${event.outcome?.outcome ?? "?"}); a new prompt resumes it`);
    session = null;
  });
  s.on("error", (error) => ($("session-error").textContent = describe(error)));
}

// The agent's todo list as it last set it (`todo` events: the whole list each time).
function showTodos(todos: TodoItem[]) {
  const items = todos.map((todo) => {
    const item = document.createElement("li");
    item.dataset.status = todo.status;
    item.textContent = `${TODO_MARK[todo.status] ?? "[?]"} ${todo.status === "in_progress" && todo.activeForm ? todo.activeForm : todo.content}`;
    return item;
  });
  $("todo-list").replaceChildren(...items);
  $("todo-box").hidden = items.length === 0;
}

// One line per path, its latest change (`file_change` events: seen in the workspace, whoever
// made it), merged as a turn's result merges them: made then changed is made; made and removed
// again (an editor's temporary file) is no change, its line goes.
function showFileChange(change: FileChange) {
  const list = $("files-list");
  let item = [...list.children].find((li) => (li as HTMLElement).dataset.path === change.path) as HTMLElement | undefined;
  if (item && change.change === "delete" && item.dataset.change === "create") {
    item.remove();
    $("files-changed").hidden = list.children.length === 0;
    return;
  }
  if (item && change.change === "create" && item.dataset.change === "delete") change = { ...change, change: "modify" };
  if (item && change.change === "modify" && item.dataset.change === "create") change = { ...change, change: "create" };
  if (!item) {
    item = document.createElement("li");
    item.dataset.path = change.path;
    list.append(item);
  }
  item.dataset.change = change.change;
  item.textContent = `${CHANGED[change.change] ?? change.change} ${change.path}${change.type === "dir" ? "/" : ""}`;
  $("files-changed").hidden = false;
}

const notesTool = {
  name: "read_page_notes",
  description: "Reads the notes the user wrote in the page for the agent (plain text).",
  inputSchema: { type: "object", properties: {} },
  handler: () => ($("notes") as HTMLTextAreaElement).value || "(the page has no notes)",
};

async function sendPrompt() {
  const box = $("prompt") as HTMLTextAreaElement;
  const text = box.value.trim();
  if (!text || !current) return;
  $("session-error").textContent = "";
  box.value = "";
  try {
    if (session && !["idle", "completed", "failed", "aborted"].includes(session.state ?? "")) {
      await session.send(text);  // the next turn, or feedback during this one
    } else if (lastSessionId) {
      watch(await client!.resumeSession(lastSessionId, { prompt: text, tools: [notesTool] }));
    } else {
      const s = client!.prepareSession(current.id, { prompt: text });
      s.registerTool(notesTool);
      watch(await s.start());
    }
  } catch (error) {
    box.value = text;
    $("session-error").textContent = describe(error);
  }
}

// ---- tabs and wiring ----

function showTab(tab: "terminal" | "session") {
  sessionStorage.setItem("corral.tab", tab);
  $("terminal-view").hidden = tab !== "terminal";
  $("session-view").hidden = tab !== "session";
  $("tab-terminal").setAttribute("aria-selected", String(tab === "terminal"));
  $("tab-session").setAttribute("aria-selected", String(tab === "session"));
  if (tab === "terminal") openTerminal().catch((e) => ($("terminal-status").textContent = describe(e)));
}

function wire() {
  $("sign-in-form").onsubmit = (event) => {
    event.preventDefault();
    const token = ($("token") as HTMLTextAreaElement).value.trim();
    signIn(token).catch((e) => ($("sign-in-error").textContent = describe(e)));
  };
  $("sign-out").onclick = signOut;
  $("renew-form").onsubmit = (event) => {
    event.preventDefault();
    const fresh = ($("renew-token") as HTMLInputElement).value.trim();
    renewToken(fresh).catch((e) => ($("renew-error").textContent = describe(e)));
  };
  window.addEventListener("hashchange", () => {
    const fresh = tokenFromLocation();
    if (fresh) renewToken(fresh).catch((e) => ($("renew-error").textContent = describe(e)));
  });
  setInterval(() => { if (client) showExpiry(); }, 1000);
  $("new-sandbox-form").onsubmit = (event) => {
    event.preventDefault();
    const name = ($("new-sandbox-name") as HTMLInputElement).value.trim();
    client!.createSandbox(name ? { name } : {})
      .then((sb) => refreshSandboxes(sb.id))
      .catch((e) => ($("sandbox-error").textContent = describe(e)));
  };
  $("tab-terminal").onclick = () => showTab("terminal");
  $("tab-session").onclick = () => showTab("session");
  $("terminal-restart").onclick = () => openTerminal().catch((e) => ($("terminal-status").textContent = describe(e)));
  $("prompt-form").onsubmit = (event) => {
    event.preventDefault();
    sendPrompt();
  };
  $("prompt").onkeydown = (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      sendPrompt();
    }
  };
  $("interrupt").onclick = () => session?.interrupt().catch((e) => ($("session-error").textContent = describe(e)));
  $("new-session").onclick = () => resetSession();
  wirePorts();
}

async function main() {
  wire();
  const token = tokenFromLocation() ?? sessionStorage.getItem(TOKEN_KEY);
  if (!token) {
    $("sign-in").hidden = false;
    return;
  }
  try {
    await signIn(token);
    const sandbox = sessionStorage.getItem("corral.sandbox");
    if (sandbox) await openSandbox(sandbox).catch(() => sessionStorage.removeItem("corral.sandbox"));
  } catch (error) {
    sessionStorage.removeItem(TOKEN_KEY);
    $("sign-in").hidden = false;
    $("sign-in-error").textContent = describe(error);
  }
}

main();
