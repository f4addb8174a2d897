"""An agent session's events as typed values (docs/PROTOCOL.md "Agent sessions" and the
WebSocket's session events). Every event has `session`, `seq` and `kind` and keeps the message
in `raw`; each kind has its class with its fields. A kind this SDK does not know yet arrives as a
plain SessionEvent, so a newer daemon's events still flow. Register a class for a kind with
`event_kind` (that is how the derived events are added: todo, file_change, awaiting_input,
result)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, TypeVar

SessionState = Literal["initializing", "ready", "processing", "waiting_tool", "idle", "completed", "failed", "aborted"]

E = TypeVar("E", bound="SessionEvent")

_KINDS: dict[str, type["SessionEvent"]] = {}


def event_kind(kind: str) -> Callable[[type[E]], type[E]]:
    """Class decorator: messages of this kind become instances of the class."""
    def register(cls: type[E]) -> type[E]:
        _KINDS[kind] = cls
        return cls
    return register


@dataclass(frozen=True)
class SessionEvent:
    session: str
    seq: int
    kind: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def get(self, key: str, default: Any = None) -> Any:
        """A field of the message, known to this class or not."""
        return self.raw.get(key, default)

    @classmethod
    def _convert(cls, name: str, value: Any, default: Any) -> Any:
        """The value of the field `name` from the message (a subclass converts its own fields;
        raising ValueError or TypeError leaves the field at its default)."""
        return _coerce(value, default)


@event_kind("state")
@dataclass(frozen=True)
class StateEvent(SessionEvent):
    state: str = ""


@event_kind("user")
@dataclass(frozen=True)
class UserEvent(SessionEvent):
    """A message sent to the agent (a prompt, a turn, feedback)."""
    text: str = ""


@event_kind("agent")
@dataclass(frozen=True)
class AgentEvent(SessionEvent):
    """One line of Claude Code's stream-json output as it printed it: `data["type"]` is system,
    assistant, user (tool results), stream_event (partial deltas), result, ..."""
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def type(self) -> str:
        return str(self.data.get("type", ""))

    @classmethod
    def _convert(cls, name: str, value: Any, default: Any) -> Any:
        if name == "data" and not isinstance(value, dict):
            raise TypeError("not an object")
        return super()._convert(name, value, default)


@event_kind("usage")
@dataclass(frozen=True)
class UsageEvent(SessionEvent):
    """One model call as the relay metered it."""
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0
    cost_usd: str = ""
    session_cost_usd: str = ""


@event_kind("stderr")
@dataclass(frozen=True)
class StderrEvent(SessionEvent):
    text: str = ""


@event_kind("budget_exhausted")
@dataclass(frozen=True)
class BudgetExhaustedEvent(SessionEvent):
    pass


@event_kind("tool_call")
@dataclass(frozen=True)
class ToolCallEvent(SessionEvent):
    """The agent called a client tool: an attached client answers (the SDK does, for its tools)."""
    call: str = ""
    name: str = ""
    input: Any = None


@event_kind("tool_result")
@dataclass(frozen=True)
class ToolResultEvent(SessionEvent):
    """A client tool's call was answered, or timed out."""
    call: str = ""
    is_error: bool = False


@event_kind("permission_request")
@dataclass(frozen=True)
class PermissionRequestEvent(SessionEvent):
    call: str = ""
    tool_name: str = ""
    input: Any = None


@event_kind("permission_answer")
@dataclass(frozen=True)
class PermissionAnswerEvent(SessionEvent):
    call: str = ""


@event_kind("checkpoint")
@dataclass(frozen=True)
class CheckpointEvent(SessionEvent):
    checkpoint: str = ""
    turns: int = 0


# ---- derived events (docs/PROTOCOL.md "Agent sessions", "Derived events") ----

@dataclass(frozen=True)
class TodoItem:
    """One item of the agent's todo list."""
    content: str
    status: str               # pending | in_progress | completed
    active_form: str          # "Running the tests" while in progress

    @classmethod
    def from_json(cls, raw: Any) -> "TodoItem":
        item = raw if isinstance(raw, Mapping) else {}
        return cls(str(item.get("content", "")), str(item.get("status", "")), str(item.get("active_form", "")))


@dataclass(frozen=True)
class FileChange:
    """A change seen in the session's working directory, whoever made it (the Write tool, the
    Bash tool, a build). `path` is absolute in the sandbox."""
    path: str
    change: str               # create | modify | delete
    type: str                 # file | dir | symlink | other
    size: int                 # bytes now (0 when deleted)

    @classmethod
    def from_json(cls, raw: Any) -> "FileChange":
        item = raw if isinstance(raw, Mapping) else {}
        return cls(str(item.get("path", "")), str(item.get("change", "")), str(item.get("type", "")),
                   _int(item.get("size")))


@dataclass(frozen=True)
class DiffSummary:
    """A turn's changes counted: every change, also those past the `files` list's bound."""
    files: int = 0
    created: int = 0
    modified: int = 0
    deleted: int = 0
    truncated: bool = False   # more than the daemon reports in one turn (1000), or a workspace larger than its scans
    observed: bool = True     # False: the workspace could not be scanned (the sandbox was frozen or stopped)

    @classmethod
    def from_json(cls, raw: Any) -> "DiffSummary":
        d = raw if isinstance(raw, Mapping) else {}
        return cls(files=_int(d.get("files")), created=_int(d.get("created")), modified=_int(d.get("modified")),
                   deleted=_int(d.get("deleted")), truncated=bool(d.get("truncated")),
                   observed=d.get("observed") is not False)


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError("not a list")
    return value


