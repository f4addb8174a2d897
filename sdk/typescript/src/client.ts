// CorralClient: corrald's public protocol (docs/PROTOCOL.md) for Node 20+ and browsers. HTTP
// with fetch; commands over one WebSocket per client (the native WebSocket where there is one,
// the `ws` package in Node otherwise), opened when first needed.
import { CorralConnectionError, CorralError } from "./errors.js";

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
  image: string;
  state: string;  // creating | created | starting | running | stopping | stopped | destroying
  limits: SandboxLimits;
  idle_timeout_s: number;
  created_at: number;
  last_active_at: number;
  source: string;
  egress: EgressRules;
  network: "loopback" | "full";
}

export interface CreateSandboxOptions {
  name?: string;
  limits?: Partial<SandboxLimits>;
  idle_timeout_s?: number;
  start?: boolean;
  snapshot?: string;
  egress?: Partial<EgressRules>;
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
}

export interface CorralClientOptions {
  url: string;     // http(s)://host:port of corrald
  token: string;   // a token minted by the operator's backend (createToken)
  fetch?: typeof fetch;
}

type Pending = { resolve: (result: any) => void; reject: (error: Error) => void };

// A queue that an async iterator reads: pushes before the reader waits are kept.
class Channel<T> implements AsyncIterable<T> {
  private items: T[] = [];
  private waiting: ((result: IteratorResult<T>) => void) | null = null;
  private ended = false;

  push(item: T) {
    if (this.waiting) {
      const wake = this.waiting;
      this.waiting = null;
      wake({ value: item, done: false });
    } else {
      this.items.push(item);
    }
  }

  end() {
    this.ended = true;
    if (this.waiting) {
      const wake = this.waiting;
      this.waiting = null;
      wake({ value: undefined as never, done: true });
    }
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return {
      next: () => {
        if (this.items.length) return Promise.resolve({ value: this.items.shift() as T, done: false });
        if (this.ended) return Promise.resolve({ value: undefined as never, done: true });
        return new Promise((resolve) => { this.waiting = resolve; });
      },
    };
  }
}

interface Running {
  id: string;
  output: Channel<OutputChunk>;
  resolve: (outcome: Outcome) => void;
  reject: (error: Error) => void;
}

export class CorralClient {
  private readonly base: string;
  private readonly token: string;
  private readonly fetchImpl: typeof fetch;
  private socket: Promise<WebSocket> | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private readonly byChannel = new Map<number, Running>();
  private readonly byCommand = new Map<string, Running>();

  constructor(options: CorralClientOptions) {
    if (!options.url) throw new TypeError("CorralClient: url is required");
    if (!options.token) throw new TypeError("CorralClient: token is required");
    this.base = options.url.replace(/\/+$/, "");
    this.token = options.token;
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  // ---- HTTP ----

  private async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    let response: Response;
    try {
      response = await this.fetchImpl(this.base + path, {
        method,
        headers: { Authorization: `Bearer ${this.token}`, ...(body !== undefined && { "Content-Type": "application/json" }) },
        ...(body !== undefined && { body: JSON.stringify(body) }),
      });
    } catch (cause) {
      throw new CorralConnectionError(`${method} ${path}: cannot reach corrald at ${this.base}`, { cause });
    }
    const text = await response.text();
    let parsed: any = undefined;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    if (!response.ok) {
      const error = parsed?.error;
      throw new CorralError(error?.code ?? "internal", error?.message ?? `HTTP ${response.status}`, response.status,
                            response.headers.get("X-Request-Id") ?? undefined);
    }
    return parsed as T;
  }

  health(): Promise<{ status: string; version: string; protocol: number }> {
    return this.request("GET", "/healthz");
  }

  createSandbox(options: CreateSandboxOptions = {}): Promise<Sandbox> {
    return this.request("POST", "/v1/sandboxes", options);
  }

  getSandbox(id: string): Promise<Sandbox> {
    return this.request("GET", `/v1/sandboxes/${encodeURIComponent(id)}`);
  }

  async listSandboxes(): Promise<Sandbox[]> {
    return (await this.request<{ sandboxes: Sandbox[] }>("GET", "/v1/sandboxes")).sandboxes;
  }

