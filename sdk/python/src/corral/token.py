"""Minting corrald tokens in the operator's backend: HS256 JWTs, as docs/PROTOCOL.md "Tokens"
describes them, with the standard library only. The issuer's secret is the text that
`corral admin issuer add NAME` printed, used as the HMAC key as written. The output is byte for
byte the TypeScript SDK's `createToken` for the same input (a test mints with both)."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import os
import re
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


_SCOPE = re.compile(r"[A-Za-z0-9_:.-]{1,64}")
_WINDOWS = ("hour", "day", "week", "month")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _utf8(name: str, value: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"create_token: {name} is not valid Unicode (a lone surrogate)") from None


def _identity(name: str, value: Any, max_bytes: int) -> None:
    """corrald's rules for iss and sub: a non-empty string of at most max_bytes UTF-8 bytes, no NUL
    (anything else is any user's own business: spaces, slashes, quotes, any script)."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"create_token: {name} is required (a non-empty string)")
    if len(_utf8(name, value)) > max_bytes:
        raise ValueError(f"create_token: {name} is longer than {max_bytes} bytes")
    if "\0" in value:
        raise ValueError(f"create_token: {name} contains NUL")


def _check_budget(budget: TokenBudget) -> None:
    if budget.window not in _WINDOWS:
        raise ValueError(f"create_token: budget window {budget.window!r} is not hour, day, week or month")
    for name, amount in (("ai_usd", budget.ai_usd), ("compute_seconds", budget.compute_seconds)):
        if amount is None:
            continue
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount) or amount < 0:
            raise ValueError(f"create_token: budget {name} must be a non-negative finite number, not {amount!r}")
    if budget.window_start is not None and (not _is_int(budget.window_start) or budget.window_start < 0):
        raise ValueError("create_token: budget window_start must be unix seconds (a non-negative integer)")


def create_token(*, issuer: str, secret: str, user_id: str, budget: TokenBudget | None = None,
                 scopes: Sequence[str] | None = None, limits: Mapping[str, Any] | None = None, ttl: int = 3600,
                 jti: str | None = None, now: int | None = None) -> str:
    """A token for `user_id`, signed with the issuer's secret (at least 32 bytes).

    scopes: None for the default user scopes (sandboxes exec terminal files sessions secrets).
    limits: the token's caps as the protocol names them ("sandboxes", "memory_bytes", "images", ...).
    ttl: seconds (corrald refuses more than its auth.max_token_lifetime). jti: the token's id,
    which `corral admin token revoke` names (random by default). now: unix seconds, for tests.
    """
    _identity("issuer", issuer, 128)
    _identity("user_id", user_id, 256)
    if not isinstance(secret, str) or not secret or len(_utf8("secret", secret)) < 32:
        raise ValueError("create_token: the secret must be at least 32 bytes")
    if not _is_int(ttl) or ttl <= 0:
        raise ValueError("create_token: ttl must be a positive number of seconds")
    if now is not None and (not _is_int(now) or now < 0):
        raise ValueError("create_token: now must be unix seconds (a non-negative integer)")
    if jti is not None and (not isinstance(jti, str) or not jti):
        raise ValueError("create_token: jti must be a non-empty string")
    if scopes is not None:
        if isinstance(scopes, str):
            raise ValueError('create_token: scopes is a list of names (["sandboxes", "exec"]), not a string')
        for scope in scopes:
            if not isinstance(scope, str) or not _SCOPE.fullmatch(scope):
                raise ValueError(f"create_token: {scope!r} is not a scope name (letters, digits, _ : - only)")
    if budget is not None:
        _check_budget(budget)
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
    token = f"{head}.{body}.{_b64url(signature)}"
    if len(token) > 8192:
        raise ValueError("create_token: the token is longer than corrald takes (8192 bytes): fewer limits or scopes")
    return token


def token_expiry(token: str) -> int | None:
    """The `exp` claim of a JWT (unix seconds), read without verifying it; None when absent."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        exp = claims.get("exp")
        return int(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else None
    except (IndexError, ValueError, AttributeError):
        return None
