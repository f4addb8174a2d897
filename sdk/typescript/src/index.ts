// @corral/sdk: a client for corrald's public protocol (docs/PROTOCOL.md), for Node 20+ and
// browsers. Token minting for the operator's backend is in "@corral/sdk/token" (Node only).
export { CorralClient } from "./client.js";
export type { CommandHandle, CorralClientOptions, CreateSandboxOptions, EgressRules, ExecOptions, OutputChunk, Outcome,
              Sandbox, SandboxLimits } from "./client.js";
export { CorralConnectionError, CorralError } from "./errors.js";
export type { ErrorCode } from "./errors.js";
