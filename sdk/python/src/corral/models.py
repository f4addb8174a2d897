"""The API's objects as typed, read-only values (docs/PROTOCOL.md). Each is made from corrald's
JSON with `from_json`, which takes the fields it knows and keeps the whole object in `raw`, so a
field a newer daemon adds is still there to read."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, TypeVar

T = TypeVar("T", bound="Record")

FileType = Literal["file", "dir", "symlink", "other"]


@dataclass(frozen=True)
class Record:
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False, kw_only=True)

    @classmethod
    def from_json(cls: type[T], data: Mapping[str, Any]) -> T:
        names = {f.name for f in dataclasses.fields(cls) if f.name != "raw"}
        converters = getattr(cls, "_nested", {})
        values = {}
        for key, value in data.items():
            if key in names:
                convert = converters.get(key)
                values[key] = convert(value) if convert is not None and value is not None else value
        return cls(**values, raw=dict(data))


@dataclass(frozen=True)
class SandboxLimits(Record):
    memory_bytes: int = 0
    cpus: float = 0
    pids: int = 0
    disk_bytes: int = 0


@dataclass(frozen=True)
class EgressRules(Record):
    domains: list[str] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    cidrs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Sandbox(Record):
    id: str
    name: str = ""
    image: str = "host"            # the name it was created with ("python:3.12"), "host", or a digest
    image_digest: str | None = None
    state: str = ""                # creating | created | starting | running | stopping | stopped | destroying
    limits: SandboxLimits | None = None
    idle_timeout_s: int = 0
    created_at: int = 0
    last_active_at: int = 0
    source: str = ""               # the sandbox or snapshot it was copied from
    egress: EgressRules | None = None
    network: str = "loopback"      # loopback | full
    secrets: list[str] = field(default_factory=list)
    _nested = {"limits": SandboxLimits.from_json, "egress": EgressRules.from_json}


@dataclass(frozen=True)
class Snapshot(Record):
    id: str
    sandbox: str = ""
    image: str = ""
    image_digest: str | None = None
    created_at: int = 0
    bytes: int = 0
    disk_bytes: int = 0


@dataclass(frozen=True)
class FileStat(Record):
    path: str
    type: FileType = "file"
    size: int = 0
    mode: str = ""                 # octal text, "0644"
    mtime: int = 0


@dataclass(frozen=True)
class DirEntry(Record):
    name: str
    type: FileType = "file"
    size: int = 0
    mode: str = ""
    mtime: int = 0


@dataclass(frozen=True)
class SandboxEvent(Record):
    """An entry of a sandbox's event log (lifecycle, command ends, egress decisions)."""
    seq: int
    type: str = ""
    at: int = 0
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SandboxEvents(Record):
    events: list[SandboxEvent] = field(default_factory=list)
    last_seq: int = 0
    more: bool = False
    _nested = {"events": lambda items: [SandboxEvent.from_json(e) for e in items]}


@dataclass(frozen=True)
class SecretBinding(Record):
    """Where a secret may go and how: a header from a template (default "Authorization":
    "Bearer {secret}"), or basic auth as `basic_user`."""
    hosts: list[str]
    ports: list[int] | None = None
    methods: list[str] | None = None
    path_prefixes: list[str] | None = None
    header: str | None = None
    value: str | None = None       # a template holding {secret} once
    basic_user: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "raw" and getattr(self, f.name) is not None}


@dataclass(frozen=True)
class Secret(Record):
    """A secret as the API shows it: never its value."""
    name: str
    owner: str = "user"            # user | issuer
    bindings: list[SecretBinding] = field(default_factory=list)
    created_at: int = 0
    updated_at: int = 0
    _nested = {"bindings": lambda items: [SecretBinding.from_json(b) for b in items]}


@dataclass(frozen=True)
class SandboxSecrets(Record):
    id: str
    secrets: list[str] = field(default_factory=list)
    ca_trusted: bool = False       # the sandbox's trust store holds corral's CA now