@event_kind("todo")
@dataclass(frozen=True)
class TodoEvent(SessionEvent):
    """The agent's todo list, whole, each time it sets it (its TodoWrite tool)."""
    todos: tuple[TodoItem, ...] = ()

    @classmethod
    def _convert(cls, name: str, value: Any, default: Any) -> Any:
        if name == "todos":
            return tuple(TodoItem.from_json(t) for t in _list(value))
        return super()._convert(name, value, default)


@event_kind("file_change")
@dataclass(frozen=True)
class FileChangeEvent(SessionEvent):
    """A change in the session's working directory (see FileChange)."""
    path: str = ""
    change: str = ""
    type: str = ""
    size: int = 0

    @property
    def file(self) -> FileChange:
        return FileChange(self.path, self.change, self.type, self.size)


@event_kind("awaiting_input")
@dataclass(frozen=True)
class AwaitingInputEvent(SessionEvent):
    """The agent waits for this client: a permission request (`reason` permission, `name` the tool
    asking) or a call of a client tool (`reason` tool, `name` the tool), answered by `call`."""
    reason: str = ""
    call: str = ""
    name: str = ""


@event_kind("result")
@dataclass(frozen=True)
class ResultEvent(SessionEvent):
    """The daemon's end of a turn: after the agent's own result line and the turn's last
    file_change. `turn`: the session's turns so far, this one included; `files`: the turn's
    changes merged per path; `diff`: their counts."""
    turn: int = 0
    is_error: bool = False
    subtype: str = ""
    text: str = ""
    files: tuple[FileChange, ...] = ()
    diff: DiffSummary = DiffSummary()

    @classmethod
    def _convert(cls, name: str, value: Any, default: Any) -> Any:
        if name == "files":
            return tuple(FileChange.from_json(f) for f in _list(value))
        if name == "diff":
            return DiffSummary.from_json(value)
        return super()._convert(name, value, default)


@event_kind("end")
@dataclass(frozen=True)
class EndEvent(SessionEvent):
    """The last event (the protocol's `session_end`): the final state and the outcome
    {"outcome": completed | aborted | budget_exhausted | agent_exited | ..., "turns", "cost_usd", "process"}."""
    state: str = ""
    outcome: dict[str, Any] = field(default_factory=dict)


def parse_event(message: Mapping[str, Any]) -> SessionEvent:
    """A session's message from the WebSocket (`event`: session or session_end) as its class. A
    field whose value does not fit its type keeps its default (the message stays in `raw`): a
    malformed or hostile message never raises here."""
    raw = {k: v for k, v in message.items() if k != "event"}
    kind = "end" if message.get("event") == "session_end" else str(message.get("kind", ""))
    raw["kind"] = kind
    cls = _KINDS.get(kind, SessionEvent)
    own = {f.name: f for f in dataclasses.fields(cls)} if cls is not SessionEvent else {}
    values: dict[str, Any] = {}
    for name, spec in own.items():
        if name in ("session", "seq", "kind", "raw") or name not in raw or raw[name] is None:
            continue
        try:
            values[name] = cls._convert(name, raw[name], spec.default)
        except (ValueError, TypeError, OverflowError, AttributeError):
            continue
    return cls(session=str(raw.get("session", "")), seq=_int(raw.get("seq")), kind=kind, raw=raw, **values)


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (ValueError, TypeError, OverflowError):
        return 0


def _coerce(value: Any, default: Any) -> Any:
    """A field's value in its default's type (bool, int or str); other fields as sent."""
    if isinstance(default, bool):
        return bool(value)
    if isinstance(value, (dict, list)) and isinstance(default, (int, str)):
        raise TypeError("not a scalar")
    if isinstance(default, int):
        return int(value)
    if isinstance(default, str):
        return str(value)
    return value


@dataclass(frozen=True)
class TurnResult:
    """The end of a turn: the agent's `result` line and the daemon's `result` event (the files the
    turn changed)."""
    text: str                 # the agent's final text
    is_error: bool
    cost_usd: float           # total_cost_usd as Claude Code estimates it (the ledger: Session.cost_usd)
    usage: dict[str, Any]
    num_turns: int
    duration_ms: int
    data: dict[str, Any] = field(repr=False)  # the agent's whole result line
    turn: int = 0             # the session's turns so far, this one included (a resume counts on)
    subtype: str = ""         # success, error_during_execution, ...
    files: tuple[FileChange, ...] = ()        # merged per path: made then changed is `create`
    diff: DiffSummary = DiffSummary()

    @classmethod
    def from_line(cls, data: Mapping[str, Any], event: ResultEvent | None = None) -> "TurnResult":
        """From the agent's result line (`data`, may be empty) and the daemon's result event."""
        result = data.get("result")
        text = result if isinstance(result, str) else (event.text if event is not None else "")
        is_error = bool(data["is_error"]) if "is_error" in data else bool(event is not None and event.is_error)
        subtype = str(data.get("subtype") or (event.subtype if event is not None else ""))
        return cls(text=text, is_error=is_error, cost_usd=_float(data.get("total_cost_usd")),
                   usage=dict(data.get("usage") or {}) if isinstance(data.get("usage"), Mapping) else {},
                   num_turns=_int(data.get("num_turns")), duration_ms=_int(data.get("duration_ms")),
                   data=dict(data), turn=event.turn if event is not None else 0, subtype=subtype,
                   files=event.files if event is not None else (),
                   diff=event.diff if event is not None else DiffSummary())


def _float(value: Any) -> float:
    try:
        return float(value or 0)
    except (ValueError, TypeError, OverflowError):
        return 0.0


@dataclass(frozen=True)
class ToolUse:
    """A tool the agent uses (from its assistant lines): `id`, `name`, `input`."""
    id: str
    name: str
    input: Any


@dataclass(frozen=True)
class ToolOutput:
    """What a tool use gave back (from the agent's user lines)."""
    id: str
    is_error: bool
    text: str
