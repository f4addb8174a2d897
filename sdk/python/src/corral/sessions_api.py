"""Agent sessions (start, resume, fork, follow; checkpoints of the conversation and the files
together) and headless execute (a task for an agent on a copy of a git repository, handed back
as a diff and a bundle): docs/PROTOCOL.md "Agent sessions", "Checkpoints", "Headless execute"."""
from __future__ import annotations

import asyncio
import base64
import time
from typing import TYPE_CHECKING, Any, Literal, Sequence

from .http_api import HttpApi, enc
from .models import Checkpoint, Execution, SessionInfo
from .session import Session
from .tools import ClientTool, PermissionHandler

if TYPE_CHECKING:
    from .connection import Connection

PermissionMode = Literal["bypassPermissions", "acceptEdits", "default", "plan"]


def session_options(prompt: str | None, model: str | None, permission_mode: str | None,
                    allowed_tools: Sequence[str] | None, disallowed_tools: Sequence[str] | None, partial: bool | None,
                    cwd: str | None, tools: Sequence[ClientTool] | None,
                    on_permission: PermissionHandler | None) -> dict[str, Any]:
    return {"prompt": prompt, "model": model, "permission_mode": permission_mode,
            "allowed_tools": None if allowed_tools is None else list(allowed_tools),
            "disallowed_tools": None if disallowed_tools is None else list(disallowed_tools),
            "partial": partial, "cwd": cwd, "tools": list(tools or []), "on_permission": on_permission}


