// An agent session (docs/PROTOCOL.md "Agent sessions"): Claude Code in one of the user's
// sandboxes. A Session object follows the session's numbered events over the client's WebSocket
// (attached from its first event, and again from the last one seen after a reconnect), offers
// them as an async iterator and as callbacks, answers the agent's calls of tools that run in
// this process (a browser page or a Node backend), and sends the user's messages.
import { Channel } from "./channel.js";
import type { Connection, Subscription } from "./connection.js";
import { CorralError } from "./errors.js";
import { isObject, num, objects, seqOf, str } from "./fields.js";

export type SessionState =
  | "initializing" | "ready" | "processing" | "waiting_tool" | "idle" | "completed" | "failed" | "aborted";

export type PermissionMode = "bypassPermissions" | "acceptEdits" | "default" | "plan";

export interface SessionInfo {
  id: string;
  sandbox: string;
  state: SessionState;
  agent_session: string;
  parent: string;
  options: { model: string; permission_mode: PermissionMode; allowed_tools: string[]; disallowed_tools: string[]; partial: boolean };
  turns: number;
  cost_usd: string;
  created_at: number;
  updated_at: number;
  ended_at: number;
  outcome: SessionOutcome | null;
}

export interface SessionOutcome {
  outcome: "completed" | "aborted" | "budget_exhausted" | "agent_exited" | "agent_hung" | "stopped" | "daemon_restarted"
    | "start_failed" | string;
  process?: Record<string, unknown>;
  turns?: number;
  cost_usd?: string;
  [key: string]: unknown;
}

// One event of the session, as the protocol numbers it. `kind` is the protocol's (`state`,
// `user`, `agent`, `usage`, `stderr`, `budget_exhausted`, `tool_call`, `tool_result`,
// `permission_request`, `permission_answer`, and the derived `todo`, `file_change`,
// `awaiting_input`, `result`), or `end` for the last one (`session_end`).
export interface SessionEvent {
  session: string;
  seq: number;
  kind: string;
  state?: SessionState;
  data?: any;                 // agent: one line of Claude Code's stream-json output
  outcome?: SessionOutcome;   // end
  [field: string]: unknown;
}

// Derived events (docs/PROTOCOL.md "Agent sessions"): what a UI follows without parsing text.
// The agent's todo list, whole, each time it sets it (`todo` events).
export interface TodoItem {
  content: string;
  status: "pending" | "in_progress" | "completed";
  activeForm: string;         // "Running the tests" while in progress
}

// A change seen in the session's working directory (`file_change` events, and a turn's files):
// whoever made it (the agent's Write or Bash tool alike). `path` is absolute in the sandbox.
export interface FileChange {
  path: string;
  change: "create" | "modify" | "delete";
  type: "file" | "dir" | "symlink" | "other";
  size: number;               // bytes now (0 when deleted)
}

// A turn's changes counted: every change, also those past the `files` list's bound.
export interface DiffSummary {
  files: number;
  created: number;
  modified: number;
  deleted: number;
  truncated: boolean;         // more than the daemon reports in one turn (1000), or a workspace larger than its scans
  observed: boolean;          // false: the workspace could not be scanned (the sandbox was busy or stopped)
}

// The agent waits for this client: a permission request or a call of a client tool.
export interface AwaitingInput {
  reason: "permission" | "tool";
  call: string;
  name: string;               // the tool asking for permission, or the client tool called
}

// What the agent's `result` says at the end of a turn, and the files the turn changed.
export interface TurnResult {
  text: string;               // the agent's final text
  isError: boolean;
  costUsd: number;            // total_cost_usd as Claude Code estimates it (the ledger is `session.costUsd`)
  usage: Record<string, number>;
  numTurns: number;
  durationMs: number;
  turn: number;               // the session's turns so far, this one included (its `turns`; a resume counts on)
  files: FileChange[];        // merged per path: made then changed is `create`
  diff: DiffSummary;
  data: any;                  // the agent's whole result message
}

// MCP content, or a plain string / JSON value that becomes one text block.
export type ToolOutput = string | { content: Array<{ type: "text"; text: string } | Record<string, unknown>>; isError?: boolean } | unknown;

export interface ToolContext {
  session: Session;
  call: string;
}

// A tool that runs here, in the client, and that the agent sees as `mcp__corral__<name>`.
export interface ClientTool {
  name: string;                          // 1 to 50 of A-Z a-z 0-9 _ -
  description?: string;
  inputSchema?: Record<string, unknown>; // JSON schema of the input (default {"type": "object"})
  handler: (input: any, context: ToolContext) => ToolOutput | Promise<ToolOutput>;
}

