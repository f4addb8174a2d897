// CorralClient: corrald's public protocol (docs/PROTOCOL.md) for Node 20+ and browsers. HTTP
// with fetch; commands and sessions over one WebSocket per client (the native WebSocket where
// there is one, the `ws` package in Node otherwise), opened when first needed and opened again
// after a drop, resuming every stream from the last sequence number seen.
import { Channel } from "./channel.js";
import { Connection, resolveToken } from "./connection.js";
import type { ReconnectOptions, Subscription, TokenSource } from "./connection.js";
import { CorralConnectionError, CorralError } from "./errors.js";
import { isObject, seqOf, str } from "./fields.js";
import { Session } from "./session.js";
import type { SessionInfo, SessionOptions } from "./session.js";

export interface SandboxLimits {
  memory_bytes: number;
  cpus: number;
  pids: number;
  disk_bytes: number;
}

export interface EgressRules {
  domains: string[];
  ports: number[];
  cidrs: string[];
}

export interface Sandbox {
  id: string;
  name: string;
  image: string;          // the name it was created with ("python:3.12"), "host", or a digest
  image_digest?: string;  // "sha256:...": the image it runs, whatever its name points at now
  state: string;  // creating | created | starting | running | stopping | stopped | destroying
  limits: SandboxLimits;
  idle_timeout_s: number;
  created_at: number;
  last_active_at: number;
  source: string;
  egress: EgressRules;
  network: "loopback" | "full";
  secrets: string[];  // the secrets it may use, by name (docs/PROTOCOL.md, "Secrets")
}

// Where a secret may go and how (docs/PROTOCOL.md, "Secrets"): a header from a template
// (default "Authorization": "Bearer {secret}"), or basic auth as `basic_user`.
export interface SecretBinding {
  hosts: string[];            // exact names or "*.suffix"
  ports?: number[];           // default [443]
  methods?: string[];         // default any
  path_prefixes?: string[];   // default any
  header?: string;
  value?: string;             // a template holding {secret} once
  basic_user?: string;
}

// A secret as the API shows it: never its value.
export interface Secret {
  name: string;
  owner: "user" | "issuer";
  bindings: SecretBinding[];
  created_at: number;
  updated_at: number;
}

// A checkpoint of an agent session (docs/PROTOCOL.md "Checkpoints").
export interface Checkpoint {
  id: string;
  session: string;
  sandbox: string;
  snapshot: string;
  turns: number;
  created_at: number;
}

// A port a running sandbox shows (docs/PROTOCOL.md "Ports"): `url` the host form (null without
// the daemon's ports.domain), `path_url` the path form on corrald's own address (client.urlOf).
export interface SandboxPort {
  port: number;
  url: string | null;
  path_url: string;
  public: boolean;
  created_at: number;
}

// A link for a browser tab, good until `expires_at` (unix seconds) for that one port.
export interface SignedPortUrl {
  url: string | null;
  path_url: string;
  expires_at: number;
}

export interface CreateSandboxOptions {
  name?: string;
  image?: string;         // "host" (the default), an image name ("python:3.12") or its digest
  limits?: Partial<SandboxLimits>;
  idle_timeout_s?: number;
  start?: boolean;
  snapshot?: string;
  egress?: Partial<EgressRules>;
  network?: "loopback" | "full";
  unsafe?: string[];
  secrets?: string[];     // names of the user's (or its issuer's) secrets it may use
}

export interface Outcome {
  outcome: string;  // exited | signaled | oom_killed | ... (PROTOCOL.md "Outcome")
  exit_code?: number;
  signal?: string;
  wall_s?: number;
  cpu_user_s?: number;
  cpu_sys_s?: number;
  peak_memory_bytes?: number;
  [key: string]: unknown;
}

export interface ExecOptions {
  env?: Record<string, string>;
  cwd?: string;
  user?: "agent" | "root";
  stdin?: boolean;                       // keep stdin open (write() and closeStdin() on the handle)
  pty?: { rows: number; cols: number };  // a terminal (scope `terminal`); stdin is open
}

export interface OutputChunk {
  fd: 1 | 2;
  seq: number;
  data: Uint8Array;
}

// A running command: its output as an async iterator, and its outcome.
export interface CommandHandle {
  readonly id: string;
  readonly output: AsyncIterable<OutputChunk>;
  readonly outcome: Promise<Outcome>;
  // Output the daemon no longer held when this client attached again (seq ranges skipped).
  readonly gaps: ReadonlyArray<{ from: number; to: number }>;
  write(data: string | Uint8Array): Promise<void>;
  closeStdin(): Promise<void>;
  signal(signal: string | number): Promise<void>;
  resize(rows: number, cols: number): Promise<void>;
  detach(): Promise<void>;
}

