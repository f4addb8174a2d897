// The routes of headless execution and of git in a sandbox (docs/PROTOCOL.md, "Headless
// execute" and "Git"):
//
//   POST /v1/execute                      scopes sandboxes + sessions: 202, the running record
//   GET  /v1/executions                   the caller's records (without their diffs)
//   GET  /v1/executions/{id}              one record
//   GET  /v1/executions/{id}/bundle       its git bundle (application/octet-stream)
//   GET  /v1/sandboxes/{id}/git/diff      scope files: the working tree against a base
//   GET  /v1/sandboxes/{id}/git/bundle    scope files: a bundle of base..HEAD
//
// JSON only here; the work is supervisor::Executions' and supervisor::SandboxGit's.
#pragma once

#include "api/server.h"
#include "supervisor/config.h"
#include "supervisor/executions.h"

namespace corral::api {

void RegisterExecute(Server& server, supervisor::Executions& executions, const supervisor::DaemonConfig& config);

}  // namespace corral::api