export interface PermissionAnswer {
  allow: boolean;
  message?: string;                      // why not (the agent reads it)
  updatedInput?: Record<string, unknown>;
}

export type PermissionHandler = (request: { call: string; toolName: string; input: any }, session: Session) =>
  PermissionAnswer | Promise<PermissionAnswer>;

export interface SessionOptions {
  prompt?: string;
  model?: string;
  permissionMode?: PermissionMode;
  allowedTools?: string[];
  disallowedTools?: string[];
  partial?: boolean;                     // stream_event deltas as the model writes
  cwd?: string;                          // default /home/agent
  tools?: ClientTool[];
  onPermission?: PermissionHandler;      // without it, permission requests wait for their timeout (denied)
}

// The session ended before the turn that was awaited had its result.
export class SessionEndedError extends CorralError {
  readonly outcome: SessionOutcome | undefined;
  constructor(session: string, outcome: SessionOutcome | undefined) {
    super("session_ended", `session ${session} ended (${outcome?.outcome ?? "unknown"}) before the turn's result`);
    this.name = "SessionEndedError";
    this.outcome = outcome;
  }
}

type Listener = (value: any, event: SessionEvent) => void;

const TOOL_NAME = /^[A-Za-z0-9_-]{1,50}$/;

// Called by the client: POST the session (new, resume or fork) and return its info.
export type SessionStarter = (body: Record<string, unknown>) => Promise<SessionInfo>;

export class Session implements Subscription, AsyncIterable<SessionEvent> {
  id = "";
  info: SessionInfo | null = null;
  readonly sandbox: string;
  readonly history: SessionEvent[] = [];   // every event this object received, in order
  lastSeq = 0;
  costUsd = "0.000000";                    // what the relay has debited for this session so far
  todos: TodoItem[] = [];                  // the agent's todo list as it last set it
  readonly changedFiles = new Map<string, FileChange>();  // every change seen, the last per path
  /** @internal */ onId: (id: string) => void = () => {};
  readonly ended: Promise<SessionEvent>;   // the `end` event

  private readonly tools = new Map<string, ClientTool>();
  private readonly listeners = new Map<string, Set<Listener>>();
  private readonly iterators = new Set<Channel<SessionEvent>>();
  private readonly answered = new Set<string>();
  private resultWaiters: Array<{ after: number; resolve: (r: TurnResult) => void; reject: (e: Error) => void }> = [];
  private turnMark = 0;
  private started = false;
  private attached = false;
  private endEvent: SessionEvent | null = null;
  private failure: Error | null = null;
  private resolveEnded!: (event: SessionEvent) => void;
  private rejectEnded!: (error: Error) => void;

  constructor(private readonly connection: Connection, sandbox: string, private readonly options: SessionOptions,
              private readonly starter: SessionStarter, private readonly extra: Record<string, unknown> = {}) {
    this.sandbox = sandbox;
    this.ended = new Promise((resolve, reject) => { this.resolveEnded = resolve; this.rejectEnded = reject; });
    this.ended.catch(() => {});
    for (const tool of options.tools ?? []) this.registerTool(tool);
  }

  get state(): SessionState | undefined {
    return this.info?.state;
  }

  // Declares a tool that runs here. Tools are declared when the session starts (the agent's
  // MCP server is configured then), so register them before start(), or pass them again to
  // resume().
  registerTool(tool: ClientTool) {
    if (this.started) throw new TypeError(`registerTool(${tool.name}): the session has started; tools are declared before start()`);
    if (!TOOL_NAME.test(tool.name)) throw new TypeError(`registerTool: "${tool.name}" is not 1 to 50 of A-Z a-z 0-9 _ -`);
    if (typeof tool.handler !== "function") throw new TypeError(`registerTool(${tool.name}): handler must be a function`);
    if (this.tools.has(tool.name)) throw new TypeError(`registerTool: ${tool.name} is registered already`);
    this.tools.set(tool.name, tool);
  }