@dataclass(frozen=True)
class SandboxPort(Record):
    """A port a running sandbox shows: `url` the host form (None without the daemon's
    ports.domain), `path_url` the path form on corrald's own address (client.url_of)."""
    port: int
    url: str | None = None
    path_url: str = ""
    public: bool = False
    created_at: int = 0


@dataclass(frozen=True)
class SignedPortUrl(Record):
    url: str | None = None
    path_url: str = ""
    expires_at: int = 0


@dataclass(frozen=True)
class Checkpoint(Record):
    id: str
    session: str = ""
    sandbox: str = ""
    snapshot: str = ""
    turns: int = 0
    created_at: int = 0


@dataclass(frozen=True)
class Outcome(Record):
    """How a command ended (docs/PROTOCOL.md "Outcome"): exited | signaled | oom_killed | ..."""
    outcome: str
    exit_code: int | None = None
    signal: int | str | None = None
    wall_s: float | None = None
    cpu_user_s: float | None = None
    cpu_sys_s: float | None = None
    peak_memory_bytes: int | None = None


@dataclass(frozen=True)
class OutputChunk:
    fd: int                        # 1 stdout, 2 stderr (a PTY's output is fd 1)
    seq: int
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class CommandResult:
    """A command run to its end (AsyncCorral.run)."""
    stdout: str
    stderr: str
    outcome: Outcome

    @property
    def exit_code(self) -> int | None:
        return self.outcome.exit_code


@dataclass(frozen=True)
class Gap:
    """Output the daemon no longer held when the client attached again: seq first..last."""
    first: int
    last: int


@dataclass(frozen=True)
class FileChanged(Record):
    path: str
    status: str = ""               # added | modified | deleted | renamed | copied | type_changed
    from_path: str | None = None   # renamed/copied: the protocol's "from"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "FileChanged":
        return cls(path=str(data.get("path", "")), status=str(data.get("status", "")),
                   from_path=data.get("from"), raw=dict(data))


def _files_changed(items: list[Any]) -> list[FileChanged]:
    return [FileChanged.from_json(f) for f in items]


@dataclass(frozen=True)
class GitDiff(Record):
    diff: str = ""
    files_changed: list[FileChanged] = field(default_factory=list)
    head: str | None = None        # the commit HEAD names (None without commits)
    _nested = {"files_changed": _files_changed}


@dataclass(frozen=True)
class Execution(Record):
    """A headless execution's record (docs/PROTOCOL.md "Headless execute")."""
    id: str
    state: str = ""                # running | completed | failed
    sandbox: str | None = None
    session: str | None = None
    task: str = ""
    repo: str = ""
    base: str | None = None
    head: str | None = None
    created_at: int = 0
    ended_at: int = 0
    summary: str = ""
    outcome: str = ""
    cost_usd: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    files_changed: list[FileChanged] = field(default_factory=list)
    diff: str = ""
    truncated: bool = False
    bundle_bytes: int = 0
    error: str | None = None
    _nested = {"files_changed": _files_changed}


@dataclass(frozen=True)
class Usage(Record):
    """The caller's spending in the current window of their token's budget (GET /v1/usage)."""
    window: dict[str, Any] = field(default_factory=dict)
    ai: dict[str, Any] = field(default_factory=dict)
    compute: dict[str, Any] = field(default_factory=dict)
    sessions: list[dict[str, Any]] = field(default_factory=list)
    sandboxes: list[dict[str, Any]] = field(default_factory=list)

    def session_cost(self, session_id: str) -> str | None:
        """The relay's cost of one session in this window ("0.012345"), None if it made no call."""
        return next((s.get("cost_usd") for s in self.sessions if s.get("session") == session_id), None)


@dataclass(frozen=True)
class SessionInfo(Record):
    """An agent session as GET /v1/sessions/{id} shows it."""
    id: str
    sandbox: str = ""
    state: str = ""
    agent_session: str = ""
    parent: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    turns: int = 0
    cost_usd: str = "0.000000"
    created_at: int = 0
    updated_at: int = 0
    ended_at: int = 0
    outcome: dict[str, Any] | None = None


@dataclass(frozen=True)
class WrittenFile(Record):
    path: str
    size: int = 0