export interface Snapshot {
  id: string;
  sandbox: string;
  image: string;
  image_digest?: string;
  created_at: number;
  bytes: number;
  disk_bytes: number;
}

export interface FileStat {
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: string;
  mtime: number;
}

export interface DirEntry {
  name: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: string;
  mtime: number;
}

export interface SandboxEvent {
  seq: number;
  type: string;
  at: number;
  data: Record<string, unknown>;
}

export interface Usage {
  window: { name: string; start: number; end: number };
  ai: { spent_usd: string; budget_usd: string | null; remaining_usd: string | null; calls: number };
  compute: { spent_s: number; budget_s: number | null; remaining_s: number | null };
  sessions: Array<{ session: string; sandbox: string; cost_usd: string; calls: number }>;
  sandboxes: Array<{ sandbox: string; compute_s: number }>;
}

export interface CorralClientOptions {
  url: string;          // http(s)://host:port of corrald ("" in a page corrald serves: its own origin)
  // A token minted by the operator's backend (createToken), or a function that gets a fresh one.
  // With a function the client renews its open WebSocket's token before it expires (op auth),
  // and every HTTP request asks it for the token to send.
  token?: TokenSource;
  getToken?: () => string | Promise<string>;  // the same as a function in `token`
  renewBeforeMs?: number;  // renew this long before the token expires (default 60000, or half its lifetime)
  fetch?: typeof fetch;
  reconnect?: ReconnectOptions;
}

// A command this client follows: its output by channel (per socket), its end by id.
class CommandStream implements Subscription {
  lastSeq = 0;
  channel = 0;
  readonly output = new Channel<OutputChunk>();
  readonly gaps: Array<{ from: number; to: number }> = [];
  readonly outcome: Promise<Outcome>;
  private resolve!: (outcome: Outcome) => void;
  private reject!: (error: Error) => void;

  constructor(readonly id: string, private readonly client: CorralClient) {
    this.outcome = new Promise((resolve, reject) => { this.resolve = resolve; this.reject = reject; });
    this.outcome.catch(() => {});  // observed through the handle
  }

  async resubscribe(connection: Connection): Promise<void> {
    const route = (reply: unknown) => {
      this.channel = channelOf(reply, "attach");
      this.client._channels.set(this.channel, this);
    };
    try {
      await connection.op("attach", { command: this.id, after_seq: this.lastSeq }, route);
    } catch (error) {
      const first = Number((error as CorralError).details?.first_seq);
      if ((error as CorralError).code !== "stream_gap" || !(first > 0)) throw error;
      this.gaps.push({ from: this.lastSeq + 1, to: first - 1 });
      await connection.op("attach", { command: this.id, after_seq: first - 1 }, route);
    }
  }

  fail(error: Error) {
    this.output.fail(error);
    this.reject(error);
    this.client._commands.delete(this.id);
  }

  chunk(fd: 1 | 2, seq: number, data: Uint8Array) {
    if (seq <= this.lastSeq) return;
    this.lastSeq = seq;
    this.output.push({ fd, seq, data });
  }

  exit(seq: number, outcome: Outcome) {
    if (seq) this.lastSeq = seq;
    this.output.end();
    this.resolve(outcome);
  }
}

// The command and channel of an exec or attach reply; a reply without them fails the request
// (a TypeError) before anything is routed.
function commandOf(reply: unknown, op: string): string {
  if (isObject(reply) && typeof reply.command === "string" && reply.command) return reply.command;
  throw new TypeError(`${op}: corrald's reply holds no command id`);
}

function channelOf(reply: unknown, op: string): number {
  const channel = isObject(reply) ? reply.channel : undefined;
  if (typeof channel === "number" && Number.isInteger(channel) && channel >= 0 && channel <= 0xffffffff) return channel;
  throw new TypeError(`${op}: corrald's reply holds no channel`);
}

const enc = encodeURIComponent;

