"""Corral: the synchronous client, a thin wrapper of AsyncCorral (as E2B's and Daytona's SDKs
have both). One event loop runs in a background thread per client; each method runs the
asynchronous one there and waits for it. Output and session events are iterated with plain
`for`; callbacks (on_stdout, session.on) run in that thread and must not call the client back
(they raise RuntimeError if they do); tool handlers, permission handlers and get_token that are
plain functions run in worker threads, so they may."""
from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from concurrent.futures import Future
from typing import (Any, AsyncIterator, Awaitable, Callable, Concatenate, Coroutine, Iterator, ParamSpec, Sequence,
                    TypeVar)

from .client import AsyncCorral, TextCallback
from .commands import Command
from .connection import DEFAULT_RENEW_BEFORE, Connection, ReconnectOptions
from .events import EndEvent, FileChange, SessionEvent, TodoItem, TurnResult
from .models import Gap, Outcome, SandboxEvent, SessionInfo
from .watch import SandboxWatch
from .session import Session
from .sessions_api import PermissionMode
from .tools import ClientTool, PermissionHandler, ToolContext

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


IN_LOOP = ("Corral (the synchronous client) was called inside a running asyncio event loop, which it would "
           "block (and deadlock with anything that needs that loop): use AsyncCorral and await its methods, or "
           "call Corral from a thread (await asyncio.to_thread(...))")


