"""AsyncCorral: corrald's public protocol (docs/PROTOCOL.md) for asyncio. HTTP with httpx;
commands and sessions over one WebSocket per client (websockets), opened when first needed and
opened again after a drop, resuming every stream from the last sequence number seen."""
from __future__ import annotations

import codecs
import re
from typing import Any, Awaitable, Callable, Literal, Mapping, Sequence, Union

import httpx

from .commands import Command, CommandRouter, OutputCallback
from .connection import DEFAULT_RENEW_BEFORE, Connection, ReconnectOptions, TokenSource
from .files_api import FilesApi
from .http_api import enc, query
from .models import (CommandResult, EgressRules, OutputChunk, Sandbox, SandboxEvents, SandboxPort,
                     SandboxSecrets, Secret, SecretBinding, SignedPortUrl, Snapshot, Usage)
from .session import Session
from .sessions_api import SessionsApi
from .watch import SandboxWatch

TextCallback = Callable[[str], Union[None, Awaitable[None]]]


class AsyncCorral(FilesApi, SessionsApi):
    """A client of one corrald for one user (the token's).

    url: http(s)://host:port of corrald. token: a token minted by the operator's backend
    (create_token), or a function (sync or async) that returns a fresh one; get_token is the same
    as a function in `token`. With a function the client renews its open WebSocket's token
    `renew_before` seconds before it expires (op auth), and every HTTP request asks it for the
    token to send. Use it as `async with AsyncCorral(...) as corral:` or call `await close()`.
    """

    def __init__(self, url: str, token: TokenSource | None = None, *,
                 get_token: Callable[[], str | Awaitable[str]] | None = None,
                 renew_before: float = DEFAULT_RENEW_BEFORE, reconnect: ReconnectOptions | None = None,
                 http: httpx.AsyncClient | None = None, timeout: float = 120.0):
        base = (url or "").rstrip("/")
        if not re.match(r"^https?://", base):
            raise ValueError(f'AsyncCorral: url must be http(s)://host:port, not "{url}"')
        source = get_token if get_token is not None else token
        if not source:
            raise ValueError("AsyncCorral: token (or get_token) is required")
        super().__init__(base, source, http, timeout)
        self.connection = Connection(re.sub(r"^http", "ws", base) + "/v1/ws", source, reconnect, renew_before)
        self._commands = CommandRouter(self.connection)
        self._sessions: dict[str, Session] = {}
        self._watches: dict[str, SandboxWatch] = {}
        self.connection.on_text = self._on_event
        self.connection.on_binary = self._commands.frame
        self.connection.on_reset = self._commands.reset

    async def __aenter__(self) -> "AsyncCorral":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        await self.connection.close()
        await self._close_http()

    def _on_event(self, message: dict[str, Any]) -> None:
        event = message.get("event")
        if event == "exit":
            self._commands.exit_event(message)
        elif event in ("session", "session_end"):
            session = self._sessions.get(str(message.get("session")))
            if session is not None:
                session.deliver(message)
            if event == "session_end":
                self._sessions.pop(str(message.get("session")), None)
        elif event == "sandbox":
            watch = self._watches.get(str(message.get("sandbox")))
            if watch is not None:
                watch.deliver(message)

    async def health(self) -> dict[str, Any]:
        """{"status", "version", "protocol"} (no token needed)."""
        return dict(await self._request("GET", "/healthz"))

    async def renew_token(self) -> None:
        """Sends the token function's current token on the open WebSocket now (op auth), e.g.
        when a fresh one arrived another way. Renewal before expiry is automatic."""
        await self.connection.renew_now()

    # ---- sandboxes ----

    async def create_sandbox(self, *, name: str | None = None, image: str | None = None,
                             limits: Mapping[str, Any] | None = None, idle_timeout_s: int | None = None,
                             start: bool | None = None, snapshot: str | None = None,
                             egress: Mapping[str, Any] | None = None, network: Literal["loopback", "full"] | None = None,
                             unsafe: Sequence[str] | None = None, secrets: Sequence[str] | None = None) -> Sandbox:
        """A new sandbox, running unless start=False. image: "host" (the default), a name
        ("python:3.12") or a digest; snapshot: a snapshot's id to copy its files; egress:
        {"domains", "ports", "cidrs"}; secrets: names of the user's secrets it may use."""
        fields: dict[str, Any] = {"name": name, "image": image, "limits": None if limits is None else dict(limits),
                                  "idle_timeout_s": idle_timeout_s, "start": start, "snapshot": snapshot,
                                  "egress": None if egress is None else dict(egress), "network": network,
                                  "unsafe": None if unsafe is None else list(unsafe),
                                  "secrets": None if secrets is None else list(secrets)}
        body = {k: v for k, v in fields.items() if v is not None}
        return Sandbox.from_json(await self._request("POST", "/v1/sandboxes", body))

    async def get_sandbox(self, sandbox: str) -> Sandbox:
        return Sandbox.from_json(await self._request("GET", f"/v1/sandboxes/{enc(sandbox)}"))

    async def list_sandboxes(self) -> list[Sandbox]:
        return [Sandbox.from_json(s) for s in (await self._request("GET", "/v1/sandboxes"))["sandboxes"]]

    async def start_sandbox(self, sandbox: str) -> Sandbox:
        return Sandbox.from_json(await self._request("POST", f"/v1/sandboxes/{enc(sandbox)}/start"))

    async def stop_sandbox(self, sandbox: str) -> Sandbox:
        return Sandbox.from_json(await self._request("POST", f"/v1/sandboxes/{enc(sandbox)}/stop"))

    async def destroy_sandbox(self, sandbox: str) -> None:
        await self._request("DELETE", f"/v1/sandboxes/{enc(sandbox)}")

    async def snapshot(self, sandbox: str) -> Snapshot:
        """A copy of the sandbox's files (its writable layer), kept after the sandbox is gone."""
        return Snapshot.from_json(await self._request("POST", f"/v1/sandboxes/{enc(sandbox)}/snapshot"))

    async def list_snapshots(self) -> list[Snapshot]:
        return [Snapshot.from_json(s) for s in (await self._request("GET", "/v1/snapshots"))["snapshots"]]

    async def delete_snapshot(self, snapshot: str) -> None:
        await self._request("DELETE", f"/v1/snapshots/{enc(snapshot)}")

    async def fork_sandbox(self, sandbox: str, *, name: str | None = None, start: bool | None = None) -> Sandbox:
        """A new sandbox whose files are a copy of this one's (from a snapshot: create_sandbox(snapshot=))."""
        body = {k: v for k, v in {"name": name, "start": start}.items() if v is not None}
        return Sandbox.from_json(await self._request("POST", f"/v1/sandboxes/{enc(sandbox)}/fork", body))

    async def get_egress(self, sandbox: str) -> EgressRules:
        return EgressRules.from_json(await self._request("GET", f"/v1/sandboxes/{enc(sandbox)}/egress"))

    async def set_egress(self, sandbox: str, *, domains: Sequence[str] | None = None, ports: Sequence[int] | None = None,
                         cidrs: Sequence[str] | None = None) -> EgressRules:
        body = {k: list(v) for k, v in {"domains": domains, "ports": ports, "cidrs": cidrs}.items() if v is not None}
        return EgressRules.from_json(await self._request("PUT", f"/v1/sandboxes/{enc(sandbox)}/egress", body))

    async def sandbox_events(self, sandbox: str, *, after_seq: int = 0, limit: int = 1000,
                             type: str | None = None) -> SandboxEvents:
        """The sandbox's event log (lifecycle, command ends, egress decisions, rule changes)."""
        path = f"/v1/sandboxes/{enc(sandbox)}/events{query({'after_seq': after_seq, 'limit': limit, 'type': type})}"
        return SandboxEvents.from_json(await self._request("GET", path))

    async def watch_sandbox(self, sandbox: str, after_seq: int = 0) -> SandboxWatch:
        """Follows the sandbox's event log live, from after `after_seq` (0: the whole log):
        `async for event in watch`, then `await watch.stop()`."""
        return await SandboxWatch(self.connection, sandbox, after_seq, self._watches).start()

    async def usage(self) -> Usage:
        return Usage.from_json(await self._request("GET", "/v1/usage"))

    # ---- secrets ----

    async def put_secret(self, name: str, value: str, bindings: Sequence[SecretBinding | Mapping[str, Any]]) -> Secret:
        """Kept by the daemon, added by the egress proxy to the requests its bindings match; a
        sandbox that names it sees only a placeholder in the variable of the same name."""
        wire = [b.to_json() if isinstance(b, SecretBinding) else dict(b) for b in bindings]
        return Secret.from_json(await self._request("PUT", f"/v1/secrets/{enc(name)}", {"value": value, "bindings": wire}))

    async def list_secrets(self) -> tuple[list[Secret], list[Secret]]:
        """(the user's secrets, their issuer's): names and bindings, never values."""
        reply = await self._request("GET", "/v1/secrets")
        return ([Secret.from_json(s) for s in reply.get("secrets", [])],
                [Secret.from_json(s) for s in reply.get("issuer_secrets", [])])

    async def delete_secret(self, name: str) -> None:
        await self._request("DELETE", f"/v1/secrets/{enc(name)}")

    async def get_sandbox_secrets(self, sandbox: str) -> list[str]:
        return list((await self._request("GET", f"/v1/sandboxes/{enc(sandbox)}/secrets"))["secrets"])

    async def set_sandbox_secrets(self, sandbox: str, names: Sequence[str]) -> SandboxSecrets:
        """`ca_trusted` of the answer: whether the sandbox's trust store holds corral's CA now."""
        return SandboxSecrets.from_json(await self._request("PUT", f"/v1/sandboxes/{enc(sandbox)}/secrets",
                                                            {"secrets": list(names)}))

    # ---- ports: preview URLs ----

    async def open_port(self, sandbox: str, port: int, *, public: bool | None = None) -> SandboxPort:
        """Shows a port a process in the running sandbox listens on (127.0.0.1 there).
        public=True (anyone may reach it) needs the token scope ports:public."""
        body: dict[str, Any] = {"port": port}
        if public is not None:
            body["public"] = public
        return SandboxPort.from_json(await self._request("POST", f"/v1/sandboxes/{enc(sandbox)}/ports", body))

    async def list_ports(self, sandbox: str) -> list[SandboxPort]:
        return [SandboxPort.from_json(p) for p in (await self._request("GET", f"/v1/sandboxes/{enc(sandbox)}/ports"))["ports"]]

    async def close_port(self, sandbox: str, port: int) -> None:
        await self._request("DELETE", f"/v1/sandboxes/{enc(sandbox)}/ports/{int(port)}")

    async def sign_port_url(self, sandbox: str, port: int, *, ttl_s: int | None = None) -> SignedPortUrl:
        """A URL of a shown port that opens in a browser without a token until it expires."""
        body = {} if ttl_s is None else {"ttl_s": ttl_s}
        return SignedPortUrl.from_json(await self._request(
            "POST", f"/v1/sandboxes/{enc(sandbox)}/ports/{int(port)}/signed-url", body))

    def url_of(self, path: str) -> str:
        """The absolute URL of a path on corrald (a port's path_url, a signed URL's path_url)."""
        return self.base + path

    # ---- commands ----

    async def exec(self, sandbox: str, argv: Sequence[str] | str, *, env: Mapping[str, str] | None = None,
                   cwd: str | None = None, user: Literal["agent", "root"] | None = None, stdin: bool = False,
                   pty: tuple[int, int] | None = None, on_stdout: TextCallback | None = None,
                   on_stderr: TextCallback | None = None, on_output: OutputCallback | None = None) -> Command:
        """Runs argv (a string: `sh -c` it) in a running sandbox; output arrives as it is written,
        through `async for chunk in command` and the callbacks (on_stdout/on_stderr get text,
        decoded as UTF-8 across chunk boundaries; on_output the OutputChunk). stdin=True keeps
        stdin open (write(), close_stdin()); pty=(rows, cols) runs it in a terminal (scope
        `terminal`; stdin is open, resize() changes its size)."""
        args = ["sh", "-c", argv] if isinstance(argv, str) else list(argv)
        if not args:
            raise ValueError("exec: argv must not be empty")
        fields: dict[str, Any] = {"sandbox": sandbox, "argv": args}
        if env is not None:
            fields["env"] = dict(env)
        if cwd is not None:
            fields["cwd"] = cwd
        if user is not None:
            fields["user"] = user
        if stdin:
            fields["stdin"] = True
        if pty is not None:
            fields["pty"] = {"rows": int(pty[0]), "cols": int(pty[1])}
        callback = _output_callback(on_output, on_stdout, on_stderr)
        streams: list[Any] = []

        def route(reply: dict[str, Any]) -> None:
            streams.append(self._commands.route(str(reply["command"]), int(reply["channel"]), 0, callback))
        await self.connection.op("exec", fields, route)
        return Command(streams[0], self._commands)

    async def attach(self, command: str, after_seq: int = 0, *, on_stdout: TextCallback | None = None,
                     on_stderr: TextCallback | None = None, on_output: OutputCallback | None = None) -> Command:
        """Follows a command that is running (or ended: what the daemon still holds of it) from
        after `after_seq`, e.g. a terminal after a restart of this process."""
        streams: list[Any] = []
        callback = _output_callback(on_output, on_stdout, on_stderr)

        def route(reply: dict[str, Any]) -> None:
            streams.append(self._commands.route(str(reply["command"]), int(reply["channel"]), after_seq, callback))
        reply = await self.connection.op("attach", {"command": command, "after_seq": after_seq}, route)
        return Command(streams[0], self._commands, int(reply.get("first_seq") or 0), str(reply.get("state", "")))

    async def run(self, sandbox: str, argv: Sequence[str] | str, *, env: Mapping[str, str] | None = None,
                  cwd: str | None = None, user: Literal["agent", "root"] | None = None,
                  on_stdout: TextCallback | None = None, on_stderr: TextCallback | None = None) -> CommandResult:
        """Runs argv to its end; its stdout and stderr as text, and its outcome."""
        command = await self.exec(sandbox, argv, env=env, cwd=cwd, user=user, on_stdout=on_stdout, on_stderr=on_stderr)
        parts: dict[int, list[bytes]] = {1: [], 2: []}
        async for chunk in command:
            parts.setdefault(chunk.fd, []).append(chunk.data)
        outcome = await command.wait()
        return CommandResult(b"".join(parts[1]).decode("utf-8", errors="replace"),
                             b"".join(parts[2]).decode("utf-8", errors="replace"), outcome)

    async def list_commands(self, sandbox: str) -> list[dict[str, Any]]:
        """The sandbox's commands, newest first (their records: argv, state, outcome, ...)."""
        return list((await self._request("GET", f"/v1/sandboxes/{enc(sandbox)}/commands"))["commands"])

    async def get_command(self, sandbox: str, command: str) -> dict[str, Any]:
        return dict(await self._request("GET", f"/v1/sandboxes/{enc(sandbox)}/commands/{enc(command)}"))


def _output_callback(on_output: OutputCallback | None, on_stdout: TextCallback | None,
                     on_stderr: TextCallback | None) -> OutputCallback | None:
    if on_output is None and on_stdout is None and on_stderr is None:
        return None
    decoders = {1: codecs.getincrementaldecoder("utf-8")("replace"), 2: codecs.getincrementaldecoder("utf-8")("replace")}
    awaited: list[Awaitable[None]] = []

    def deliver(chunk: OutputChunk) -> Any:
        awaited.clear()
        if on_output is not None:
            _collect(awaited, on_output(chunk))
        text_callback = on_stdout if chunk.fd == 1 else on_stderr
        if text_callback is not None:
            text = decoders.get(chunk.fd, decoders[1]).decode(chunk.data)
            if text:
                _collect(awaited, text_callback(text))
        return _gather(list(awaited)) if awaited else None
    return deliver


def _collect(into: list[Awaitable[None]], result: Any) -> None:
    if result is not None and hasattr(result, "__await__"):
        into.append(result)


async def _gather(awaitables: list[Awaitable[None]]) -> None:
    for awaitable in awaitables:
        await awaitable

