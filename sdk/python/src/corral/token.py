"""Minting corrald tokens in the operator's backend: HS256 JWTs, as docs/PROTOCOL.md "Tokens"
describes them, with the standard library only. The issuer's secret is the text that
`corral admin issuer add NAME` printed, used as the HMAC key as written. The output is byte for
byte the TypeScript SDK's `createToken` for the same input (a test mints with both)."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

BudgetWindow = Literal["hour", "day", "week", "month"]


@dataclass(frozen=True)
class TokenBudget:
    """What the user may spend per window: `ai_usd` on model calls (None: no model calls),
    `compute_seconds` of CPU in their sandboxes (None: not limited)."""
    window: BudgetWindow
    ai_usd: float | None = None
    compute_seconds: float | None = None
    window_start: int | None = None  # unix seconds: windows follow each other from it


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _json(value: Any) -> bytes:
    # JavaScript's JSON.stringify: no spaces, non-ASCII as UTF-8, integral floats without ".0".
    return json.dumps(_js_numbers(value), separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def _js_numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _js_numbers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_js_numbers(v) for v in value]
    return value


def create_token(*, issuer: str, secret: str, user_id: str, budget: TokenBudget | None = None,
                 scopes: Sequence[str] | None = None, limits: Mapping[str, Any] | None = None, ttl: int = 3600,
                 jti: str | None = None, now: int | None = None) -> str:
    """A token for `user_id`, signed with the issuer's secret (at least 32 bytes).

    scopes: None for the default user scopes (sandboxes exec terminal files sessions secrets).
    limits: the token's caps as the protocol names them ("sandboxes", "memory_bytes", "images", ...).
    ttl: seconds (corrald refuses more than its auth.max_token_lifetime). jti: the token's id,
    which `corral admin token revoke` names (random by default). now: unix seconds, for tests.
    """
    if not issuer:
        raise ValueError("create_token: issuer is required")
    if not user_id:
        raise ValueError("create_token: user_id is required")
    if not secret or len(secret.encode("utf-8")) < 32:
        raise ValueError("create_token: the secret must be at least 32 bytes")
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
        raise ValueError("create_token: ttl must be a positive number of seconds")
    now = int(time.time()) if now is None else now
    payload: dict[str, Any] = {"iss": issuer, "sub": user_id, "iat": now, "exp": now + ttl,
                               "jti": jti if jti is not None else _b64url(os.urandom(16))}
    if scopes is not None:
        payload["scope"] = " ".join(scopes)
    if limits is not None:
        payload["limits"] = dict(limits)
    if budget is not None:
        claim: dict[str, Any] = {"window": budget.window}
        if budget.ai_usd is not None:
            claim["ai_usd"] = budget.ai_usd
        if budget.compute_seconds is not None:
            claim["compute_s"] = budget.compute_seconds
        if budget.window_start is not None:
            claim["window_start"] = budget.window_start
        payload["budget"] = claim
    head = _b64url(_json({"alg": "HS256", "typ": "JWT"}))
    body = _b64url(_json(payload))
    signature = hmac.new(secret.encode("utf-8"), f"{head}.{body}".encode("ascii"), hashlib.sha256).digest()
    return f"{head}.{body}.{_b64url(signature)}"


def token_expiry(token: str) -> int | None:
    """The `exp` claim of a JWT (unix seconds), read without verifying it; None when absent."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        exp = claims.get("exp")
        return int(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else None
    except (IndexError, ValueError, AttributeError):
        return None