def _in_running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="corral-client", daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self.thread:
            coroutine.close()
            raise RuntimeError("a Corral method was called from one of its callbacks (they run in the client's "
                               "event loop): do it from another thread, or use AsyncCorral")
        if _in_running_loop():
            coroutine.close()
            raise RuntimeError(IN_LOOP)
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def iterate(self, iterator: AsyncIterator[T]) -> Iterator[T]:
        async def step() -> T:
            return await iterator.__anext__()
        while True:
            try:
                yield self.run(step())
            except StopAsyncIteration:
                return

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def _blocking(method: Callable[Concatenate[AsyncCorral, P], Awaitable[R]]) -> Callable[Concatenate["Corral", P], R]:
    @functools.wraps(method)
    def call(self: "Corral", /, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._loop.run(method(self._async, *args, **kwargs))  # type: ignore[arg-type]
    return call


def _in_thread(function: Callable[..., Any]) -> Callable[..., Any]:
    """A plain function as a coroutine function that runs it in a worker thread."""
    if inspect.iscoroutinefunction(function):
        return function

    async def threaded(*args: Any) -> Any:
        return await asyncio.to_thread(function, *args)
    return threaded


class SyncCommand:
    """A running command: `for chunk in command` as it is written, `command.wait()` for its outcome."""

    def __init__(self, command: Command, loop: _LoopThread):
        self._command = command
        self._loop = loop

    @property
    def id(self) -> str:
        return self._command.id

    @property
    def gaps(self) -> list[Gap]:
        return self._command.gaps

    @property
    def last_seq(self) -> int:
        return self._command.last_seq

    @property
    def output(self) -> Iterator[Any]:
        return self._loop.iterate(self._command.output)

    def __iter__(self) -> Iterator[Any]:
        return self.output

    def wait(self, timeout: float | None = None) -> Outcome:
        return self._loop.run(self._command.wait(), timeout)

    def write(self, data: str | bytes) -> None:
        self._loop.run(self._command.write(data))

    def close_stdin(self) -> None:
        self._loop.run(self._command.close_stdin())

    def signal(self, signal: str | int) -> None:
        self._loop.run(self._command.signal(signal))

    def kill(self) -> None:
        self._loop.run(self._command.kill())

    def resize(self, rows: int, cols: int) -> None:
        self._loop.run(self._command.resize(rows, cols))

    def detach(self) -> None:
        self._loop.run(self._command.detach())


class SyncSandboxWatch:
    """A sandbox's event log, live (see SandboxWatch): `for event in watch`, then `watch.stop()`."""

    def __init__(self, watch: SandboxWatch, loop: _LoopThread):
        self._watch = watch
        self._loop = loop

    def __iter__(self) -> Iterator[SandboxEvent]:
        return self._loop.iterate(self._watch.__aiter__())

    def stop(self) -> None:
        self._loop.run(self._watch.stop())


class SyncSession:
    """An agent session (see Session): `for event in session`, `session.result()`, `session.turn(text)`."""

    def __init__(self, session: Session, loop: _LoopThread):
        self._session = session
        self._loop = loop

    @property
    def id(self) -> str:
        return self._session.id

    @property
    def sandbox(self) -> str:
        return self._session.sandbox

    @property
    def info(self) -> SessionInfo | None:
        return self._session.info

    @property
    def state(self) -> str | None:
        return self._session.state

    @property
    def outcome(self) -> dict[str, Any] | None:
        return self._session.outcome

    @property
    def history(self) -> list[SessionEvent]:
        return self._session.history

    @property
    def last_seq(self) -> int:
        return self._session.last_seq

    @property
    def cost_usd(self) -> str:
        return self._session.cost_usd

    @property
    def todos(self) -> list[TodoItem]:
        return self._session.todos

    @property
    def changed_files(self) -> dict[str, FileChange]:
        return self._session.changed_files

    def register_tool(self, tool: ClientTool) -> ClientTool:
        self._session.register_tool(_threaded_tool(tool, [self]))
        return tool

    def tool(self, name: str | None = None, *, description: str | None = None,
             input_schema: dict[str, Any] | None = None) -> Callable[[Callable[..., Any]], ClientTool]:
        from .tools import tool as make_tool

        def register(function: Callable[..., Any]) -> ClientTool:
            return self.register_tool(make_tool(name, description=description, input_schema=input_schema)(function))
        return register

    def start(self, prompt: str | None = None) -> "SyncSession":
        self._loop.run(self._session.start(prompt))
        return self

    def on(self, name: str, listener: Callable[[Any], Any]) -> Callable[[], None]:
        """See Session.on; the listener runs in the client's event loop thread."""
        return self._session.on(name, listener)

    def events(self) -> Iterator[SessionEvent]:
        return self._loop.iterate(self._loop.run(_call(self._session.events)))

    def __iter__(self) -> Iterator[SessionEvent]:
        return self.events()

    def result(self, timeout: float | None = None) -> TurnResult:
        return self._loop.run(self._session.result(), timeout)

    def turn(self, text: str, timeout: float | None = None) -> TurnResult:
        return self._loop.run(self._session.turn(text), timeout)

    def send(self, text: str) -> None:
        self._loop.run(self._session.send(text))

    def wait(self, timeout: float | None = None) -> EndEvent:
        return self._loop.run(self._session.wait(), timeout)

    def interrupt(self) -> None:
        self._loop.run(self._session.interrupt())

    def abort(self) -> None:
        self._loop.run(self._session.abort())

    def close(self) -> None:
        self._loop.run(self._session.close())

    def detach(self) -> None:
        self._loop.run(self._session.detach())


async def _call(function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Runs a plain function in the loop (one that needs the running loop)."""
    return function(*args, **kwargs)


def _threaded_tool(tool: ClientTool, session: list[SyncSession]) -> ClientTool:
    """A plain function's tool run in a worker thread; its context names the SyncSession (which
    `session` holds once it is made: before the agent can call the tool)."""
    handler = tool.handler
    if inspect.iscoroutinefunction(handler):
        return tool
    from .tools import takes_context

    def run(input: Any, context: ToolContext) -> Any:
        if not takes_context(handler):
            return handler(input)
        return handler(input, ToolContext(session[0] if session else context.session, context.call))  # type: ignore[arg-type]
    return ClientTool(tool.name, _in_thread(run), tool.description, tool.input_schema)


class Corral:
    """The synchronous client: the same methods as AsyncCorral, blocking. Use it as
    `with Corral(url, token) as corral:` or call close()."""

    def __init__(self, url: str, token: Any = None, *, get_token: Callable[[], str] | None = None,
                 renew_before: float = DEFAULT_RENEW_BEFORE, reconnect: ReconnectOptions | None = None,
                 timeout: float = 120.0):
        if _in_running_loop():
            raise RuntimeError(IN_LOOP)
        self._loop = _LoopThread()
        source = get_token if get_token is not None else token
        if callable(source):
            source = _in_thread(source)
        try:
            self._async = AsyncCorral(url, source, renew_before=renew_before, reconnect=reconnect, timeout=timeout)
        except BaseException:
            self._loop.stop()
            raise

    def __enter__(self) -> "Corral":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.loop.is_closed():
            return
        try:
            self._loop.run(self._async.close(), timeout=15)
        finally:
            self._loop.stop()

    @property
    def connection(self) -> Connection:
        return self._async.connection

    @property
    def base(self) -> str:
        return self._async.base

    def url_of(self, path: str) -> str:
        return self._async.url_of(path)

    health = _blocking(AsyncCorral.health)
    renew_token = _blocking(AsyncCorral.renew_token)
    create_sandbox = _blocking(AsyncCorral.create_sandbox)
    get_sandbox = _blocking(AsyncCorral.get_sandbox)
    list_sandboxes = _blocking(AsyncCorral.list_sandboxes)
    start_sandbox = _blocking(AsyncCorral.start_sandbox)
    stop_sandbox = _blocking(AsyncCorral.stop_sandbox)
    destroy_sandbox = _blocking(AsyncCorral.destroy_sandbox)
    snapshot = _blocking(AsyncCorral.snapshot)
    list_snapshots = _blocking(AsyncCorral.list_snapshots)
    delete_snapshot = _blocking(AsyncCorral.delete_snapshot)
    fork_sandbox = _blocking(AsyncCorral.fork_sandbox)
    get_egress = _blocking(AsyncCorral.get_egress)
    set_egress = _blocking(AsyncCorral.set_egress)
    sandbox_events = _blocking(AsyncCorral.sandbox_events)
    usage = _blocking(AsyncCorral.usage)
    put_secret = _blocking(AsyncCorral.put_secret)
    list_secrets = _blocking(AsyncCorral.list_secrets)
    delete_secret = _blocking(AsyncCorral.delete_secret)
    get_sandbox_secrets = _blocking(AsyncCorral.get_sandbox_secrets)
    set_sandbox_secrets = _blocking(AsyncCorral.set_sandbox_secrets)
    open_port = _blocking(AsyncCorral.open_port)
    list_ports = _blocking(AsyncCorral.list_ports)
    close_port = _blocking(AsyncCorral.close_port)
    sign_port_url = _blocking(AsyncCorral.sign_port_url)
    run = _blocking(AsyncCorral.run)
    list_commands = _blocking(AsyncCorral.list_commands)
    get_command = _blocking(AsyncCorral.get_command)
    read_file = _blocking(AsyncCorral.read_file)
    read_text = _blocking(AsyncCorral.read_text)
    write_file = _blocking(AsyncCorral.write_file)
    stat = _blocking(AsyncCorral.stat)
    list_dir = _blocking(AsyncCorral.list_dir)
    mkdir = _blocking(AsyncCorral.mkdir)
    remove = _blocking(AsyncCorral.remove)
    rename = _blocking(AsyncCorral.rename)
    download_tar = _blocking(AsyncCorral.download_tar)
    upload_tar = _blocking(AsyncCorral.upload_tar)
    upload_dir = _blocking(AsyncCorral.upload_dir)
    download_dir = _blocking(AsyncCorral.download_dir)
    git_diff = _blocking(AsyncCorral.git_diff)
    git_bundle = _blocking(AsyncCorral.git_bundle)
    get_session = _blocking(AsyncCorral.get_session)
    list_sessions = _blocking(AsyncCorral.list_sessions)
    checkpoint_session = _blocking(AsyncCorral.checkpoint_session)
    list_checkpoints = _blocking(AsyncCorral.list_checkpoints)
    get_checkpoint = _blocking(AsyncCorral.get_checkpoint)
    delete_checkpoint = _blocking(AsyncCorral.delete_checkpoint)
    execute = _blocking(AsyncCorral.execute)
    get_execution = _blocking(AsyncCorral.get_execution)
    list_executions = _blocking(AsyncCorral.list_executions)
    wait_execution = _blocking(AsyncCorral.wait_execution)
    execution_bundle = _blocking(AsyncCorral.execution_bundle)
    delete_execution = _blocking(AsyncCorral.delete_execution)

    # ---- what hands back a command or a session ----

    def exec(self, sandbox: str, argv: Sequence[str] | str, *, env: dict[str, str] | None = None, cwd: str | None = None,
             user: Any = None, stdin: bool = False, pty: tuple[int, int] | None = None,
             on_stdout: TextCallback | None = None, on_stderr: TextCallback | None = None) -> SyncCommand:
        command = self._loop.run(self._async.exec(sandbox, argv, env=env, cwd=cwd, user=user, stdin=stdin, pty=pty,
                                                  on_stdout=on_stdout, on_stderr=on_stderr))
        return SyncCommand(command, self._loop)

    def watch_sandbox(self, sandbox: str, after_seq: int = 0) -> SyncSandboxWatch:
        return SyncSandboxWatch(self._loop.run(self._async.watch_sandbox(sandbox, after_seq)), self._loop)

    def attach(self, command: str, after_seq: int = 0) -> SyncCommand:
        return SyncCommand(self._loop.run(self._async.attach(command, after_seq)), self._loop)

    def _options(self, holder: list[SyncSession], tools: Sequence[ClientTool] | None,
                 on_permission: PermissionHandler | None, **options: Any) -> dict[str, Any]:
        options["tools"] = [_threaded_tool(t, holder) for t in tools or []]
        if on_permission is not None:
            answer = on_permission

            def ask(request: Any, session: Session) -> Any:
                return answer(request, holder[0] if holder else session)  # type: ignore[arg-type]
            options["on_permission"] = _in_thread(ask)
        return options

    def prepare_session(self, sandbox: str, *, prompt: str | None = None, model: str | None = None,
                        permission_mode: PermissionMode | None = None, allowed_tools: Sequence[str] | None = None,
                        disallowed_tools: Sequence[str] | None = None, partial: bool | None = None,
                        cwd: str | None = None, tools: Sequence[ClientTool] | None = None,
                        on_permission: PermissionHandler | None = None) -> SyncSession:
        holder: list[SyncSession] = []
        options = self._options(holder, tools, on_permission, prompt=prompt, model=model,
                                permission_mode=permission_mode, allowed_tools=allowed_tools,
                                disallowed_tools=disallowed_tools, partial=partial, cwd=cwd)
        holder.append(SyncSession(self._loop.run(_call(self._async.prepare_session, sandbox, **options)), self._loop))
        return holder[0]

    def create_session(self, sandbox: str, **options: Any) -> SyncSession:
        """See AsyncCorral.create_session (the same keyword arguments)."""
        return self.prepare_session(sandbox, **options).start()

    def _started(self, method: Callable[..., Coroutine[Any, Any, Session]], target: str, tools: Sequence[ClientTool] | None,
                 on_permission: PermissionHandler | None, **options: Any) -> SyncSession:
        holder: list[SyncSession] = []
        options = self._options(holder, tools, on_permission, **options)
        holder.append(SyncSession(self._loop.run(method(target, **options)), self._loop))
        return holder[0]

    def resume_session(self, session_id: str, *, tools: Sequence[ClientTool] | None = None,
                       on_permission: PermissionHandler | None = None, **options: Any) -> SyncSession:
        """See AsyncCorral.resume_session."""
        return self._started(self._async.resume_session, session_id, tools, on_permission, **options)

    def fork_session(self, session_id: str, *, tools: Sequence[ClientTool] | None = None,
                     on_permission: PermissionHandler | None = None, **options: Any) -> SyncSession:
        """See AsyncCorral.fork_session."""
        return self._started(self._async.fork_session, session_id, tools, on_permission, **options)

    def restore_checkpoint(self, checkpoint_id: str, *, tools: Sequence[ClientTool] | None = None,
                           on_permission: PermissionHandler | None = None, **options: Any) -> SyncSession:
        """See AsyncCorral.restore_checkpoint."""
        return self._started(self._async.restore_checkpoint, checkpoint_id, tools, on_permission, **options)

    def follow_session(self, session_id: str, after_seq: int = 0) -> SyncSession:
        return SyncSession(self._loop.run(self._async.follow_session(session_id, after_seq)), self._loop)