class SessionsApi(HttpApi):
    connection: "Connection"
    _sessions: dict[str, Session]

    def _starter(self, sandbox: str) -> Any:
        async def start(body: dict[str, Any]) -> SessionInfo:
            return SessionInfo.from_json(await self._request("POST", f"/v1/sandboxes/{enc(sandbox)}/sessions", body))
        return start

    def _wrap(self, session: Session) -> Session:
        # Registered for event routing as soon as it has an id (before its attach, whose reply
        # the events follow at once).
        def routed(session_id: str) -> None:
            self._sessions[session_id] = session
        session.on_id = routed
        return session

    def _session(self, sandbox: str, options: dict[str, Any], **extra: Any) -> Session:
        return self._wrap(Session(self.connection, sandbox, options, self._starter(sandbox), extra))

    def prepare_session(self, sandbox: str, *, prompt: str | None = None, model: str | None = None,
                        permission_mode: PermissionMode | None = None, allowed_tools: Sequence[str] | None = None,
                        disallowed_tools: Sequence[str] | None = None, partial: bool | None = None,
                        cwd: str | None = None, tools: Sequence[ClientTool] | None = None,
                        on_permission: PermissionHandler | None = None) -> Session:
        """A session that is not started yet: register_tool() (or @session.tool) on it, then
        `await session.start(prompt)`. Must be called in the client's event loop."""
        return self._session(sandbox, session_options(prompt, model, permission_mode, allowed_tools, disallowed_tools,
                                                      partial, cwd, tools, on_permission))

    async def create_session(self, sandbox: str, *, prompt: str | None = None, model: str | None = None,
                             permission_mode: PermissionMode | None = None, allowed_tools: Sequence[str] | None = None,
                             disallowed_tools: Sequence[str] | None = None, partial: bool | None = None,
                             cwd: str | None = None, tools: Sequence[ClientTool] | None = None,
                             on_permission: PermissionHandler | None = None) -> Session:
        """Starts Claude Code in the sandbox (with `prompt`, its first turn) and follows its events.
        tools: client tools (their handlers run here); on_permission: answers the agent's
        permission requests (with a permission_mode other than bypassPermissions)."""
        return await self.prepare_session(sandbox, prompt=prompt, model=model, permission_mode=permission_mode,
                                          allowed_tools=allowed_tools, disallowed_tools=disallowed_tools,
                                          partial=partial, cwd=cwd, tools=tools, on_permission=on_permission).start()

    async def resume_session(self, session_id: str, *, prompt: str | None = None, model: str | None = None,
                             permission_mode: PermissionMode | None = None, allowed_tools: Sequence[str] | None = None,
                             disallowed_tools: Sequence[str] | None = None, partial: bool | None = None,
                             cwd: str | None = None, tools: Sequence[ClientTool] | None = None,
                             on_permission: PermissionHandler | None = None) -> Session:
        """Runs an ended session again with its history (same id). Tools are declared again here."""
        info = await self.get_session(session_id)
        options = session_options(prompt, model, permission_mode, allowed_tools, disallowed_tools, partial, cwd, tools,
                                  on_permission)
        return await self._session(info.sandbox, options, resume=session_id).start()

    async def fork_session(self, session_id: str, *, prompt: str | None = None, model: str | None = None,
                           permission_mode: PermissionMode | None = None, allowed_tools: Sequence[str] | None = None,
                           disallowed_tools: Sequence[str] | None = None, partial: bool | None = None,
                           cwd: str | None = None, tools: Sequence[ClientTool] | None = None,
                           on_permission: PermissionHandler | None = None) -> Session:
        """A new session that starts from another one's history."""
        info = await self.get_session(session_id)
        options = session_options(prompt, model, permission_mode, allowed_tools, disallowed_tools, partial, cwd, tools,
                                  on_permission)
        return await self._session(info.sandbox, options, fork=session_id).start()

    async def follow_session(self, session_id: str, after_seq: int = 0) -> Session:
        """Follows a session that exists already (started elsewhere, or by an execution), from
        after `after_seq` (0: everything the daemon still holds)."""
        info = await self.get_session(session_id)
        return await self._session(info.sandbox, {}).follow(session_id, after_seq)

    async def get_session(self, session_id: str) -> SessionInfo:
        return SessionInfo.from_json(await self._request("GET", f"/v1/sessions/{enc(session_id)}"))

    async def list_sessions(self, sandbox: str | None = None) -> list[SessionInfo]:
        path = "/v1/sessions" + (f"?sandbox={enc(sandbox)}" if sandbox else "")
        return [SessionInfo.from_json(s) for s in (await self._request("GET", path))["sessions"]]

    # ---- checkpoints ----

    async def checkpoint_session(self, session_id: str) -> Checkpoint:
        """Between turns: a snapshot of the session's sandbox, its transcript included."""
        return Checkpoint.from_json(await self._request("POST", f"/v1/sessions/{enc(session_id)}/checkpoint"))

    async def list_checkpoints(self, session_id: str) -> list[Checkpoint]:
        reply = await self._request("GET", f"/v1/sessions/{enc(session_id)}/checkpoints")
        return [Checkpoint.from_json(c) for c in reply["checkpoints"]]

    async def get_checkpoint(self, checkpoint_id: str) -> Checkpoint:
        return Checkpoint.from_json(await self._request("GET", f"/v1/checkpoints/{enc(checkpoint_id)}"))

    async def delete_checkpoint(self, checkpoint_id: str) -> None:
        await self._request("DELETE", f"/v1/checkpoints/{enc(checkpoint_id)}")

    async def restore_checkpoint(self, checkpoint_id: str, *, sandbox: str | None = None, prompt: str | None = None,
                                 model: str | None = None, permission_mode: PermissionMode | None = None,
                                 allowed_tools: Sequence[str] | None = None,
                                 disallowed_tools: Sequence[str] | None = None, partial: bool | None = None,
                                 cwd: str | None = None, tools: Sequence[ClientTool] | None = None,
                                 on_permission: PermissionHandler | None = None) -> Session:
        """A new session that continues from a checkpoint: in its own sandbox (whose files are put
        back as they were then; no session may run there) or in `sandbox`, one made from the
        checkpoint's snapshot."""
        into = sandbox or (await self.get_checkpoint(checkpoint_id)).sandbox
        options = session_options(prompt, model, permission_mode, allowed_tools, disallowed_tools, partial, cwd, tools,
                                  on_permission)
        return await self._session(into, options, checkpoint=checkpoint_id).start()

    # ---- headless execute ----

    async def execute(self, task: str, *, bundle: bytes | None = None, repo_path: str | None = None,
                      model: str | None = None, permission_mode: PermissionMode | None = None,
                      timeout_s: int | None = None, keep_sandbox: bool | None = None) -> Execution:
        """Gives `task` to an agent on a copy of a repository: a git bundle (`git bundle create -
        --all`), or a directory on the daemon's host that its config allows. Answers once the
        agent has started (state running, with its sandbox and session); wait_execution() waits
        for the diff, the files changed and the bundle."""
        if (bundle is None) == (repo_path is None):
            raise ValueError("execute: give exactly one of bundle and repo_path")
        repo = {"bundle": base64.b64encode(bundle).decode("ascii")} if bundle is not None else {"path": str(repo_path)}
        body: dict[str, Any] = {"repo": repo, "task": task}
        for key, value in (("model", model), ("permission_mode", permission_mode), ("timeout_s", timeout_s),
                           ("keep_sandbox", keep_sandbox)):
            if value is not None:
                body[key] = value
        return Execution.from_json(await self._request("POST", "/v1/execute", body))

    async def get_execution(self, execution_id: str) -> Execution:
        return Execution.from_json(await self._request("GET", f"/v1/executions/{enc(execution_id)}"))

    async def list_executions(self) -> list[Execution]:
        """The caller's executions, oldest first, without their diffs."""
        return [Execution.from_json(e) for e in (await self._request("GET", "/v1/executions"))["executions"]]

    async def wait_execution(self, execution_id: str, *, timeout: float = 3600, interval: float = 0.5) -> Execution:
        """Polls the record until it is no longer running (TimeoutError after `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            record = await self.get_execution(execution_id)
            if record.state != "running":
                return record
            if time.monotonic() > deadline:
                raise TimeoutError(f"execution {execution_id} still running after {timeout} s")
            await asyncio.sleep(interval)

    async def execution_bundle(self, execution_id: str) -> bytes:
        """The bundle of the agent's commits: `git fetch FILE` takes them into the original."""
        return (await self._send("GET", f"/v1/executions/{enc(execution_id)}/bundle")).content

    async def delete_execution(self, execution_id: str) -> None:
        await self._request("DELETE", f"/v1/executions/{enc(execution_id)}")
