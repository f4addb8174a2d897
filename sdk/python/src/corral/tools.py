"""Tools that run in the client's process, and answers to the agent's permission requests. The
agent sees a client tool as `mcp__corral__<name>`; its answer goes back through corrald's tool
bridge (docs/PROTOCOL.md "Client tools")."""
from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Union

if TYPE_CHECKING:
    from .session import Session

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,50}")


@dataclass(frozen=True)
class ToolContext:
    session: "Session"
    call: str                     # the call's id


# A handler takes the input (and, if it has a second parameter, the ToolContext) and returns a
# string, any JSON value (sent as its text), or MCP content {"content": [...], "is_error": bool};
# it may be a coroutine function. One that raises answers with an error the agent reads.
ToolHandler = Callable[..., Any]


@dataclass(frozen=True)
class ClientTool:
    name: str                     # 1 to 50 of A-Z a-z 0-9 _ -
    handler: ToolHandler
    description: str | None = None
    input_schema: dict[str, Any] | None = None  # JSON schema of the input (default {"type": "object"})

    def declaration(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            out["description"] = self.description
        if self.input_schema is not None:
            out["input_schema"] = self.input_schema
        return out


def tool(name: str | None = None, *, description: str | None = None,
         input_schema: dict[str, Any] | None = None) -> Callable[[ToolHandler], ClientTool]:
    """Decorator: a function as a client tool, named after the function unless `name` is given,
    described by its docstring unless `description` is given."""
    def make(function: ToolHandler) -> ClientTool:
        doc = inspect.getdoc(function)
        return ClientTool(name=name or function.__name__, handler=function,
                          description=description if description is not None else doc, input_schema=input_schema)
    return make


@dataclass(frozen=True)
class PermissionRequest:
    call: str
    tool_name: str
    input: Any


@dataclass(frozen=True)
class PermissionAnswer:
    allow: bool
    message: str | None = None    # why not (the agent reads it)
    updated_input: dict[str, Any] | None = field(default=None)


# Answers a permission request: a PermissionAnswer or a bool (allow), possibly awaitable.
PermissionHandler = Callable[[PermissionRequest, "Session"], Union[PermissionAnswer, bool,
                                                                   Awaitable[Union[PermissionAnswer, bool]]]]


def takes_context(handler: ToolHandler) -> bool:
    try:
        parameters = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):
        return True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind == p.VAR_POSITIONAL for p in parameters)


async def call_tool(tool: ClientTool, input: Any, context: ToolContext) -> dict[str, Any]:
    """Runs a tool's handler and makes its output the fields of a session.tool_result."""
    try:
        output = tool.handler(input, context) if takes_context(tool.handler) else tool.handler(input)
        if inspect.isawaitable(output):
            output = await output
    except Exception as error:  # noqa: BLE001 - the agent reads what failed
        return {"text": f"{tool.name} failed: {error}", "is_error": True}
    return tool_answer(output)


def tool_answer(output: Any) -> dict[str, Any]:
    if isinstance(output, str):
        return {"text": output}
    if isinstance(output, dict) and isinstance(output.get("content"), list):
        answer: dict[str, Any] = {"content": output["content"]}
        if output.get("is_error") or output.get("isError"):
            answer["is_error"] = True
        return answer
    return {"text": "" if output is None else json.dumps(output, separators=(",", ":"), ensure_ascii=False)}


async def ask_permission(handler: PermissionHandler, request: PermissionRequest, session: "Session") -> PermissionAnswer:
    try:
        answer = handler(request, session)
        if inspect.isawaitable(answer):
            answer = await answer
    except Exception as error:  # noqa: BLE001 - denied, with the reason
        return PermissionAnswer(False, f"the permission handler failed: {error}")
    return answer if isinstance(answer, PermissionAnswer) else PermissionAnswer(bool(answer))
