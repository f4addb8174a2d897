// The image build routes (docs/PROTOCOL.md "Images"), on the admin socket only:
//   POST /v1/images/build {"recipe", "context"?, "name"?, "build_args"?: {"K": "V"}, "force"?,
//                          "no_cache"?, "limits"?: {memory_bytes, cpus, pids, disk_bytes}}
//        202 {"id": "bld_...", "state": "running"}; a recipe that does not parse is a 400 naming
//        its line, before anything runs; conflict when two builds run already.
//   GET  /v1/images/builds/{id}?after=N
//        {"id", "state": running|succeeded|failed, "log" (from offset N), "log_start", "next",
//         "started_at", "ended_at"?, "image"? and "steps", "cached" (succeeded),
//         "error"? {"code", "message"} (failed)}
//        A client follows the log by asking again with after=next until the state is not running.
// `builds` may be null: the routes answer 503 unavailable.
#pragma once

#include "api/server.h"
#include "supervisor/images/image_builds.h"

namespace corral::api {

void RegisterImageBuildRoutes(Server& server, supervisor::ImageBuilds* builds);

}  // namespace corral::api
