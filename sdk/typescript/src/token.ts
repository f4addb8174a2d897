// Minting corrald tokens in the operator's backend (Node only: node:crypto). HS256 JWTs, as
// docs/PROTOCOL.md "Tokens" describes them; the issuer's secret is the text that
// `corral admin issuer add NAME` printed, used as the HMAC key as written.
import { createHmac, randomBytes } from "node:crypto";

export type BudgetWindow = "hour" | "day" | "week" | "month";

export interface TokenBudget {
  aiUsd?: number;           // model spend per window; absent: no model calls
  computeSeconds?: number;  // CPU-seconds of the user's sandboxes per window; absent: not limited
  window: BudgetWindow;
  windowStart?: number;     // unix seconds: windows follow each other from it
}

// The token's caps (docs/PROTOCOL.md "Tokens"); other keys of the protocol pass through as given.
export interface TokenLimits {
  sandboxes?: number;
  memory_bytes?: number;
  cpus?: number;
  pids?: number;
  disk_bytes?: number;
  idle_timeout_s?: number;
  commands?: number;
  sessions?: number;
  egress?: { domains?: string[]; ports?: number[]; cidrs?: string[] };
  // The images the user may create sandboxes of: names ("python:3.12", "host"), a trailing "*"
  // matching any rest ("python:*"); at most 64. Absent: any image; []: none.
  images?: string[];
  [key: string]: unknown;
}

export interface CreateTokenOptions {
  issuer: string;
  secret: string;
  userId: string;
  budget?: TokenBudget;
  scopes?: string[];        // absent: the default user scopes (sandboxes exec terminal files sessions)
  limits?: TokenLimits;     // the token's caps, as in the protocol ("sandboxes", "memory_bytes", "images", ...)
  ttl?: number;             // seconds, default 3600 (corrald refuses more than auth.max_token_lifetime)
  jti?: string;             // the token's id, which `corral admin token revoke` names; default: random
  now?: number;             // unix seconds, for tests
}

const b64url = (data: string | Buffer) => Buffer.from(data).toString("base64url");

export function createToken(options: CreateTokenOptions): string {
  const { issuer, secret, userId } = options;
  if (!issuer) throw new TypeError("createToken: issuer is required");
  if (!userId) throw new TypeError("createToken: userId is required");
  if (!secret || Buffer.byteLength(secret) < 32) throw new TypeError("createToken: the secret must be at least 32 bytes");
  const ttl = options.ttl ?? 3600;
  if (!Number.isInteger(ttl) || ttl <= 0) throw new TypeError("createToken: ttl must be a positive number of seconds");
  const now = options.now ?? Math.floor(Date.now() / 1000);
  const jti = options.jti ?? randomBytes(16).toString("base64url");
  const payload: Record<string, unknown> = { iss: issuer, sub: userId, iat: now, exp: now + ttl, jti };
  if (options.scopes) payload.scope = options.scopes.join(" ");
  if (options.limits) payload.limits = options.limits;
  if (options.budget) {
    const { aiUsd, computeSeconds, window, windowStart } = options.budget;
    payload.budget = {
      window,
      ...(aiUsd !== undefined && { ai_usd: aiUsd }),
      ...(computeSeconds !== undefined && { compute_s: computeSeconds }),
      ...(windowStart !== undefined && { window_start: windowStart }),
    };
  }
  const head = b64url(JSON.stringify({ alg: "HS256", typ: "JWT" }));
  const body = b64url(JSON.stringify(payload));
  const signature = createHmac("sha256", secret).update(`${head}.${body}`).digest("base64url");
  return `${head}.${body}.${signature}`;
}
