// Every error corrald answers carries a stable code (docs/PROTOCOL.md, "Errors"); the SDK throws
// it as a CorralError whose `code` is that string, so callers branch on codes, not messages.

export type ErrorCode =
  | "bad_request" | "unauthorized" | "forbidden" | "not_found" | "conflict" | "payload_too_large"
  | "limit_exceeded" | "rate_limited" | "budget_exhausted" | "stream_gap" | "unsupported"
  | "unavailable" | "internal";

export class CorralError extends Error {
  readonly code: ErrorCode | string;
  readonly status: number | undefined;      // the HTTP status, for HTTP requests
  readonly requestId: string | undefined;   // X-Request-Id, to quote to the operator

  constructor(code: string, message: string, status?: number, requestId?: string) {
    super(message);
    this.name = "CorralError";
    this.code = code;
    this.status = status;
    this.requestId = requestId;
  }
}

// The connection to corrald failed or closed (not an answer from it).
export class CorralConnectionError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "CorralConnectionError";
  }
}