  // Creates the session in corrald (with `prompt`, its first turn starts) and follows its events.
  async start(prompt = this.options.prompt): Promise<this> {
    if (this.started) throw new TypeError("start: the session has started already");
    this.started = true;
    const o = this.options;
    const body: Record<string, unknown> = {
      ...(prompt !== undefined && { prompt }),
      ...(o.model !== undefined && { model: o.model }),
      ...(o.permissionMode !== undefined && { permission_mode: o.permissionMode }),
      ...(o.allowedTools !== undefined && { allowed_tools: o.allowedTools }),
      ...(o.disallowedTools !== undefined && { disallowed_tools: o.disallowedTools }),
      ...(o.partial !== undefined && { partial: o.partial }),
      ...(o.cwd !== undefined && { cwd: o.cwd }),
      ...(this.tools.size && {
        tools: [...this.tools.values()].map((t) => ({
          name: t.name,
          ...(t.description !== undefined && { description: t.description }),
          ...(t.inputSchema !== undefined && { input_schema: t.inputSchema }),
        })),
      }),
      ...this.extra,
    };
    this.info = await this.starter(body);
    this.id = this.info.id;
    this.onId(this.id);
    await this.attach();
    return this;
  }

  // Follows an existing session (one that this client did not start, e.g. after a page reload).
  async follow(id: string, afterSeq = 0): Promise<this> {
    this.started = true;
    this.id = id;
    this.onId(id);
    this.lastSeq = afterSeq;
    this.turnMark = afterSeq;
    await this.attach();
    return this;
  }

  private async attach() {
    this.connection.add(this);
    try {
      const reply = await this.connection.op<{ session: SessionInfo; first_seq: number }>(
        "session.attach", { session: this.id, after_seq: this.lastSeq });
      if (isObject(reply?.session)) this.info = reply.session;  // its events follow the reply
      this.attached = true;
    } catch (error) {
      this.connection.remove(this);
      throw error;
    }
  }

  async resubscribe(connection: Connection): Promise<void> {
    if (!this.attached || this.endEvent) return;
    await connection.op("session.attach", { session: this.id, after_seq: this.lastSeq });
  }

  fail(error: Error) {
    if (this.endEvent) return;
    this.failure = error;
    this.attached = false;
    for (const channel of this.iterators) channel.fail(error);
    this.iterators.clear();
    for (const waiter of this.resultWaiters) waiter.reject(error);
    this.resultWaiters = [];
    this.rejectEnded(error);
    this.emit("error", error, { session: this.id, seq: this.lastSeq, kind: "error" });
  }

  // Called by the client for each of this session's events. `seq` must be a positive integer
  // (else the event is dropped) and `kind` a string (else ""); the derived values read the other
  // fields as far as they fit their types (see valueOf).
  deliver(message: Record<string, any>) {
    const seq = seqOf(message.seq);
    if (!(seq > this.lastSeq)) return;  // a replay of what was seen already (or no number at all)
    this.lastSeq = seq;
    const kind = message.event === "session_end" ? "end" : typeof message.kind === "string" ? message.kind : "";
    const event: SessionEvent = { ...message, session: this.id, seq, kind };
    delete (event as any).event;
    this.history.push(event);
    const state = typeof event.state === "string" ? event.state : undefined;
    const outcome = isObject(event.outcome) ? event.outcome as SessionOutcome : null;
    if (isObject(this.info)) {
      if (event.kind === "state" && state) this.info.state = state;
      if (event.kind === "end") {
        if (state) this.info.state = state;
        this.info.outcome = outcome;
      }
    }
    if (event.kind === "end" && typeof outcome?.cost_usd === "string" && outcome.cost_usd) this.costUsd = outcome.cost_usd;
    if (event.kind === "usage" && typeof event.session_cost_usd === "string") this.costUsd = event.session_cost_usd;
    for (const channel of this.iterators) channel.push(event);
    this.emit(event.kind, this.valueOf(event), event);
    this.emit("event", event, event);
    if (event.kind === "result") this.turnEnded(event);
    if (event.kind === "agent") this.agentLine(event);
    if (event.kind === "tool_call") this.toolCall(event);
    if (event.kind === "tool_result" && typeof event.call === "string") this.answered.add(event.call);
    if (event.kind === "permission_request") this.permissionRequest(event);
    if (event.kind === "end") {
      this.endEvent = event;
      this.connection.remove(this);
      for (const channel of this.iterators) channel.end();
      this.iterators.clear();
      for (const waiter of this.resultWaiters) waiter.reject(new SessionEndedError(this.id, outcome ?? undefined));
      this.resultWaiters = [];
      this.resolveEnded(event);
    }
  }

