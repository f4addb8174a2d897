"""An agent session (docs/PROTOCOL.md "Agent sessions"): Claude Code in one of the user's
sandboxes. A Session follows the session's numbered events over the client's WebSocket (attached
from its first event, and again from the last one seen after a reconnect), offers them as an
async iterator of typed events and as callbacks, answers the agent's calls of tools that run in
this process, answers its permission requests, and sends the user's messages."""
from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Mapping

from .channel import Channel
from .errors import CorralError
from .events import (AgentEvent, EndEvent, FileChange, FileChangeEvent, PermissionRequestEvent, ResultEvent,
                     SessionEvent, StateEvent, TodoEvent, TodoItem, ToolCallEvent, ToolOutput, ToolResultEvent, ToolUse,
                     TurnResult, UsageEvent, parse_event)
from .models import SessionInfo
from .tools import (TOOL_NAME, ClientTool, PermissionHandler, PermissionRequest, ToolContext, ask_permission,
                    call_tool)

if TYPE_CHECKING:
    from .connection import Connection

# Called by the client: POST the session (new, resume, fork or from a checkpoint) and return it.
SessionStarter = Callable[[dict[str, Any]], Awaitable[SessionInfo]]
Listener = Callable[[Any], Any]

# How long a replayed tool call or permission request waits for its answer to be replayed too
# (attach from the start replays calls that were usually answered already).
REPLAY_GRACE = 0.05


class SessionEndedError(CorralError):
    """The session ended before the turn that was awaited had its result."""

    def __init__(self, session: str, outcome: Mapping[str, Any] | None):
        name = (outcome or {}).get("outcome", "unknown")
        super().__init__("session_ended", f"session {session} ended ({name}) before the turn's result")
        self.outcome = dict(outcome or {})