function toBase64(bytes: Uint8Array): string {
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

export class CorralClient {
  readonly connection: Connection;
  private readonly base: string;
  private readonly token: TokenSource;
  private readonly fetchImpl: typeof fetch;
  /** @internal */ readonly _channels = new Map<number, CommandStream>();
  /** @internal */ readonly _commands = new Map<string, CommandStream>();
  private readonly sessions = new Map<string, Session>();

  constructor(options: CorralClientOptions) {
    if (options.url === undefined || options.url === null) throw new TypeError("CorralClient: url is required");
    if (!options.token && !options.getToken) throw new TypeError("CorralClient: token (or getToken) is required");
    const origin = (globalThis as any).location?.origin as string | undefined;
    this.base = (options.url || origin || "").replace(/\/+$/, "");
    if (!/^https?:\/\//.test(this.base)) throw new TypeError(`CorralClient: url must be http(s)://host:port, not "${options.url}"`);
    this.token = options.getToken ?? options.token!;
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.connection = new Connection(this.base.replace(/^http/, "ws") + "/v1/ws", this.token, options.reconnect,
                                     options.renewBeforeMs);
    this.connection.onText = (message) => this.onEvent(message);
    this.connection.onBinary = (bytes) => this.onFrame(bytes);
    this.connection.onReset = () => this._channels.clear();
  }

  // ---- HTTP ----

  private async send(method: string, path: string, body?: BodyInit, contentType?: string): Promise<Response> {
    let response: Response;
    try {
      response = await this.fetchImpl(this.base + path, {
        method,
        headers: { Authorization: `Bearer ${await resolveToken(this.token)}`, ...(contentType && { "Content-Type": contentType }) },
        ...(body !== undefined && { body }),
      });
    } catch (cause) {
      throw new CorralConnectionError(`${method} ${path}: cannot reach corrald at ${this.base}`, { cause });
    }
    if (!response.ok) {
      const text = await response.text();
      let parsed: any;
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = undefined;
      }
      throw CorralError.from(parsed?.error ?? { message: text || `HTTP ${response.status}` }, response.status,
                             response.headers.get("X-Request-Id") ?? undefined);
    }
    return response;
  }

  private async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const response = await this.send(method, path, body === undefined ? undefined : JSON.stringify(body),
                                     body === undefined ? undefined : "application/json");
    const text = await response.text();
    return (text ? JSON.parse(text) : undefined) as T;
  }

  health(): Promise<{ status: string; version: string; protocol: number }> {
    return this.request("GET", "/healthz");
  }

  // ---- sandboxes ----

  // Sends the token function's current token to corrald on the open WebSocket now (op auth),
  // e.g. when a page was handed a fresh one. Renewal before expiry is automatic; see getToken.
  renewToken(): Promise<void> {
    return this.connection.renewNow();
  }

  createSandbox(options: CreateSandboxOptions = {}): Promise<Sandbox> {
    return this.request("POST", "/v1/sandboxes", options);
  }

  getSandbox(id: string): Promise<Sandbox> {
    return this.request("GET", `/v1/sandboxes/${enc(id)}`);
  }

  async listSandboxes(): Promise<Sandbox[]> {
    return (await this.request<{ sandboxes: Sandbox[] }>("GET", "/v1/sandboxes")).sandboxes;
  }

  startSandbox(id: string): Promise<Sandbox> {
    return this.request("POST", `/v1/sandboxes/${enc(id)}/start`);
  }

  stopSandbox(id: string): Promise<Sandbox> {
    return this.request("POST", `/v1/sandboxes/${enc(id)}/stop`);
  }

  async destroySandbox(id: string): Promise<void> {
    await this.request("DELETE", `/v1/sandboxes/${enc(id)}`);
  }

  // A copy of the sandbox's files (its writable layer), kept after the sandbox is gone.
  snapshot(id: string): Promise<Snapshot> {
    return this.request("POST", `/v1/sandboxes/${enc(id)}/snapshot`);
  }

  async listSnapshots(): Promise<Snapshot[]> {
    return (await this.request<{ snapshots: Snapshot[] }>("GET", "/v1/snapshots")).snapshots;
  }

  async deleteSnapshot(id: string): Promise<void> {
    await this.request("DELETE", `/v1/snapshots/${enc(id)}`);
  }

  // A new sandbox whose files are a copy of this one's (create one from a snapshot with
  // createSandbox({snapshot})).
  forkSandbox(id: string, options: { name?: string; start?: boolean } = {}): Promise<Sandbox> {
    return this.request("POST", `/v1/sandboxes/${enc(id)}/fork`, options);
  }

  // Secrets (scope "secrets"): kept by the daemon, added by the egress proxy to the requests
  // their bindings match; a sandbox sees only a placeholder in the variable of the same name.
  putSecret(name: string, value: string, bindings: SecretBinding[]): Promise<Secret> {
    return this.request("PUT", `/v1/secrets/${enc(name)}`, { value, bindings });
  }

  listSecrets(): Promise<{ secrets: Secret[]; issuer_secrets: Secret[] }> {
    return this.request("GET", "/v1/secrets");
  }

  async deleteSecret(name: string): Promise<void> {
    await this.request("DELETE", `/v1/secrets/${enc(name)}`);
  }

  async getSandboxSecrets(id: string): Promise<string[]> {
    return (await this.request<{ secrets: string[] }>("GET", `/v1/sandboxes/${enc(id)}/secrets`)).secrets;
  }

  // `ca_trusted`: whether the sandbox's trust store holds corral's CA now (a running sandbox
  // started without secrets gets it at its next start).
  setSandboxSecrets(id: string, names: string[]): Promise<{ id: string; secrets: string[]; ca_trusted: boolean }> {
    return this.request("PUT", `/v1/sandboxes/${enc(id)}/secrets`, { secrets: names });
  }

  // ---- ports: preview URLs ----

  // Shows a port a process in the running sandbox listens on (127.0.0.1 there). `public: true`
  // (anyone may reach it) needs the token scope ports:public.
  openPort(id: string, port: number, options: { public?: boolean } = {}): Promise<SandboxPort> {
    return this.request("POST", `/v1/sandboxes/${enc(id)}/ports`, { port, ...(options.public !== undefined && { public: options.public }) });
  }

  async listPorts(id: string): Promise<SandboxPort[]> {
    return (await this.request<{ ports: SandboxPort[] }>("GET", `/v1/sandboxes/${enc(id)}/ports`)).ports;
  }

  async closePort(id: string, port: number): Promise<void> {
    await this.request("DELETE", `/v1/sandboxes/${enc(id)}/ports/${port}`);
  }

  // A signed URL of a shown port (ttlS at most the daemon's ports.max_ttl; 3600 by default).
  signPortUrl(id: string, port: number, options: { ttlS?: number } = {}): Promise<SignedPortUrl> {
    return this.request("POST", `/v1/sandboxes/${enc(id)}/ports/${port}/signed-url`,
                        options.ttlS !== undefined ? { ttl_s: options.ttlS } : {});
  }

  // The absolute URL of a path on corrald (a port's path_url, a signed URL's path_url).
  urlOf(path: string): string {
    return this.base + path;
  }

  getEgress(id: string): Promise<EgressRules> {
    return this.request("GET", `/v1/sandboxes/${enc(id)}/egress`);
  }

  setEgress(id: string, rules: Partial<EgressRules>): Promise<EgressRules> {
    return this.request("PUT", `/v1/sandboxes/${enc(id)}/egress`, rules);
  }

  sandboxEvents(id: string, options: { afterSeq?: number; limit?: number; type?: string } = {}):
      Promise<{ events: SandboxEvent[]; last_seq: number; more: boolean }> {
    const query = new URLSearchParams({ after_seq: String(options.afterSeq ?? 0), limit: String(options.limit ?? 1000),
                                        ...(options.type && { type: options.type }) });
    return this.request("GET", `/v1/sandboxes/${enc(id)}/events?${query}`);
  }

  usage(): Promise<Usage> {
    return this.request("GET", "/v1/usage");
  }

  // ---- files (paths inside the sandbox) ----

  private fsPath(id: string, verb: string, params: Record<string, string | undefined>) {
    const query = new URLSearchParams();
    for (const [key, value] of Object.entries(params)) if (value !== undefined) query.set(key, value);
    return `/v1/sandboxes/${enc(id)}/fs/${verb}?${query}`;
  }

  async readFile(id: string, path: string): Promise<Uint8Array> {
    const response = await this.send("GET", this.fsPath(id, "read", { path }));
    return new Uint8Array(await response.arrayBuffer());
  }

  async readText(id: string, path: string): Promise<string> {
    return new TextDecoder().decode(await this.readFile(id, path));
  }

  async writeFile(id: string, path: string, data: string | Uint8Array,
                  options: { mode?: number; append?: boolean } = {}): Promise<{ path: string; size: number }> {
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
    const response = await this.send("PUT", this.fsPath(id, "write", {
      path, mode: options.mode === undefined ? undefined : options.mode.toString(8).padStart(4, "0"),
      append: options.append ? "true" : undefined,
    }), bytes as BodyInit, "application/octet-stream");
    return response.json();
  }

  stat(id: string, path: string): Promise<FileStat> {
    return this.request("GET", this.fsPath(id, "stat", { path }));
  }

  async listDir(id: string, path: string): Promise<DirEntry[]> {
    return (await this.request<{ entries: DirEntry[] }>("GET", this.fsPath(id, "list", { path }))).entries;
  }

  async mkdir(id: string, path: string, options: { parents?: boolean } = {}): Promise<void> {
    await this.request("POST", this.fsPath(id, "mkdir", { path, parents: options.parents ? "true" : undefined }));
  }

  async remove(id: string, path: string, options: { recursive?: boolean } = {}): Promise<void> {
    await this.request("POST", this.fsPath(id, "remove", { path, recursive: options.recursive ? "true" : undefined }));
  }

  async rename(id: string, from: string, to: string): Promise<void> {
    await this.request("POST", this.fsPath(id, "rename", { from, to }));
  }

  // ---- commands ----

  // An output frame: type 1, fd (1 or 2), channel (u32), seq (u64), data. Others are dropped.
  private onFrame(bytes: Uint8Array) {
    if (bytes.length < 14 || bytes[0] !== 1 || (bytes[1] !== 1 && bytes[1] !== 2)) return;
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this._channels.get(view.getUint32(2))?.chunk(bytes[1], Number(view.getBigUint64(6)), bytes.subarray(14));
  }

  // A command's exit, or a session's event. A field of the wrong type: the message is dropped
  // (no such command or session) or the field keeps its default (an outcome "unknown").
  private onEvent(message: Record<string, any>) {
    if (message.event === "exit") {
      const id = str(message.command);
      const command = this._commands.get(id);
      if (!command) return;
      const outcome = isObject(message.outcome) && typeof message.outcome.outcome === "string"
        ? message.outcome as Outcome : { outcome: "unknown" };
      this._commands.delete(id);
      this.connection.remove(command);
      if (this._channels.get(command.channel) === command) this._channels.delete(command.channel);
      command.exit(seqOf(message.seq), outcome);
    } else if (message.event === "session" || message.event === "session_end") {
      if (typeof message.session !== "string") return;
      this.sessions.get(message.session)?.deliver(message);
      if (message.event === "session_end") this.sessions.delete(message.session);
    }
  }

  // Routes a command's frames and end to a new stream, as its exec or attach reply is read.
  private route(id: string, channel: number, afterSeq = 0): CommandStream {
    const stream = new CommandStream(id, this);
    stream.channel = channel;
    stream.lastSeq = afterSeq;
    this._channels.set(channel, stream);
    this._commands.set(id, stream);
    this.connection.add(stream);
    return stream;
  }

  private handle(stream: CommandStream): CommandHandle {
    const id = stream.id;
    const op = (name: string, fields: Record<string, unknown> = {}) => this.connection.op<void>(name, { command: id, ...fields });
    return {
      id,
      output: stream.output,
      outcome: stream.outcome,
      gaps: stream.gaps,
      write: async (data) => {
        const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
        await op("stdin", { data: toBase64(bytes) });
      },
      closeStdin: () => op("close_stdin"),
      signal: (signal) => op("signal", { signal }),
      resize: (rows, cols) => op("resize", { rows, cols }),
      detach: async () => {
        this.connection.remove(stream);
        this._commands.delete(id);
        this._channels.delete(stream.channel);
        stream.output.end();
        await op("detach").catch(() => {});
      },
    };
  }

  // Runs argv in a running sandbox; output arrives as it is written.
  async exec(sandbox: string, argv: string[], options: ExecOptions = {}): Promise<CommandHandle> {
    if (!argv.length) throw new TypeError("exec: argv must not be empty");
    let stream!: CommandStream;
    await this.connection.op<unknown>(
      "exec", { sandbox, argv, ...options }, (r) => { stream = this.route(commandOf(r, "exec"), channelOf(r, "exec")); });
    return this.handle(stream);
  }

  // Follows a command that is running (or ended: what the daemon still holds of it), from
  // after `afterSeq`, e.g. a terminal after a page reload.
  async attach(command: string, afterSeq = 0): Promise<CommandHandle & { firstSeq: number; state: string }> {
    let stream!: CommandStream;
    const result = await this.connection.op<{ command: string; channel: number; first_seq: number; state: string }>(
      "attach", { command, after_seq: afterSeq }, (r) => { stream = this.route(commandOf(r, "attach"), channelOf(r, "attach"), afterSeq); });
    return { ...this.handle(stream), firstSeq: result.first_seq, state: result.state };
  }

  // Runs argv to its end; returns its stdout and stderr as text, and its outcome.
  async run(sandbox: string, argv: string[], options: ExecOptions = {}): Promise<{ stdout: string; stderr: string; outcome: Outcome }> {
    const command = await this.exec(sandbox, argv, options);
    const parts: Record<1 | 2, Uint8Array[]> = { 1: [], 2: [] };
    for await (const chunk of command.output) parts[chunk.fd].push(chunk.data);
    const decode = (chunks: Uint8Array[]) => {
      const all = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
      let at = 0;
      for (const c of chunks) { all.set(c, at); at += c.length; }
      return new TextDecoder().decode(all);
    };
    return { stdout: decode(parts[1]), stderr: decode(parts[2]), outcome: await command.outcome };
  }

  // ---- agent sessions ----

  private sessionStarter(sandbox: string) {
    return (body: Record<string, unknown>) => this.request<SessionInfo>("POST", `/v1/sandboxes/${enc(sandbox)}/sessions`, body);
  }

  // A session that is not started yet: registerTool() on it, then start(prompt).
  prepareSession(sandbox: string, options: SessionOptions = {}): Session {
    return this.wrap(new Session(this.connection, sandbox, options, this.sessionStarter(sandbox)));
  }

  // Starts Claude Code in the sandbox (with `prompt`, its first turn) and follows its events.
  async createSession(sandbox: string, options: SessionOptions = {}): Promise<Session> {
    return this.prepareSession(sandbox, options).start();
  }

  // Runs an ended session again with its history (same id). Tools are declared again here.
  async resumeSession(id: string, options: SessionOptions = {}): Promise<Session> {
    const info = await this.getSession(id);
    return this.wrap(new Session(this.connection, info.sandbox, options, this.sessionStarter(info.sandbox), { resume: id })).start();
  }

  // A new session that starts from another one's history.
  async forkSession(id: string, options: SessionOptions = {}): Promise<Session> {
    const info = await this.getSession(id);
    return this.wrap(new Session(this.connection, info.sandbox, options, this.sessionStarter(info.sandbox), { fork: id })).start();
  }

  // ---- checkpoints: the conversation and the files together ----

  // Between turns: a snapshot of the session's sandbox, its transcript included.
  checkpointSession(id: string): Promise<Checkpoint> {
    return this.request("POST", `/v1/sessions/${enc(id)}/checkpoint`);
  }

  async listCheckpoints(sessionId: string): Promise<Checkpoint[]> {
    return (await this.request<{ checkpoints: Checkpoint[] }>("GET", `/v1/sessions/${enc(sessionId)}/checkpoints`)).checkpoints;
  }

  getCheckpoint(id: string): Promise<Checkpoint> {
    return this.request("GET", `/v1/checkpoints/${enc(id)}`);
  }

  async deleteCheckpoint(id: string): Promise<void> {
    await this.request("DELETE", `/v1/checkpoints/${enc(id)}`);
  }

  // A new session that continues from a checkpoint: in its own sandbox (whose files are put back
  // as they were then; no session may run there) or in `options.sandbox`, one made from the
  // checkpoint's snapshot.
  async restoreCheckpoint(id: string, options: SessionOptions & { sandbox?: string } = {}): Promise<Session> {
    const { sandbox: into, ...rest } = options;
    const sandbox = into ?? (await this.getCheckpoint(id)).sandbox;
    return this.wrap(new Session(this.connection, sandbox, rest, this.sessionStarter(sandbox), { checkpoint: id })).start();
  }

  // Follows a session that exists already (started elsewhere, or before a page reload), from
  // after `afterSeq` (0: everything the daemon still holds).
  async followSession(id: string, afterSeq = 0): Promise<Session> {
    const info = await this.getSession(id);
    const session = this.wrap(new Session(this.connection, info.sandbox, {}, this.sessionStarter(info.sandbox)));
    return session.follow(id, afterSeq);
  }

  getSession(id: string): Promise<SessionInfo> {
    return this.request("GET", `/v1/sessions/${enc(id)}`);
  }

  async listSessions(sandbox?: string): Promise<SessionInfo[]> {
    const query = sandbox ? `?sandbox=${enc(sandbox)}` : "";
    return (await this.request<{ sessions: SessionInfo[] }>("GET", `/v1/sessions${query}`)).sessions;
  }

  // Registers the session for event routing as soon as it has an id (before its attach, whose
  // reply the events follow immediately).
  private wrap(session: Session): Session {
    session.onId = (id) => this.sessions.set(id, session);
    return session;
  }

  close() {
    this.connection.close();
  }
}
