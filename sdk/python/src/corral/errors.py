"""Every error corrald answers carries a stable code (docs/PROTOCOL.md, "Errors"); the SDK raises
it as a CorralError whose `code` is that string, so callers branch on codes, not messages."""
from __future__ import annotations

from typing import Any, Literal

ErrorCode = Literal["bad_request", "unauthorized", "forbidden", "not_found", "conflict", "payload_too_large",
                    "limit_exceeded", "rate_limited", "budget_exhausted", "stream_gap", "bad_gateway", "unsupported",
                    "unavailable", "internal"]


class CorralError(Exception):
    """An answer of corrald's that is an error: `code` is the protocol's (ErrorCode), `status`
    the HTTP status (None over the WebSocket), `request_id` the X-Request-Id to quote to the
    operator, `details` the error's other fields (e.g. `first_seq` of a stream_gap)."""

    def __init__(self, code: str, message: str, status: int | None = None, request_id: str | None = None,
                 details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.request_id = request_id
        self.details = details or {}

    @classmethod
    def from_error(cls, error: Any, status: int | None = None, request_id: str | None = None) -> "CorralError":
        """From the protocol's error object {"code", "message", ...}."""
        fields = dict(error) if isinstance(error, dict) else {}
        code = fields.pop("code", None) or "internal"
        message = fields.pop("message", None) or (f"HTTP {status}" if status else "failed")
        return cls(str(code), str(message), status, request_id, fields)

    def __repr__(self) -> str:
        return f"CorralError({self.code!r}, {self.message!r}, status={self.status!r})"


class CorralConnectionError(Exception):
    """The connection to corrald failed or closed (not an answer from it)."""
