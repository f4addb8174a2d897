// One WebSocket to corrald (`/v1/ws`, subprotocol corral.v1) shared by a client's commands and
// sessions: requests with ids and their replies, events routed by the client, and reconnection.
// When the socket closes while something is subscribed (a command's output, a session's
// events), it is opened again with backoff and every subscription attaches again from the last
// sequence number it saw, so nothing is lost or seen twice while the daemon still holds it.
import { CorralConnectionError, CorralError } from "./errors.js";
import { isObject } from "./fields.js";

export type TokenSource = string | (() => string | Promise<string>);

// When to renew an open connection's token: this long before it expires (or halfway through a
// shorter lifetime). Only a function as the token source can renew; a fixed token's connection
// is closed by corrald at its expiry (close code 1008) and cannot reconnect with it.
export const DEFAULT_RENEW_BEFORE_MS = 60_000;

export interface ReconnectOptions {
  enabled?: boolean;         // default true
  initialDelayMs?: number;   // default 100; doubles on each failed attempt
  maxDelayMs?: number;       // default 5000
  giveUpAfterMs?: number;    // default 60000: then every subscription fails with CorralConnectionError
}

// Something that lives across reconnects.
export interface Subscription {
  // The socket was opened again: attach again from the last event seen.
  resubscribe(connection: Connection): Promise<void>;
  // The connection is gone for good (closed by the client, or reconnecting gave up).
  fail(error: Error): void;
}

type Pending = { resolve: (result: any) => void; reject: (error: Error) => void; onResult?: (result: any) => void };

export async function resolveToken(token: TokenSource): Promise<string> {
  return typeof token === "function" ? await token() : token;
}