  private agentLine(event: SessionEvent) {
    const data = isObject(event.data) ? event.data : {};
    const blocks = objects(isObject(data.message) ? data.message.content : undefined);
    if (data.type === "assistant") {
      for (const block of blocks) {
        if (block.type === "text" && typeof block.text === "string" && block.text) this.emit("text", block.text, event);
        if (block.type === "tool_use") this.emit("tool_use", { id: str(block.id), name: str(block.name), input: block.input }, event);
      }
    } else if (data.type === "user") {
      for (const block of blocks) {
        if (block.type === "tool_result") {
          const text = typeof block.content === "string"
            ? block.content
            : objects(block.content).filter((c) => c.type === "text").map((c) => str(c.text)).join("");
          this.emit("tool_output", { id: str(block.tool_use_id), isError: !!block.is_error, text }, event);
        }
      }
    }
  }

  // What a callback of the event's kind gets: the state, the derived events' values, or the event.
  private valueOf(event: SessionEvent): unknown {
    switch (event.kind) {
      case "state": return typeof event.state === "string" ? event.state : undefined;
      case "todo":
        this.todos = toTodos(event.todos);
        return this.todos;
      case "file_change": {
        const change = toFileChange(event);
        if (change.path) this.changedFiles.set(change.path, change);
        return change;
      }
      case "awaiting_input":
        return { reason: str(event.reason), call: str(event.call), name: str(event.name) } as AwaitingInput;
      case "result": return this.turnResultOf(event);
      default: return event;
    }
  }

  // The derived `result` ends a turn: it follows the agent's own result line and the turn's
  // last file changes.
  private turnEnded(event: SessionEvent) {
    const result = this.turnResultOf(event);
    const ready = this.resultWaiters.filter((w) => event.seq > w.after);
    this.resultWaiters = this.resultWaiters.filter((w) => !(event.seq > w.after));
    for (const waiter of ready) waiter.resolve(result);
  }

  private turnResultOf(event: SessionEvent): TurnResult {
    const line = [...this.history].reverse().find((e) => e.seq < event.seq && e.kind === "agent" && e.data?.type === "result");
    return toTurnResult(line?.data ?? {}, event);
  }

  private toolCall(event: SessionEvent) {
    const call = str(event.call);
    const tool = this.tools.get(str(event.name));
    if (!call || !tool) return;  // declared by another client of this session: that one answers
    // Replayed calls (attach from the start) were usually answered already: their tool_result
    // event follows in the same replay. Wait for the replay to pass before running the handler.
    setTimeout(async () => {
      if (this.answered.has(call) || this.endEvent) return;
      this.answered.add(call);
      let answer: Record<string, unknown>;
      try {
        answer = toToolAnswer(await tool.handler(event.input, { session: this, call }));
      } catch (error) {
        answer = { text: `${tool.name} failed: ${(error as Error)?.message ?? String(error)}`, is_error: true };
      }
      try {
        await this.connection.op("session.tool_result", { session: this.id, call, ...answer });
      } catch (error) {
        if ((error as CorralError)?.code !== "not_found") this.emit("error", error, event);
      }
    }, 50);
  }

  private permissionRequest(event: SessionEvent) {
    const handler = this.options.onPermission;
    if (!handler) return;
    const call = str(event.call);
    if (!call) return;
    setTimeout(async () => {
      if (this.endEvent || this.history.some((e) => e.kind === "permission_answer" && e.call === call)) return;
      let answer: PermissionAnswer | undefined;
      try {
        answer = await handler({ call, toolName: str(event.tool_name), input: event.input }, this);
      } catch (error) {
        answer = { allow: false, message: `the permission handler failed: ${str((error as Error)?.message)}` };
      }
      try {
        // A handler that answers no object (a bug of its own) denies.
        await this.connection.op("session.permission", {
          session: this.id, call, allow: !!answer?.allow,
          ...(answer?.message !== undefined && { message: answer.message }),
          ...(answer?.updatedInput !== undefined && { updated_input: answer.updatedInput }),
        });
      } catch (error) {
        if ((error as CorralError)?.code !== "not_found") this.emit("error", error, event);
      }
    }, 50);
  }

  // Callbacks: an event kind (`state` gets the state, `todo` a TodoItem[], `file_change` a
  // FileChange, `awaiting_input` an AwaitingInput, `result` a TurnResult, the others the event),
  // `event` for all of them, and what they hold: `text` (each text block the agent writes),
  // `tool_use` ({id, name, input}), `tool_output` ({id, isError, text}), `end`, `error` (the
  // connection is gone, or a tool answer was refused). Returns an unsubscribe. A listener that
  // throws is its own affair: the error is dropped, and the other listeners, the iterators and
  // the routing of the next events go on (as in the Python SDK).
  on(name: string, listener: Listener): () => void {
    let set = this.listeners.get(name);
    if (!set) this.listeners.set(name, (set = new Set()));
    set.add(listener);
    return () => set!.delete(listener);
  }

