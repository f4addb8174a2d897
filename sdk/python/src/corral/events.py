"""An agent session's events as typed values (docs/PROTOCOL.md "Agent sessions" and the
WebSocket's session events). Every event has `session`, `seq` and `kind` and keeps the message
in `raw`; each kind has its class with its fields. A kind this SDK does not know yet arrives as a
plain SessionEvent, so a newer daemon's events still flow. Register a class for a kind with
`event_kind` (that is how the derived events of a newer protocol are added)."""
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


@event_kind("end")
@dataclass(frozen=True)
class EndEvent(SessionEvent):
    """The last event (the protocol's `session_end`): the final state and the outcome
    {"outcome": completed | aborted | budget_exhausted | agent_exited | ..., "turns", "cost_usd", "process"}."""
    state: str = ""
    outcome: dict[str, Any] = field(default_factory=dict)


def parse_event(message: Mapping[str, Any]) -> SessionEvent:
    """A session's message from the WebSocket (`event`: session or session_end) as its class."""
    raw = {k: v for k, v in message.items() if k != "event"}
    kind = "end" if message.get("event") == "session_end" else str(message.get("kind", ""))
    raw["kind"] = kind
    cls = _KINDS.get(kind, SessionEvent)
    own = {f.name: f for f in dataclasses.fields(cls)} if cls is not SessionEvent else {}
    values: dict[str, Any] = {}
    for name, spec in own.items():
        if name in ("session", "seq", "kind", "raw") or name not in raw or raw[name] is None:
            continue
        value = raw[name]
        default = spec.default
        if isinstance(default, bool):
            value = bool(value)
        elif isinstance(default, int):
            value = int(value)
        elif isinstance(default, str):
            value = str(value)
        values[name] = value
    return cls(session=str(raw.get("session", "")), seq=int(raw.get("seq") or 0), kind=kind, raw=raw, **values)


@dataclass(frozen=True)
class TurnResult:
    """The end of a turn, as the agent's `result` line says it."""
    text: str                 # the agent's final text
    is_error: bool
    cost_usd: float           # total_cost_usd as Claude Code estimates it (the ledger: Session.cost_usd)
    usage: dict[str, Any]
    num_turns: int
    duration_ms: int
    data: dict[str, Any] = field(repr=False)  # the agent's whole result line

    @classmethod
    def from_line(cls, data: Mapping[str, Any]) -> "TurnResult":
        result = data.get("result")
        return cls(text=result if isinstance(result, str) else "", is_error=bool(data.get("is_error")),
                   cost_usd=float(data.get("total_cost_usd") or 0), usage=dict(data.get("usage") or {}),
                   num_turns=int(data.get("num_turns") or 0), duration_ms=int(data.get("duration_ms") or 0),
                   data=dict(data))


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
