"""Checking corrald's webhooks in the operator's receiver, as docs/PROTOCOL.md "Webhooks"
describes them: Corral-Signature is "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>".
verify_webhook checks the MAC over the raw body bytes (before any JSON parsing: a body changed
under the same signature fails) and that t is within tolerance_seconds of now (a delivery replayed
later fails), then returns the parsed event. Deduplicate by its id (Corral-Webhook-Id): delivery
is at least once."""
from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from typing import Any, Literal, Mapping

WebhookFailure = Literal["malformed", "signature", "timestamp"]


class WebhookVerificationError(Exception):
    """`reason`: "malformed" (no or a bad header), "signature" (a changed body, another secret),
    "timestamp" (outside the window: a replay)."""

    def __init__(self, reason: WebhookFailure, message: str):
        super().__init__(message)
        self.reason = reason


def _signature_of(headers: str | Mapping[str, Any]) -> str | None:
    if isinstance(headers, str):
        return headers
    getter = getattr(headers, "get", None)
    value = None
    # A case-insensitive mapping (httpx, starlette, aiohttp, email.message) answers any case.
    if callable(getter):
        value = getter("corral-signature") or getter("Corral-Signature")
    if value is None:
        for name in headers:
            if isinstance(name, str) and name.lower() == "corral-signature":
                value = headers[name]
                break
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return value if isinstance(value, str) else None


def verify_webhook(secret: str | bytes, headers: str | Mapping[str, Any], raw_body: str | bytes,
                   tolerance_seconds: int = 300, now: int | None = None) -> dict[str, Any]:
    """The event of a delivery whose signature checks out; raises WebhookVerificationError.

    headers: the request's headers (any mapping) or the Corral-Signature value itself.
    raw_body: the body as received, before any parsing. now: unix seconds, for tests.
    """
    signature = _signature_of(headers)
    if not signature:
        raise WebhookVerificationError("malformed", "no Corral-Signature header")
    t: str | None = None
    macs: list[str] = []
    for part in signature.split(","):
        key, sep, value = part.partition("=")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "t":
            t = value
        elif key == "v1":
            macs.append(value)
    if t is None or not re.fullmatch(r"[0-9]+", t) or not macs:
        raise WebhookVerificationError("malformed", "Corral-Signature is not t=<seconds>,v1=<hex>")
    body = raw_body.encode("utf-8") if isinstance(raw_body, str) else bytes(raw_body)
    key_bytes = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    expected = hmac.new(key_bytes, t.encode("ascii") + b"." + body, hashlib.sha256).hexdigest()
    if not any(re.fullmatch(r"[0-9a-fA-F]{64}", mac) and hmac.compare_digest(mac.lower(), expected) for mac in macs):
        raise WebhookVerificationError("signature", "the signature does not match the body")
    current = int(time.time()) if now is None else now
    if abs(current - int(t)) > tolerance_seconds:
        raise WebhookVerificationError("timestamp", f"the timestamp is more than {tolerance_seconds} s from now")
    event = json.loads(body.decode("utf-8"))
    if not isinstance(event, dict):
        raise WebhookVerificationError("malformed", "the body is not a JSON object")
    return event
