// Every error corrald answers carries a stable code (docs/PROTOCOL.md, "Errors"); the SDK throws
// it as a CorralError whose `code` is that string, so callers branch on codes, not messages.

export type ErrorCode =
  | "bad_request" | "unauthorized" | "forbidden" | "not_found" | "conflict" | "payload_too_large"
  | "limit_exceeded" | "rate_limited" | "budget_exhausted" | "stream_gap" | "bad_gateway" | "unsupported"
  | "unavailable" | "internal";

export class CorralError extends Error {
  readonly code: ErrorCode | string;
  readonly status: number | undefined;      // the HTTP status, for HTTP requests
  readonly requestId: string | undefined;   // X-Request-Id, to quote to the operator
  readonly details: Record<string, unknown>; // the error's other fields, e.g. `first_seq` of a stream_gap

  constructor(code: string, message: string, status?: number, requestId?: string, details: Record<string, unknown> = {}) {
    super(message);
    this.name = "CorralError";
    this.code = code;
    this.status = status;
    this.requestId = requestId;
    this.details = details;
  }

  // From the protocol's error object {"code", "message", ...}; a code or message that is no
  // string (a malformed answer) is "internal" or a generic message.
  static from(error: unknown, status?: number, requestId?: string): CorralError {
    const { code, message, ...details } = typeof error === "object" && error !== null && !Array.isArray(error) ? error as any : {} as any;
    return new CorralError(typeof code === "string" ? code : "internal",
                           typeof message === "string" ? message : status ? `HTTP ${status}` : "failed", status, requestId, details);
  }
}

// The connection to corrald failed or closed (not an answer from it).
export class CorralConnectionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "CorralConnectionError";
  }
}
