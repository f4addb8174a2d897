// @corral/sdk: a client for corrald's public protocol (docs/PROTOCOL.md), for Node 20+ and
// browsers. Token minting for the operator's backend is in "@corral/sdk/token" (Node only).
export { CorralClient } from "./client.js";
export type { Checkpoint, CommandHandle, CorralClientOptions, CreateSandboxOptions, DirEntry, EgressRules, ExecOptions, FileStat, Secret, SecretBinding,
              OutputChunk, Outcome, Sandbox, SandboxEvent, SandboxLimits, SandboxPort, SignedPortUrl, Snapshot, Usage } from "./client.js";
export type { ReconnectOptions, TokenSource } from "./connection.js";
export { CorralConnectionError, CorralError } from "./errors.js";
export type { ErrorCode } from "./errors.js";
export { Session, SessionEndedError, toTurnResult } from "./session.js";
export type { AwaitingInput, ClientTool, DiffSummary, FileChange, PermissionAnswer, PermissionHandler, PermissionMode,
              SessionEvent, SessionInfo, SessionOptions, SessionOutcome, SessionState, TodoItem, ToolContext, ToolOutput,
              TurnResult } from "./session.js";