class Session:
    def __init__(self, connection: "Connection", sandbox: str, options: Mapping[str, Any], starter: SessionStarter,
                 extra: Mapping[str, Any] | None = None):
        self.id = ""
        self.sandbox = sandbox
        self.info: SessionInfo | None = None
        self.state: str | None = None
        self.outcome: dict[str, Any] | None = None
        self.history: list[SessionEvent] = []   # every event this object received, in order
        self.last_seq = 0
        self.cost_usd = "0.000000"              # what the relay has debited for this session so far
        self.todos: list[TodoItem] = []          # the agent's todo list as it last set it
        self.changed_files: dict[str, FileChange] = {}  # every change seen (file_change), the last per path
        self.on_id: Callable[[str], None] = lambda session_id: None  # the client routes events from then on
        self.ended: asyncio.Future[EndEvent] = asyncio.get_running_loop().create_future()
        self.ended.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._connection = connection
        self._options = dict(options)
        self._starter = starter
        self._extra = dict(extra or {})
        self._tools: dict[str, ClientTool] = {}
        self._listeners: dict[str, list[Listener]] = {}
        self._iterators: list[Channel[SessionEvent]] = []
        self._answered: set[str] = set()
        self._waiters: list[tuple[int, asyncio.Future[TurnResult]]] = []
        self._turn_mark = 0
        self._started = False
        self._attached = False
        self._end: EndEvent | None = None
        self._failure: BaseException | None = None
        for item in self._options.pop("tools", None) or []:
            self.register_tool(item)

    def __repr__(self) -> str:
        return f"<Session {self.id or '(not started)'} {self.state}>"

    # ---- starting and following ----

    def register_tool(self, tool: ClientTool) -> ClientTool:
        """Declares a tool that runs here. Tools are declared when the session starts (the
        agent's MCP server is configured then): register them before start(), or pass `tools`
        again to resume_session()."""
        if self._started:
            raise RuntimeError(f"register_tool({tool.name}): the session has started; tools are declared before start()")
        if not TOOL_NAME.fullmatch(tool.name):
            raise ValueError(f'register_tool: "{tool.name}" is not 1 to 50 of A-Z a-z 0-9 _ -')
        if not callable(tool.handler):
            raise TypeError(f"register_tool({tool.name}): handler must be callable")
        if tool.name in self._tools:
            raise ValueError(f"register_tool: {tool.name} is registered already")
        self._tools[tool.name] = tool
        return tool

    def tool(self, name: str | None = None, *, description: str | None = None,
             input_schema: dict[str, Any] | None = None) -> Callable[[Callable[..., Any]], ClientTool]:
        """Decorator: registers a function as a client tool of this session (see corral.tool)."""
        from .tools import tool as make_tool

        def register(function: Callable[..., Any]) -> ClientTool:
            return self.register_tool(make_tool(name, description=description, input_schema=input_schema)(function))
        return register

    async def start(self, prompt: str | None = None) -> "Session":
        """Creates the session in corrald (with a prompt, its first turn starts) and follows it."""
        if self._started:
            raise RuntimeError("start: the session has started already")
        self._started = True
        o = self._options
        prompt = prompt if prompt is not None else o.get("prompt")
        body: dict[str, Any] = {}
        for key, wire in (("model", "model"), ("permission_mode", "permission_mode"),
                          ("allowed_tools", "allowed_tools"), ("disallowed_tools", "disallowed_tools"),
                          ("partial", "partial"), ("cwd", "cwd")):
            if o.get(key) is not None:
                body[wire] = o[key]
        if prompt is not None:
            body["prompt"] = prompt
        if self._tools:
            body["tools"] = [t.declaration() for t in self._tools.values()]
        body.update(self._extra)
        self.info = await self._starter(body)
        self.id = self.info.id
        self.state = self.info.state
        self.on_id(self.id)
        await self._attach()
        return self

    async def follow(self, session_id: str, after_seq: int = 0) -> "Session":
        """Follows an existing session (one that this client did not start)."""
        self._started = True
        self.id = session_id
        self.on_id(session_id)
        self.last_seq = after_seq
        self._turn_mark = after_seq
        await self._attach()
        return self

    async def _attach(self) -> None:
        self._connection.add(self)
        try:
            reply = await self._connection.op("session.attach", {"session": self.id, "after_seq": self.last_seq})
        except BaseException:
            self._connection.remove(self)
            raise
        self.info = SessionInfo.from_json(reply["session"])
        if self.state is None or not self.history:
            self.state = self.info.state
        self._attached = True

    async def resubscribe(self, connection: "Connection") -> None:
        if not self._attached or self._end is not None:
            return
        await connection.op("session.attach", {"session": self.id, "after_seq": self.last_seq})

    def fail(self, error: BaseException) -> None:
        if self._end is not None:
            return
        self._failure = error
        self._attached = False
        for channel in self._iterators:
            channel.fail(error)
        self._iterators.clear()
        self._reject_waiters(error)
        if not self.ended.done():
            self.ended.set_exception(error)
        self._emit("error", error)

    # ---- events ----

    def deliver(self, message: Mapping[str, Any]) -> None:
        """Called by the client for each of this session's messages."""
        event = parse_event(message)
        seq = event.seq
        if seq <= self.last_seq:
            return  # a replay of what was seen already (or no number at all)
        self.last_seq = seq
        self.history.append(event)
        if isinstance(event, StateEvent) and event.state:
            self.state = event.state
        if isinstance(event, EndEvent):
            self.state = event.state or self.state
            self.outcome = event.outcome
            if event.outcome.get("cost_usd"):
                self.cost_usd = str(event.outcome["cost_usd"])
        if isinstance(event, UsageEvent) and event.session_cost_usd:
            self.cost_usd = event.session_cost_usd
        if isinstance(event, TodoEvent):
            self.todos = list(event.todos)
        if isinstance(event, FileChangeEvent) and event.path:
            self.changed_files[event.path] = event.file
        for channel in self._iterators:
            channel.push(event)
        self._emit(event.kind, self._value_of(event))
        self._emit("event", event)
        if isinstance(event, ResultEvent):
            self._turn_ended(event)
        elif isinstance(event, AgentEvent):
            self._agent_line(event)
        elif isinstance(event, ToolCallEvent):
            self._tool_call(event)
        elif isinstance(event, ToolResultEvent):
            self._answered.add(event.call)
        elif isinstance(event, PermissionRequestEvent):
            self._permission_request(event)
        elif isinstance(event, EndEvent):
            self._ended(event)

    def _ended(self, event: EndEvent) -> None:
        self._end = event
        self._connection.remove(self)
        for channel in self._iterators:
            channel.end()
        self._iterators.clear()
        self._reject_waiters(SessionEndedError(self.id, event.outcome))
        if not self.ended.done():
            self.ended.set_result(event)

    def _agent_line(self, event: AgentEvent) -> None:
        data = event.data
        kind = data.get("type")
        message = data.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        if kind == "assistant":
            for block in blocks:
                if block.get("type") == "text" and block.get("text"):
                    self._emit("text", block["text"])
                elif block.get("type") == "tool_use":
                    self._emit("tool_use", ToolUse(str(block.get("id", "")), str(block.get("name", "")), block.get("input")))
        elif kind == "user":
            for block in blocks:
                if block.get("type") == "tool_result":
                    value = block.get("content")
                    text = value if isinstance(value, str) else "".join(
                        str(c.get("text", "")) for c in (value if isinstance(value, list) else [])
                        if isinstance(c, dict) and c.get("type") == "text")
                    self._emit("tool_output", ToolOutput(str(block.get("tool_use_id", "")), bool(block.get("is_error")), text))

    def _value_of(self, event: SessionEvent) -> Any:
        """What a listener of the event's kind gets: the state, a turn's TurnResult, or the event."""
        if isinstance(event, StateEvent):
            return event.state
        if isinstance(event, ResultEvent):
            return self._turn_result_of(event)
        return event

    def _turn_ended(self, event: ResultEvent) -> None:
        """The daemon's `result` ends a turn: it follows the agent's own result line and the
        turn's last file changes."""
        result = self._turn_result_of(event)
        waiting, self._waiters = self._waiters, []
        for after, future in waiting:
            if event.seq > after:
                if not future.done():
                    future.set_result(result)
            else:
                self._waiters.append((after, future))

    def _turn_result_of(self, event: ResultEvent) -> TurnResult:
        line = next((e for e in reversed(self.history)
                     if e.seq < event.seq and isinstance(e, AgentEvent) and e.type == "result"), None)
        return TurnResult.from_line(line.data if line is not None else {}, event)

    def _tool_call(self, event: ToolCallEvent) -> None:
        found = self._tools.get(event.name)
        if found is None:
            return  # declared by another client of this session: that one answers
        tool = found

        async def answer() -> None:
            await asyncio.sleep(REPLAY_GRACE)
            if event.call in self._answered or self._end is not None:
                return
            self._answered.add(event.call)
            fields = await call_tool(tool, event.input, ToolContext(self, event.call))
            try:
                await self._connection.op("session.tool_result", {"session": self.id, "call": event.call, **fields})
            except CorralError as error:
                if error.code != "not_found":
                    self._emit("error", error)
            except Exception as error:  # noqa: BLE001 - reported to the session's error listeners
                self._emit("error", error)
        self._connection.spawn(answer())

    def _permission_request(self, event: PermissionRequestEvent) -> None:
        configured: PermissionHandler | None = self._options.get("on_permission")
        if configured is None:
            return
        handler = configured

        async def answer() -> None:
            await asyncio.sleep(REPLAY_GRACE)
            if self._end is not None or any(e.kind == "permission_answer" and e.get("call") == event.call
                                            for e in self.history):
                return
            decided = await ask_permission(handler, PermissionRequest(event.call, event.tool_name, event.input), self)
            fields: dict[str, Any] = {"session": self.id, "call": event.call, "allow": decided.allow}
            if decided.message is not None:
                fields["message"] = decided.message
            if decided.updated_input is not None:
                fields["updated_input"] = decided.updated_input
            try:
                await self._connection.op("session.permission", fields)
            except CorralError as error:
                if error.code != "not_found":
                    self._emit("error", error)
            except Exception as error:  # noqa: BLE001 - reported to the session's error listeners
                self._emit("error", error)
        self._connection.spawn(answer())

    def on(self, name: str, listener: Listener) -> Callable[[], None]:
        """Callbacks: an event kind (`state` gets the state string, `result` the turn's
        TurnResult, the others their typed event: `todo` a TodoEvent, `file_change` a
        FileChangeEvent, `awaiting_input` an AwaitingInputEvent, ...), `event` for every event,
        and what the agent's lines hold: `text` (each text block it writes), `tool_use` (a
        ToolUse), `tool_output` (a ToolOutput); `end` (the EndEvent) and `error` (the connection
        is gone, or a tool's answer was refused). A listener may be a coroutine function.
        Returns a function that removes it."""
        self._listeners.setdefault(name, []).append(listener)

        def off() -> None:
            if listener in self._listeners.get(name, []):
                self._listeners[name].remove(listener)
        return off

    def _emit(self, name: str, value: Any) -> None:
        for listener in list(self._listeners.get(name, [])):
            try:
                result = listener(value)
                if inspect.isawaitable(result):
                    self._connection.spawn(_quietly(result))
            except Exception:  # noqa: BLE001 - a listener's error is its own
                pass

    def events(self) -> AsyncIterator[SessionEvent]:
        """Every event from the first this object received, then the new ones, until the end."""
        channel: Channel[SessionEvent] = Channel()
        for event in self.history:
            channel.push(event)
        if self._end is not None:
            channel.end()
        elif self._failure is not None:
            channel.fail(self._failure)
        else:
            self._iterators.append(channel)
        return channel

    def __aiter__(self) -> AsyncIterator[SessionEvent]:
        return self.events()

    def _reject_waiters(self, error: BaseException) -> None:
        waiting, self._waiters = self._waiters, []
        for _, future in waiting:
            if not future.done():
                future.set_exception(error)

    # ---- turns ----

    def _result_future(self) -> "asyncio.Future[TurnResult]":
        future: asyncio.Future[TurnResult] = asyncio.get_running_loop().create_future()
        after = self._turn_mark
        done = next((e for e in self.history if e.seq > after and isinstance(e, ResultEvent)), None)
        if done is not None:
            future.set_result(self._turn_result_of(done))
        elif self._end is not None:
            future.set_exception(SessionEndedError(self.id, self._end.outcome))
        elif self._failure is not None:
            future.set_exception(self._failure)
        else:
            self._waiters.append((after, future))
        return future

    async def result(self) -> TurnResult:
        """The result of the turn that start() or the last turn() began (waits for it)."""
        return await self._result_future()

    async def send(self, text: str) -> None:
        """A message for the agent: the next turn, or feedback it reads during the current one."""
        await self._connection.op("session.send", {"session": self.id, "text": text})

    async def turn(self, text: str) -> TurnResult:
        """Sends a message that starts a turn and waits for that turn's result."""
        self._turn_mark = self.last_seq
        future = self._result_future()
        try:
            await self.send(text)
        except BaseException:
            if future.done() and not future.cancelled():
                future.exception()  # the refused send is the error to report
            future.cancel()
            raise
        return await future

    async def wait(self) -> EndEvent:
        """Waits for the session's end."""
        return await asyncio.shield(self.ended)

    async def interrupt(self) -> None:
        """Stops the turn (its result is an error)."""
        await self._connection.op("session.interrupt", {"session": self.id})

    async def abort(self) -> None:
        """Kills the agent: the session ends `aborted`."""
        await self._connection.op("session.abort", {"session": self.id})

    async def close(self) -> None:
        """The agent finishes and exits: the session ends `completed`."""
        await self._connection.op("session.close", {"session": self.id})

    async def detach(self) -> None:
        """Stops following the session (it goes on in corrald)."""
        self._connection.remove(self)
        if not self._attached:
            return
        self._attached = False
        for channel in self._iterators:
            channel.end()
        self._iterators.clear()
        try:
            await self._connection.op("session.detach", {"session": self.id})
        except Exception:  # noqa: BLE001 - detached either way
            pass


async def _quietly(awaitable: Awaitable[Any]) -> None:
    try:
        await awaitable
    except Exception:  # noqa: BLE001 - a listener's error is its own
        pass
