"""One WebSocket to corrald (`/v1/ws`, subprotocol corral.v1) shared by a client's commands and
sessions: requests with ids and their replies, events routed by the client, reconnection, and
token renewal. When the socket closes while something is subscribed (a command's output, a
session's events), it is opened again with backoff and every subscription attaches again from the
last sequence number it saw, so nothing is lost or seen twice while the daemon still holds it."""
from __future__ import annotations

import asyncio
import inspect
import json
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Coroutine, Protocol, Union

import websockets.client
from websockets.typing import Subprotocol
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatusCode

from .errors import CorralConnectionError, CorralError
from .token import token_expiry

TokenSource = Union[str, Callable[[], Union[str, Awaitable[str]]]]

# When to renew an open connection's token: this long before it expires (or halfway through a
# shorter lifetime). Only a function as the token source can renew; a fixed token's connection
# is closed by corrald at its expiry (close code 1008) and cannot reconnect with it.
DEFAULT_RENEW_BEFORE = 60.0


@dataclass(frozen=True)
class ReconnectOptions:
    enabled: bool = True
    initial_delay: float = 0.1   # seconds; doubles after each failed attempt
    max_delay: float = 5.0
    give_up_after: float = 60.0  # then every subscription fails with CorralConnectionError


class Subscription(Protocol):
    """Something that lives across reconnects: a followed command or session."""

    async def resubscribe(self, connection: "Connection") -> None:
        """The socket was opened again: attach again from the last event seen."""

    def fail(self, error: BaseException) -> None:
        """The connection is gone for good (closed by the client, or reconnecting gave up)."""


async def resolve_token(token: TokenSource) -> str:
    if callable(token):
        value = token()
        if inspect.isawaitable(value):
            value = await value
        return str(value)
    return token


