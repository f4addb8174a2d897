// Checking corrald's webhooks in the operator's receiver (Node only: node:crypto), as
// docs/PROTOCOL.md "Webhooks" describes them: Corral-Signature is
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>". verifyWebhook checks the MAC
// over the raw body bytes (before any JSON parsing: a body changed under the same signature fails)
// and that t is within toleranceSeconds of now (a delivery replayed later fails), then returns the
// parsed event. Deduplicate by its id (Corral-Webhook-Id): delivery is at least once.
import { createHmac, timingSafeEqual } from "node:crypto";

export type WebhookEventType =
  | "sandbox.created"
  | "sandbox.started"
  | "sandbox.stopped"
  | "sandbox.destroyed"
  | "session.ended"
  | "execution.finished"
  | "budget.exhausted";

export interface WebhookEvent {
  id: string;             // "wh_...": the same on every retry
  type: WebhookEventType;
  created_at: number;     // unix seconds
  node: string;           // the node that recorded it
  iss: string;
  sub: string;
  sandbox_id: string;     // "" for a user's event (budget.exhausted may name one)
  data: Record<string, unknown>;  // per type: docs/PROTOCOL.md "Webhooks"
}

export type WebhookFailure = "malformed" | "signature" | "timestamp";

export class WebhookVerificationError extends Error {
  constructor(readonly reason: WebhookFailure, message: string) {
    super(message);
    this.name = "WebhookVerificationError";
  }
}

// The request's headers (a fetch Headers, or Node's IncomingHttpHeaders), or the
// Corral-Signature value itself.
export type WebhookHeaders =
  | string
  | { get(name: string): string | null }
  | Record<string, string | string[] | undefined>;

export interface VerifyWebhookOptions {
  toleranceSeconds?: number;  // default 300
  now?: number;               // unix seconds, for tests
}

function signatureOf(headers: WebhookHeaders): string | undefined {
  if (typeof headers === "string") return headers;
  if (typeof (headers as { get?: unknown }).get === "function") {
    return (headers as { get(name: string): string | null }).get("corral-signature") ?? undefined;
  }
  const record = headers as Record<string, string | string[] | undefined>;
  const key = Object.keys(record).find((name) => name.toLowerCase() === "corral-signature");
  const value = key === undefined ? undefined : record[key];
  return Array.isArray(value) ? value[0] : value;
}

export function verifyWebhook(secret: string | Buffer, headers: WebhookHeaders, rawBody: string | Buffer,
                              options: VerifyWebhookOptions = {}): WebhookEvent {
  const tolerance = options.toleranceSeconds ?? 300;
  const signature = signatureOf(headers);
  if (!signature) throw new WebhookVerificationError("malformed", "no Corral-Signature header");
  let t: string | undefined;
  const macs: string[] = [];
  for (const part of signature.split(",")) {
    const at = part.indexOf("=");
    if (at < 0) continue;
    const [key, value] = [part.slice(0, at).trim(), part.slice(at + 1).trim()];
    if (key === "t") t = value;
    else if (key === "v1") macs.push(value);
  }
  if (t === undefined || !/^\d+$/.test(t) || macs.length === 0) {
    throw new WebhookVerificationError("malformed", "Corral-Signature is not t=<seconds>,v1=<hex>");
  }
  const body = Buffer.isBuffer(rawBody) ? rawBody : Buffer.from(rawBody, "utf8");
  const expected = createHmac("sha256", secret).update(`${t}.`).update(body).digest();
  const matches = macs.some((mac) => {
    const given = Buffer.from(mac, "hex");
    return given.length === expected.length && /^[0-9a-f]+$/i.test(mac) && timingSafeEqual(given, expected);
  });
  if (!matches) throw new WebhookVerificationError("signature", "the signature does not match the body");
  const now = options.now ?? Math.floor(Date.now() / 1000);
  if (Math.abs(now - Number(t)) > tolerance) {
    throw new WebhookVerificationError("timestamp", `the timestamp is more than ${tolerance} s from now`);
  }
  return JSON.parse(body.toString("utf8")) as WebhookEvent;
}