  startSandbox(id: string): Promise<Sandbox> {
    return this.request("POST", `/v1/sandboxes/${encodeURIComponent(id)}/start`);
  }

  stopSandbox(id: string): Promise<Sandbox> {
    return this.request("POST", `/v1/sandboxes/${encodeURIComponent(id)}/stop`);
  }

  async destroySandbox(id: string): Promise<void> {
    await this.request("DELETE", `/v1/sandboxes/${encodeURIComponent(id)}`);
  }

  // ---- WebSocket ----

  private async openSocket(): Promise<WebSocket> {
    const url = this.base.replace(/^http/, "ws") + "/v1/ws";
    const protocols = ["corral.v1", `bearer.${this.token}`];
    const Native = (globalThis as any).WebSocket;
    const Impl = Native ?? (await import("ws")).WebSocket;
    const ws: WebSocket = new Impl(url, protocols);
    ws.binaryType = "arraybuffer";
    await new Promise<void>((resolve, reject) => {
      ws.onopen = () => resolve();
      ws.onerror = () => reject(new CorralConnectionError(`cannot open ${url}`));
    });
    ws.onmessage = (message: MessageEvent) => this.onMessage(message.data);
    ws.onclose = () => this.onClose();
    return ws;
  }

  private socketReady(): Promise<WebSocket> {
    if (!this.socket) {
      this.socket = this.openSocket();
      this.socket.catch(() => { this.socket = null; });
    }
    return this.socket;
  }

  private async op<T>(op: string, fields: Record<string, unknown>): Promise<T> {
    const ws = await this.socketReady();
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      ws.send(JSON.stringify({ id, op, ...fields }));
    });
  }

  private onMessage(data: unknown) {
    if (typeof data !== "string") {
      const bytes = new Uint8Array(data as ArrayBuffer);
      if (bytes.length < 14 || bytes[0] !== 1) return;
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      const running = this.byChannel.get(view.getUint32(2));
      running?.output.push({ fd: bytes[1] as 1 | 2, seq: Number(view.getBigUint64(6)), data: bytes.subarray(14) });
      return;
    }
    const message = JSON.parse(data);
    if (message.id !== undefined && this.pending.has(message.id)) {
      const pending = this.pending.get(message.id)!;
      this.pending.delete(message.id);
      if (message.ok) pending.resolve(message.result);
      else pending.reject(new CorralError(message.error?.code ?? "internal", message.error?.message ?? "failed"));
      return;
    }
    if (message.event === "exit") {
      const running = this.byCommand.get(message.command);
      if (!running) return;
      this.byCommand.delete(message.command);
      for (const [channel, r] of this.byChannel) if (r === running) this.byChannel.delete(channel);
      running.output.end();
      running.resolve(message.outcome);
    }
  }

  private onClose() {
    this.socket = null;
    const gone = new CorralConnectionError("the connection to corrald closed");
    for (const pending of this.pending.values()) pending.reject(gone);
    this.pending.clear();
    for (const running of this.byCommand.values()) {
      running.output.end();
      running.reject(gone);
    }
    this.byCommand.clear();
    this.byChannel.clear();
  }

  // Runs argv in a running sandbox; output arrives as it is written.
  async exec(sandbox: string, argv: string[], options: ExecOptions = {}): Promise<CommandHandle> {
    if (!argv.length) throw new TypeError("exec: argv must not be empty");
    let resolve!: (outcome: Outcome) => void;
    let reject!: (error: Error) => void;
    const outcome = new Promise<Outcome>((res, rej) => { resolve = res; reject = rej; });
    outcome.catch(() => {});  // observed through the handle
    const result = await this.op<{ command: string; channel: number }>("exec", { sandbox, argv, ...options });
    const running: Running = { id: result.command, output: new Channel<OutputChunk>(), resolve, reject };
    this.byChannel.set(result.channel, running);
    this.byCommand.set(result.command, running);
    return { id: result.command, output: running.output, outcome };
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

  close() {
    this.socket?.then((ws) => ws.close()).catch(() => {});
    this.socket = null;
  }
}