class Connection:
    def __init__(self, url: str, token: TokenSource, reconnect: ReconnectOptions | None = None,
                 renew_before: float = DEFAULT_RENEW_BEFORE):
        self.url = url
        self.reconnects = 0          # how many times the socket was opened again
        self.renewals = 0            # how many times the open socket's token was renewed (op auth)
        self.on_text: Callable[[dict[str, Any]], None] = lambda message: None
        self.on_binary: Callable[[bytes], None] = lambda data: None
        self.on_reset: Callable[[], None] = lambda: None  # the socket closed: per-socket state (channels) is void
        self._token = token
        self._reconnect = reconnect or ReconnectOptions()
        self._renew_before = renew_before
        self._opening: asyncio.Future[Any] | None = None
        self._current: Any = None
        self._next_id = 1
        self._closed = False
        self._pending: dict[int, tuple[asyncio.Future[Any], Callable[[Any], None] | None]] = {}
        self._subscriptions: dict[Subscription, None] = {}  # an ordered set
        self._renew_timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def connected(self) -> bool:
        return self._current is not None

    def add(self, subscription: Subscription) -> None:
        self._subscriptions[subscription] = None

    def remove(self, subscription: Subscription) -> None:
        self._subscriptions.pop(subscription, None)

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Runs a coroutine in the background, keeping a reference until it ends."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def op(self, op: str, fields: dict[str, Any], on_result: Callable[[Any], None] | None = None) -> Any:
        """A request and its reply. `on_result` runs as the reply is read, before any message
        that follows it: whoever routes the reply's events registers there."""
        if self._closed:
            raise CorralConnectionError("the client is closed")
        ws = await self._ready()
        request_id = self._next_id
        self._next_id += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = (future, on_result)
        try:
            await ws.send(json.dumps({"id": request_id, "op": op, **fields}))
        except ConnectionClosed as error:
            self._pending.pop(request_id, None)
            raise CorralConnectionError(f"{op}: the connection to corrald is closed") from error
        return await future

    async def send_binary(self, data: bytes) -> None:
        if self._current is not None:
            await self._current.send(data)

    async def drop(self) -> None:
        """Closes the socket as if the network had (for tests of reconnection): subscriptions resume."""
        if self._current is not None:
            await self._current.close(4000, "dropped by the client")

    async def close(self) -> None:
        self._closed = True
        self._cancel_renewal()
        ws, self._current, self._opening = self._current, None, None
        if ws is not None:
            await ws.close(1000)
        self._fail_pending(CorralConnectionError("the client is closed"))
        self._fail_all(CorralConnectionError("the client is closed"))
        for task in list(self._tasks):
            task.cancel()

    # ---- the socket ----

    async def _ready(self) -> Any:
        if self._current is not None and self._opening is None:
            return self._current
        if self._opening is None:
            opening = asyncio.ensure_future(self._open())
            self._opening = opening

            def forget(done: asyncio.Future[Any]) -> None:
                if self._opening is done:
                    self._opening = None
                if not done.cancelled():
                    done.exception()  # retrieved: whoever awaits it reports it
            opening.add_done_callback(forget)
        return await asyncio.shield(self._opening)

    async def _open(self) -> Any:
        token = await resolve_token(self._token)
        try:
            ws = await websockets.client.connect(self.url, subprotocols=[Subprotocol("corral.v1"), Subprotocol(f"bearer.{token}")],
                                                 max_size=4 << 20, compression=None, open_timeout=10)
        except InvalidStatusCode as error:
            raise CorralConnectionError(f"cannot open {self.url} (HTTP {error.status_code})") from error
        except (OSError, InvalidHandshake, asyncio.TimeoutError) as error:
            raise CorralConnectionError(f"cannot open {self.url}: {error}") from error
        if self._closed:
            await ws.close(1000)
            raise CorralConnectionError("the client is closed")
        self._current = ws
        self.spawn(self._read(ws))
        self._schedule_renewal(ws, token)
        return ws

    async def _read(self, ws: Any) -> None:
        try:
            async for message in ws:
                self._dispatch(message)
        except ConnectionClosed:
            pass
        finally:
            self._lost(ws)

    def _dispatch(self, data: str | bytes) -> None:
        """One message from corrald. Whatever it holds, the reader goes on: a message that does
        not parse, or whose routing fails (a malformed or hostile daemon), is dropped."""
        try:
            self._route(data)
        except Exception:  # noqa: BLE001 - one bad message must not end the reader (and every stream with it)
            pass

    def _route(self, data: str | bytes) -> None:
        if isinstance(data, bytes):
            self.on_binary(data)
            return
        try:
            message = json.loads(data)
        except (ValueError, RecursionError):
            return
        if not isinstance(message, dict):
            return
        request_id = message.get("id")
        if type(request_id) is int and "ok" in message and request_id in self._pending:
            future, on_result = self._pending.pop(request_id)
            if future.done():
                return
            if message["ok"]:
                result = message.get("result")
                if on_result is not None:
                    try:
                        on_result(result)
                    except Exception as error:  # noqa: BLE001 - the caller's routing failed: its op fails
                        future.set_exception(error)
                        return
                future.set_result(result)
            else:
                future.set_exception(CorralError.from_error(message.get("error")))
            return
        self.on_text(message)

    def _lost(self, ws: Any) -> None:
        if ws is not self._current:
            return
        self._cancel_renewal()
        self._current = None
        self._opening = None
        reason = f": {ws.close_reason}" if ws.close_reason else ""
        gone = CorralConnectionError(f"the connection to corrald closed ({ws.close_code}{reason})")
        self._fail_pending(gone)
        self.on_reset()
        if self._closed or not self._subscriptions:
            return
        if not self._reconnect.enabled:
            self._fail_all(gone)
            return
        reopening = asyncio.ensure_future(self._reopen())
        self._opening = reopening
        self.spawn(self._recover(reopening))

    async def _recover(self, reopening: asyncio.Future[Any]) -> None:
        try:
            ws = await reopening
        except Exception as error:  # noqa: BLE001 - gave up, or closed: every stream fails with it
            if self._opening is reopening:
                self._opening = None
            self._fail_all(error)
            return
        if self._opening is reopening:
            self._opening = None
        self.reconnects += 1
        for subscription in list(self._subscriptions):
            try:
                await subscription.resubscribe(self)
            except CorralConnectionError:
                if self._current is not ws and not self._closed:
                    return  # dropped again meanwhile: the next recovery attaches everything
                self._subscriptions.pop(subscription, None)
                subscription.fail(CorralConnectionError("the connection to corrald closed while attaching again"))
            except Exception as error:  # noqa: BLE001 - corrald refused the attach: that stream fails
                self._subscriptions.pop(subscription, None)
                subscription.fail(error)

    async def _reopen(self) -> Any:
        options = self._reconnect
        deadline = time.monotonic() + options.give_up_after
        delay = options.initial_delay
        while True:
            await asyncio.sleep(delay)
            if self._closed:
                raise CorralConnectionError("the client is closed")
            try:
                return await self._open()
            except CorralConnectionError as error:
                if time.monotonic() + delay > deadline:
                    raise CorralConnectionError(
                        f"gave up reconnecting to {self.url} after {options.give_up_after} s") from error
            delay = min(delay * 2, options.max_delay)

    def _fail_pending(self, error: BaseException) -> None:
        pending, self._pending = self._pending, {}
        for future, _ in pending.values():
            if not future.done():
                future.set_exception(error)

    def _fail_all(self, error: BaseException) -> None:
        subscriptions = list(self._subscriptions)
        self._subscriptions.clear()
        for subscription in subscriptions:
            subscription.fail(error)

    # ---- token renewal ----

    def _schedule_renewal(self, ws: Any, token: str) -> None:
        """Before the token ends, a fresh one from the token function goes to corrald on the open
        socket (op auth): the connection, and everything attached to it, stays as it is."""
        self._cancel_renewal()
        if not callable(self._token):
            return
        exp = token_expiry(token)
        if exp is None:
            return
        left = exp - time.time()
        delay = max(0.0, left - min(self._renew_before, left / 2))
        self._renew_timer = asyncio.get_running_loop().call_later(delay, lambda: self.spawn(self._renew(ws)))

    def _cancel_renewal(self) -> None:
        if self._renew_timer is not None:
            self._renew_timer.cancel()
        self._renew_timer = None

    async def renew_now(self) -> None:
        """Renews the open socket's token now; the next renewal is scheduled from the new token's
        expiry. Nothing to do while no socket is open: the next one opens with a fresh token.
        Raises corrald's error (forbidden: another user's token; unauthorized: one that does not
        verify); the socket keeps its old token then."""
        ws = self._current
        if ws is None or self._closed:
            return
        fresh = await resolve_token(self._token)
        await self.op("auth", {"token": fresh})
        self.renewals += 1
        if ws is self._current and not self._closed:
            self._schedule_renewal(ws, fresh)

    async def _renew(self, ws: Any) -> None:
        self._renew_timer = None
        if ws is not self._current or self._closed:
            return
        try:
            fresh = await resolve_token(self._token)
            await self.op("auth", {"token": fresh})
        except Exception:  # noqa: BLE001 - try again shortly; if the old token ends, reconnecting takes over
            if ws is self._current and not self._closed:
                self._renew_timer = asyncio.get_running_loop().call_later(1.0, lambda: self.spawn(self._renew(ws)))
            return
        self.renewals += 1
        if ws is self._current and not self._closed:
            self._schedule_renewal(ws, fresh)
