"""A sandbox's event log followed live (op `sandbox.watch`): lifecycle, command ends, egress
decisions, rule changes, as they are appended, after what the log already held. Across a
reconnect the watch starts again after the last event seen."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, AsyncIterator

from .channel import Channel
from .models import SandboxEvent

if TYPE_CHECKING:
    from .connection import Connection


class SandboxWatch:
    """`async for event in watch` (SandboxEvent, in order, each once); `await watch.stop()`."""

    def __init__(self, connection: "Connection", sandbox: str, after_seq: int, watches: dict[str, "SandboxWatch"]):
        self.sandbox = sandbox
        self.last_seq = after_seq
        self._connection = connection
        self._watches = watches
        self._events: Channel[SandboxEvent] = Channel()

    async def start(self) -> "SandboxWatch":
        self._watches[self.sandbox] = self
        self._connection.add(self)
        try:
            await self._connection.op("sandbox.watch", {"sandbox": self.sandbox, "after_seq": self.last_seq})
        except BaseException:
            self._forget()
            raise
        return self

    def deliver(self, message: dict[str, Any]) -> None:
        event = SandboxEvent.from_json({k: v for k, v in message.items() if k not in ("event", "sandbox")})
        if event.seq <= self.last_seq:
            return  # a replay of what was seen already
        self.last_seq = event.seq
        self._events.push(event)

    async def resubscribe(self, connection: "Connection") -> None:
        await connection.op("sandbox.watch", {"sandbox": self.sandbox, "after_seq": self.last_seq})

    def fail(self, error: BaseException) -> None:
        self._watches.pop(self.sandbox, None)
        self._events.fail(error)

    def _forget(self) -> None:
        self._connection.remove(self)
        if self._watches.get(self.sandbox) is self:
            del self._watches[self.sandbox]

    def __aiter__(self) -> AsyncIterator[SandboxEvent]:
        return self._events

    async def stop(self) -> None:
        """Stops watching: the iteration ends after what arrived before."""
        self._forget()
        self._events.end()
        try:
            await self._connection.op("sandbox.unwatch", {"sandbox": self.sandbox})
        except Exception:  # noqa: BLE001 - stopped either way
            pass