  private emit(name: string, value: unknown, event: SessionEvent) {
    for (const listener of this.listeners.get(name) ?? []) {
      try {
        listener(value, event);
      } catch {
        // a listener's error is its own
      }
    }
  }

  // Every event from the first this object received, then the new ones, until the session ends.
  events(): AsyncIterable<SessionEvent> {
    const channel = new Channel<SessionEvent>();
    for (const event of this.history) channel.push(event);
    if (this.endEvent) channel.end();
    else if (this.failure) channel.fail(this.failure);
    else this.iterators.add(channel);
    return channel;
  }

  [Symbol.asyncIterator](): AsyncIterator<SessionEvent> {
    return this.events()[Symbol.asyncIterator]();
  }

  // The result of the turn that start() or the last turn() began (waits for it).
  result(): Promise<TurnResult> {
    const after = this.turnMark;
    const done = this.history.find((e) => e.seq > after && e.kind === "result");
    if (done) return Promise.resolve(this.turnResultOf(done));
    if (this.endEvent) return Promise.reject(new SessionEndedError(this.id, this.endEvent.outcome));
    if (this.failure) return Promise.reject(this.failure);
    return new Promise((resolve, reject) => this.resultWaiters.push({ after, resolve, reject }));
  }

  // A message for the agent: the next turn, or feedback it reads during the current one.
  async send(text: string): Promise<void> {
    await this.connection.op("session.send", { session: this.id, text });
  }

  // Sends a message that starts a turn and waits for that turn's result.
  async turn(text: string): Promise<TurnResult> {
    this.turnMark = this.lastSeq;
    const result = this.result();
    result.catch(() => {});  // a refused send() is the error to report
    await this.send(text);
    return result;
  }

  async interrupt(): Promise<void> {
    await this.connection.op("session.interrupt", { session: this.id });
  }

  async abort(): Promise<void> {
    await this.connection.op("session.abort", { session: this.id });
  }

  // The agent finishes and exits: the session ends `completed`.
  async close(): Promise<void> {
    await this.connection.op("session.close", { session: this.id });
  }

  // Stops following the session (it goes on in corrald).
  async detach(): Promise<void> {
    this.connection.remove(this);
    if (!this.attached) return;
    this.attached = false;
    for (const channel of this.iterators) channel.end();
    this.iterators.clear();
    await this.connection.op("session.detach", { session: this.id }).catch(() => {});
  }
}

// A turn's result: the agent's result line (`data`) and the daemon's `result` event. A field
// that does not fit its type keeps its default; files that are no objects or have no path are
// left out.
export function toTurnResult(data: unknown, event: unknown = {}): TurnResult {
  const line = isObject(data) ? data : {};
  const ev = isObject(event) ? event : {};
  const diff = isObject(ev.diff) ? ev.diff : {};
  return {
    text: typeof line.result === "string" ? line.result : str(ev.text),
    isError: line.is_error !== undefined ? !!line.is_error : !!ev.is_error,
    costUsd: num(line.total_cost_usd),
    usage: isObject(line.usage) ? line.usage : {},
    numTurns: num(line.num_turns),
    durationMs: num(line.duration_ms),
    turn: num(ev.turn),
    files: objects(ev.files).map(toFileChange).filter((f) => f.path),
    diff: {
      files: num(diff.files), created: num(diff.created), modified: num(diff.modified),
      deleted: num(diff.deleted), truncated: !!diff.truncated, observed: diff.observed !== false,
    },
    data: line,
  };
}

function toTodos(todos: unknown): TodoItem[] {
  return objects(todos).map((t) => ({
    content: str(t.content), status: str(t.status) as TodoItem["status"], activeForm: str(t.active_form),
  }));
}

function toFileChange(f: Record<string, any>): FileChange {
  return { path: str(f.path), change: str(f.change) as FileChange["change"], type: str(f.type) as FileChange["type"],
           size: num(f.size) };
}

function toToolAnswer(output: ToolOutput): Record<string, unknown> {
  if (typeof output === "string") return { text: output };
  if (output && typeof output === "object" && Array.isArray((output as any).content)) {
    const { content, isError } = output as any;
    return { content, ...(isError && { is_error: true }) };
  }
  return { text: output === undefined ? "" : JSON.stringify(output) };
}
