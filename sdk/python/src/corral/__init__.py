"""corral: a client for corrald's public protocol (docs/PROTOCOL.md): sandboxes, commands,
files, git, agent sessions with client tools, headless execute; `AsyncCorral` for asyncio and
`Corral`, its synchronous wrapper; `create_token` and `verify_webhook` for the operator's
backend (standard library only)."""
from .client import AsyncCorral
from .commands import Command
from .connection import ReconnectOptions
from .errors import CorralConnectionError, CorralError, ErrorCode
from .events import (AgentEvent, AwaitingInputEvent, BudgetExhaustedEvent, CheckpointEvent, DiffSummary, EndEvent,
                     FileChange, FileChangeEvent, PermissionAnswerEvent, PermissionRequestEvent, ResultEvent,
                     SessionEvent, StateEvent, StderrEvent, TodoEvent, TodoItem, ToolCallEvent, ToolOutput,
                     ToolResultEvent, ToolUse, TurnResult, UsageEvent, UserEvent, event_kind)
from .models import (Checkpoint, CommandResult, DirEntry, EgressRules, Execution, FileChanged, FileStat, Gap, GitDiff,
                     Outcome, OutputChunk, Sandbox, SandboxEvent, SandboxEvents, SandboxLimits, SandboxPort,
                     SandboxSecrets, Secret, SecretBinding, SessionInfo, SignedPortUrl, Snapshot, Usage, WrittenFile)
from .session import Session, SessionEndedError
from .sync import Corral, SyncCommand, SyncSandboxWatch, SyncSession
from .tar_extract import UnsafeArchiveError
from .token import TokenBudget, create_token
from .watch import SandboxWatch
from .tools import ClientTool, PermissionAnswer, PermissionRequest, ToolContext, tool
from .webhook import WebhookVerificationError, verify_webhook

__version__ = "0.1.0"

__all__ = [
    "AgentEvent", "AsyncCorral", "AwaitingInputEvent", "BudgetExhaustedEvent", "DiffSummary", "FileChange",
    "FileChangeEvent", "ResultEvent", "TodoEvent", "TodoItem", "Checkpoint", "CheckpointEvent", "ClientTool", "Command",
    "CommandResult", "Corral", "CorralConnectionError", "CorralError", "DirEntry", "EgressRules", "EndEvent",
    "ErrorCode", "Execution", "FileChanged", "FileStat", "Gap", "GitDiff", "Outcome", "OutputChunk",
    "PermissionAnswer", "PermissionAnswerEvent", "PermissionRequest", "PermissionRequestEvent", "ReconnectOptions",
    "Sandbox", "SandboxEvent", "SandboxEvents", "SandboxLimits", "SandboxPort", "SandboxSecrets", "SandboxWatch", "Secret",
    "SecretBinding", "Session", "SessionEndedError", "SessionEvent", "SessionInfo", "SignedPortUrl", "Snapshot",
    "StateEvent", "StderrEvent", "SyncCommand", "SyncSandboxWatch", "SyncSession", "TokenBudget", "ToolCallEvent", "ToolContext",
    "ToolOutput", "ToolResultEvent", "ToolUse", "TurnResult", "UnsafeArchiveError", "Usage", "UsageEvent", "UserEvent",
    "WebhookVerificationError", "WrittenFile", "create_token", "event_kind", "tool", "verify_webhook",
]
