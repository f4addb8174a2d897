"""The HTTP side of a client: requests with the token, answers as JSON or bytes, errors as
CorralError with the API's code, the HTTP status and the request id."""
from __future__ import annotations

import json
from typing import Any, Mapping
from urllib.parse import quote, urlencode

import httpx

from .connection import TokenSource, resolve_token
from .errors import CorralConnectionError, CorralError


def enc(segment: str) -> str:
    """A path segment, escaped as JavaScript's encodeURIComponent does."""
    return quote(str(segment), safe="-_.!~*'()")


def query(params: Mapping[str, Any]) -> str:
    present = {k: ("true" if v is True else "false" if v is False else str(v)) for k, v in params.items() if v is not None}
    return "?" + urlencode(present) if present else ""


class HttpApi:
    """The base of AsyncCorral: corrald's address, the token source and an httpx client."""

    def __init__(self, base: str, token: TokenSource, http: httpx.AsyncClient | None, timeout: float):
        self.base = base
        self._token = token
        self._own_http = http is None
        self._http = http or httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0))

    async def _send(self, method: str, path: str, content: bytes | None = None,
                    content_type: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {await resolve_token(self._token)}"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        try:
            response = await self._http.request(method, self.base + path, content=content, headers=headers)
        except httpx.TransportError as error:
            raise CorralConnectionError(f"{method} {path}: cannot reach corrald at {self.base}: {error}") from error
        if response.status_code >= 400:
            text = response.text
            try:
                answer = json.loads(text)["error"]
            except (ValueError, KeyError, TypeError):
                answer = {"message": text or f"HTTP {response.status_code}"}
            raise CorralError.from_error(answer, response.status_code, response.headers.get("X-Request-Id"))
        return response

    async def _request(self, method: str, path: str, body: Any = None) -> Any:
        content = None if body is None else json.dumps(body).encode("utf-8")
        response = await self._send(method, path, content, None if body is None else "application/json")
        return response.json() if response.content else None

    async def _close_http(self) -> None:
        if self._own_http:
            await self._http.aclose()
