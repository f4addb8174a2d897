"""Commands: a running command's handle (its output as an async iterator and as callbacks, its
outcome, stdin, signals, a PTY's size) and the stream that follows it across reconnects."""
from __future__ import annotations

import asyncio
import base64
import inspect
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Union

from .channel import Channel
from .errors import CorralError
from .models import Gap, Outcome, OutputChunk

if TYPE_CHECKING:
    from .connection import Connection

OutputCallback = Callable[[OutputChunk], Union[None, Awaitable[None]]]


class CommandStream:
    """A command this client follows: its output by channel (per socket), its end by id."""

    def __init__(self, command_id: str, router: "CommandRouter", on_output: OutputCallback | None = None):
        self.id = command_id
        self.last_seq = 0
        self.channel = 0
        self.output: Channel[OutputChunk] = Channel()
        self.gaps: list[Gap] = []
        self.outcome: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self.outcome.add_done_callback(lambda f: f.cancelled() or f.exception())  # observed through the handle
        self._router = router
        self._on_output = on_output

    async def resubscribe(self, connection: "Connection") -> None:
        try:
            await connection.op("attach", {"command": self.id, "after_seq": self.last_seq}, self._route)
        except CorralError as error:
            first = error.details.get("first_seq")
            if error.code != "stream_gap" or not isinstance(first, int) or first <= 0:
                raise
            self.gaps.append(Gap(self.last_seq + 1, first - 1))
            await connection.op("attach", {"command": self.id, "after_seq": first - 1}, self._route)

    def _route(self, reply: dict[str, Any]) -> None:
        self.channel = int(reply["channel"])
        self._router.channels[self.channel] = self

    def fail(self, error: BaseException) -> None:
        self.output.fail(error)
        if not self.outcome.done():
            self.outcome.set_exception(error)
        self._router.commands.pop(self.id, None)

    def chunk(self, fd: int, seq: int, data: bytes) -> None:
        if seq <= self.last_seq:
            return  # a replay of what was seen already
        self.last_seq = seq
        item = OutputChunk(fd, seq, data)
        self.output.push(item)
        if self._on_output is not None:
            try:
                result = self._on_output(item)
                if inspect.isawaitable(result):
                    self._router.connection.spawn(_quietly(result))
            except Exception:  # noqa: BLE001 - a callback's error is its own
                pass

    def exit(self, seq: int, outcome: Outcome) -> None:
        if seq:
            self.last_seq = seq
        self.output.end()
        if not self.outcome.done():
            self.outcome.set_result(outcome)


async def _quietly(awaitable: Awaitable[Any]) -> None:
    try:
        await awaitable
    except Exception:  # noqa: BLE001 - a callback's error is its own
        pass


class CommandRouter:
    """The client's table of followed commands: binary frames by channel, `exit` events by id."""

    def __init__(self, connection: "Connection"):
        self.connection = connection
        self.channels: dict[int, CommandStream] = {}
        self.commands: dict[str, CommandStream] = {}

    def frame(self, data: bytes) -> None:
        # byte 0: 1 (output), byte 1: fd, bytes 2-5: channel (u32 BE), bytes 6-13: seq (u64 BE), then data
        if len(data) < 14 or data[0] != 1:
            return
        stream = self.channels.get(int.from_bytes(data[2:6], "big"))
        if stream is not None:
            stream.chunk(data[1], int.from_bytes(data[6:14], "big"), bytes(data[14:]))

    def exit_event(self, message: dict[str, Any]) -> None:
        stream = self.commands.get(str(message.get("command")))
        if stream is None:
            return
        seq = message.get("seq")
        outcome = message.get("outcome")
        ended = Outcome.from_json(outcome if isinstance(outcome, dict) and outcome.get("outcome") else {"outcome": "unknown"})
        del self.commands[stream.id]
        self.connection.remove(stream)
        if self.channels.get(stream.channel) is stream:
            del self.channels[stream.channel]
        stream.exit(seq if type(seq) is int and seq > 0 else 0, ended)

    def route(self, command_id: str, channel: int, after_seq: int = 0,
              on_output: OutputCallback | None = None) -> CommandStream:
        """Routes a command's frames and end to a new stream, as its exec or attach reply is read."""
        stream = CommandStream(command_id, self, on_output)
        stream.channel = channel
        stream.last_seq = after_seq
        self.channels[channel] = stream
        self.commands[command_id] = stream
        self.connection.add(stream)
        return stream

    def reset(self) -> None:
        self.channels.clear()


class Command:
    """A running command: `async for chunk in command` (or command.output) as it is written,
    `await command.wait()` for its outcome; stdin, signals and a PTY's size."""

    def __init__(self, stream: CommandStream, router: CommandRouter, first_seq: int = 0, state: str = "running"):
        self._stream = stream
        self._router = router
        self.first_seq = first_seq   # attach: the oldest event the daemon still held
        self.state = state           # attach: running | exited, as the daemon said then

    @property
    def id(self) -> str:
        return self._stream.id

    @property
    def output(self) -> AsyncIterator[OutputChunk]:
        return self._stream.output

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        return self._stream.output

    @property
    def outcome(self) -> "asyncio.Future[Outcome]":
        return self._stream.outcome

    @property
    def last_seq(self) -> int:
        return self._stream.last_seq

    @property
    def gaps(self) -> list[Gap]:
        """Output the daemon no longer held when this client attached again (seq ranges skipped)."""
        return self._stream.gaps

    async def wait(self) -> Outcome:
        return await asyncio.shield(self._stream.outcome)

    async def _op(self, name: str, **fields: Any) -> None:
        await self._router.connection.op(name, {"command": self.id, **fields})

    async def write(self, data: str | bytes) -> None:
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        await self._op("stdin", data=base64.b64encode(raw).decode("ascii"))

    async def close_stdin(self) -> None:
        await self._op("close_stdin")

    async def signal(self, signal: str | int) -> None:
        """"TERM", "INT", "KILL", "HUP", ... or a number."""
        await self._op("signal", signal=signal)

    async def resize(self, rows: int, cols: int) -> None:
        await self._op("resize", rows=rows, cols=cols)

    async def kill(self) -> None:
        await self.signal("KILL")

    async def detach(self) -> None:
        """Stops following the command (it goes on in corrald)."""
        stream = self._stream
        self._router.connection.remove(stream)
        self._router.commands.pop(self.id, None)
        if self._router.channels.get(stream.channel) is stream:
            del self._router.channels[stream.channel]
        stream.output.end()
        try:
            await self._op("detach")
        except Exception:  # noqa: BLE001 - detached either way
            pass