// The `exp` claim of a JWT (unix seconds), read without verifying it; undefined when absent.
export function tokenExpiry(token: string): number | undefined {
  try {
    const payload = token.split(".")[1];
    const base64 = payload.replace(/-/g, "+").replace(/_/g, "/");
    const json = JSON.parse(typeof atob === "function" ? atob(base64) : Buffer.from(base64, "base64").toString());
    return typeof json.exp === "number" ? json.exp : undefined;
  } catch {
    return undefined;
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export class Connection {
  onText: (message: Record<string, any>) => void = () => {};  // a JSON object that is no reply
  onBinary: (bytes: Uint8Array) => void = () => {};
  onReset: () => void = () => {};  // the socket closed: per-socket state (channels) is void
  reconnects = 0;                  // how many times the socket was opened again
  renewals = 0;                    // how many times the open socket's token was renewed (op auth)

  private socket: Promise<WebSocket> | null = null;
  private current: WebSocket | null = null;
  private nextId = 1;
  private closed = false;
  private readonly pending = new Map<number, Pending>();
  private readonly subscriptions = new Set<Subscription>();
  private readonly reconnect: Required<ReconnectOptions>;
  private renewTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(private readonly url: string, private readonly token: TokenSource, reconnect: ReconnectOptions = {},
              private readonly renewBeforeMs = DEFAULT_RENEW_BEFORE_MS) {
    this.reconnect = { enabled: true, initialDelayMs: 100, maxDelayMs: 5000, giveUpAfterMs: 60000, ...reconnect };
  }

  add(subscription: Subscription) {
    this.subscriptions.add(subscription);
  }

  remove(subscription: Subscription) {
    this.subscriptions.delete(subscription);
  }

  // A request and its reply. `onResult` runs as the reply is read, before any message that
  // follows it: a reply's events may come in the same read (the `ws` package dispatches them in
  // one go, before the promise's continuation runs), so whoever routes them registers there.
  async op<T>(op: string, fields: Record<string, unknown>, onResult?: (result: T) => void): Promise<T> {
    if (this.closed) throw new CorralConnectionError("the client is closed");
    const ws = await this.ready();
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve, reject, onResult });
      try {
        ws.send(JSON.stringify({ id, op, ...fields }));
      } catch (cause) {
        this.pending.delete(id);
        reject(new CorralConnectionError(`${op}: the connection to corrald is closed`, { cause }));
      }
    });
  }

  sendBinary(data: Uint8Array) {
    this.current?.send(data);
  }

  // Drops the socket as if the network had (for tests of reconnection): subscriptions resume.
  drop() {
    this.current?.close(4000, "dropped by the client");
  }

  close() {
    this.closed = true;
    this.cancelRenewal();
    const ws = this.current;
    this.current = null;
    this.socket = null;
    ws?.close(1000);
    this.failAll(new CorralConnectionError("the client is closed"));
  }

  private ready(): Promise<WebSocket> {
    if (!this.socket) {
      const opening = this.open();
      this.socket = opening;
      opening.catch(() => { if (this.socket === opening) this.socket = null; });
    }
    return this.socket;
  }

  private async open(): Promise<WebSocket> {
    const token = await resolveToken(this.token);
    const protocols = ["corral.v1", `bearer.${token}`];
    const Native = (globalThis as any).WebSocket;
    const Impl = Native ?? (await import("ws")).WebSocket;
    const ws: WebSocket = new Impl(this.url, protocols);
    ws.binaryType = "arraybuffer";
    await new Promise<void>((resolve, reject) => {
      ws.onopen = () => resolve();
      ws.onerror = () => reject(new CorralConnectionError(`cannot open ${this.url}`));
      ws.onclose = (event: CloseEvent) =>
        reject(new CorralConnectionError(`cannot open ${this.url} (closed with ${event.code})`));
    });
    if (this.closed) {
      ws.close(1000);
      throw new CorralConnectionError("the client is closed");
    }
    this.current = ws;
    ws.onerror = () => {};
    ws.onmessage = (message: MessageEvent) => this.dispatch(message.data);
    ws.onclose = (event: CloseEvent) => this.lost(ws, event);
    this.scheduleRenewal(ws, token);
    return ws;
  }

  // Before the token ends, a fresh one from the token function goes to corrald on the open
  // socket (op auth): the connection, and everything attached to it, stays as it is.
  private scheduleRenewal(ws: WebSocket, token: string) {
    this.cancelRenewal();
    if (typeof this.token !== "function") return;
    const exp = tokenExpiry(token);
    if (exp === undefined) return;
    const left = exp * 1000 - Date.now();
    const delay = Math.max(0, left - Math.min(this.renewBeforeMs, left / 2));
    this.renewTimer = setTimeout(() => void this.renew(ws), delay);
    (this.renewTimer as any).unref?.();  // Node: a pending renewal does not keep the process alive
  }

  // Renews the open socket's token now (a page that was handed a fresh token); the next renewal
  // is scheduled from the new token's expiry. Nothing to do while no socket is open: the next one
  // opens with a fresh token. Rejects with corrald's error (forbidden: another user's token;
  // unauthorized: one that does not verify); the socket keeps its old token then.
  async renewNow(): Promise<void> {
    const ws = this.current;
    if (!ws || this.closed) return;
    const fresh = await resolveToken(this.token);
    await this.op("auth", { token: fresh });
    this.renewals++;
    if (ws === this.current && !this.closed) this.scheduleRenewal(ws, fresh);
  }

  private async renew(ws: WebSocket) {
    this.renewTimer = null;
    if (ws !== this.current || this.closed) return;
    let fresh: string;
    try {
      fresh = await resolveToken(this.token);
      await this.op("auth", { token: fresh });
    } catch {
      // The token function failed, or corrald refused its token: try again shortly; if the old
      // token ends meanwhile, corrald closes the socket and reconnecting takes over.
      if (ws === this.current && !this.closed) {
        this.renewTimer = setTimeout(() => void this.renew(ws), 1000);
        (this.renewTimer as any).unref?.();
      }
      return;
    }
    this.renewals++;
    if (ws === this.current && !this.closed) this.scheduleRenewal(ws, fresh);
  }

  private cancelRenewal() {
    if (this.renewTimer !== null) clearTimeout(this.renewTimer);
    this.renewTimer = null;
  }

  // One message from corrald. Whatever it holds, the socket's routing goes on: a message that
  // does not parse, or whose routing fails (a malformed or hostile daemon), is dropped; an
  // exception thrown into the socket's handler would be uncaught (in Node, the process's end).
  private dispatch(data: unknown) {
    try {
      this.route(data);
    } catch {
      // dropped
    }
  }

  private route(data: unknown) {
    if (typeof data !== "string") {
      if (data instanceof ArrayBuffer) this.onBinary(new Uint8Array(data));
      else if (ArrayBuffer.isView(data)) this.onBinary(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
      return;  // a Blob (a socket not ours to read so) is dropped
    }
    let message: unknown;
    try {
      message = JSON.parse(data);
    } catch {
      return;
    }
    if (!isObject(message)) return;
    const id = message.id;
    if (typeof id === "number" && message.ok !== undefined && this.pending.has(id)) {
      const pending = this.pending.get(id)!;
      this.pending.delete(id);
      if (message.ok) {
        try {
          pending.onResult?.(message.result);
        } catch (error) {
          pending.reject(error instanceof Error ? error : new TypeError(`a malformed reply from corrald`));
          return;
        }
        pending.resolve(message.result);
      } else {
        pending.reject(CorralError.from(message.error));
      }
      return;
    }
    this.onText(message);
  }

  private lost(ws: WebSocket, event: CloseEvent) {
    if (ws !== this.current) return;
    this.cancelRenewal();
    this.current = null;
    this.socket = null;
    const gone = new CorralConnectionError(`the connection to corrald closed (${event.code}${event.reason ? ": " + event.reason : ""})`);
    for (const pending of this.pending.values()) pending.reject(gone);
    this.pending.clear();
    this.onReset();
    if (this.closed || this.subscriptions.size === 0) return;
    if (!this.reconnect.enabled) {
      this.failAll(gone);
      return;
    }
    const reopening = this.reopen();
    this.socket = reopening;
    reopening.then(
      async (reopened) => {
        this.reconnects++;
        for (const subscription of [...this.subscriptions]) {
          try {
            await subscription.resubscribe(this);
          } catch (error) {
            // Dropped again while attaching: the socket's own loss started the next recovery,
            // which attaches every subscription still here, this one included.
            if (error instanceof CorralConnectionError && this.current !== reopened && !this.closed) return;
            this.subscriptions.delete(subscription);
            subscription.fail(error as Error);
          }
        }
      },
      (error) => {
        if (this.socket === reopening) this.socket = null;
        this.failAll(error);
      });
  }

  private async reopen(): Promise<WebSocket> {
    const deadline = Date.now() + this.reconnect.giveUpAfterMs;
    let delay = this.reconnect.initialDelayMs;
    for (;;) {
      await sleep(delay);
      if (this.closed) throw new CorralConnectionError("the client is closed");
      try {
        return await this.open();
      } catch (error) {
        if (Date.now() + delay > deadline) {
          throw new CorralConnectionError(`gave up reconnecting to ${this.url} after ${this.reconnect.giveUpAfterMs} ms`,
                                          { cause: error });
        }
      }
      delay = Math.min(delay * 2, this.reconnect.maxDelayMs);
    }
  }

  private failAll(error: Error) {
    const all = [...this.subscriptions];
    this.subscriptions.clear();
    for (const subscription of all) subscription.fail(error);
  }
}
