// The HTTP routes of docs/PROTOCOL.md, one registrar per resource. Each route parses its request
// (protocol_json.h), checks the token's scope, calls the supervisor and answers; the work, and
// every check of who owns what, is the supervisor's. RegisterApi (daemon_api.h) calls them all
// but RegisterExecuteRoutes, RegisterImageRoutes and RegisterNodeRoutes, which corrald calls with
// the executions, the image service and the node registry.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include "api/server.h"
#include "supervisor/config.h"
#include "supervisor/fleet/node_registry.h"
#include "supervisor/images/image_service.h"
#include "supervisor/sessions/executions.h"
#include "supervisor/relay/ledger.h"
#include "supervisor/sandboxes/sandbox_events.h"
#include "supervisor/sandboxes/sandbox_manager.h"
#include "supervisor/sessions/session_runner.h"

namespace corral::api {

// sandbox_routes.cc:
//   POST   /v1/sandboxes                    scope sandboxes: 201, the sandbox
//   GET    /v1/sandboxes, /v1/sandboxes/{id}
//   POST   /v1/sandboxes/{id}/start, /stop  scope sandboxes
//   GET    /v1/sandboxes/{id}/egress        its egress rules
//   PUT    /v1/sandboxes/{id}/egress        scope sandboxes: replaces them (the next connection obeys)
//   GET    /v1/sandboxes/{id}/events        its event log from ?after_seq= (&limit=, &type=)
//   DELETE /v1/sandboxes/{id}               scope sandboxes
//   POST   /v1/sandboxes/{id}/snapshot, /fork
//                                           scope sandboxes: 201
//   GET    /v1/snapshots, /v1/snapshots/{id}; DELETE /v1/snapshots/{id} (scope sandboxes)
void RegisterSandboxRoutes(Server& server, supervisor::SandboxManager& manager, supervisor::SandboxEvents& events);

// secret_routes.cc (supervisor/secrets/secret_vault.h; 501 unsupported without secrets.key_file):
//   GET    /v1/secrets                      scope secrets: {"secrets": [the user's], "issuer_secrets": [...]}
//   PUT    /v1/secrets/{name}               scope secrets: {"value", "bindings"}: the secret (never its value)
//   DELETE /v1/secrets/{name}               scope secrets
//   GET    /v1/sandboxes/{id}/secrets       {"id", "secrets": [names]}
//   PUT    /v1/sandboxes/{id}/secrets       scopes sandboxes and secrets: {"secrets": [names]}
//                                           -> {"id", "secrets", "ca_trusted"}
//   GET    /v1/admin/issuers/{iss}/secrets, PUT and DELETE .../secrets/{name}: an issuer's (admin socket)
void RegisterSecretRoutes(Server& server, supervisor::SandboxManager& manager);

// port_routes.cc (preview URLs; the requests to them: api/port_proxy.h):
//   POST   /v1/sandboxes/{id}/ports {"port", "public"?}   scope sandboxes (+ ports:public for
//                                           public): 201 {"port", "url", "path_url", "public", "created_at"}
//   GET    /v1/sandboxes/{id}/ports         {"id", "ports": [...]}
//   DELETE /v1/sandboxes/{id}/ports/{port}  scope sandboxes
//   POST   /v1/sandboxes/{id}/ports/{port}/signed-url {"ttl_s"?}  -> {"url", "path_url", "expires_at"}
void RegisterPortRoutes(Server& server, supervisor::SandboxManager& manager, const supervisor::DaemonConfig& config);
// port_proxy.cc: the requests to those URLs, taken before routing (api/port_proxy.h).
void ServePorts(Server& server, boost::asio::io_context& io, supervisor::SandboxManager& manager,
                const supervisor::DaemonConfig& config);

// command_routes.cc (read-only; commands run over the WebSocket):
//   GET /v1/sandboxes/{id}/commands, /v1/sandboxes/{id}/commands/{cid}
void RegisterCommandRoutes(Server& server, supervisor::SandboxManager& manager);

// file_routes.cc, scope files, on the worker pool as the sandbox's agent:
//   GET  /v1/sandboxes/{id}/fs/read, stat, list, tar    ?path=
//   PUT  /v1/sandboxes/{id}/fs/write, tar               ?path= (write: &mode=, &append=)
//   POST /v1/sandboxes/{id}/fs/mkdir, remove, rename    ?path= (rename: ?from=&to=)
void RegisterFileRoutes(Server& server, boost::asio::io_context& io, boost::asio::thread_pool& pool,
                        supervisor::SandboxManager& manager, const supervisor::DaemonConfig& config);

// session_routes.cc (the sessions' streams are on the WebSocket):
//   POST /v1/sandboxes/{id}/sessions        scope sessions (+ sandboxes with "checkpoint"): 201, the session
//   GET  /v1/sessions (?sandbox=), /v1/sessions/{id}
//   POST /v1/sessions/{id}/checkpoint       scopes sessions and sandboxes: 201, the checkpoint
//   GET  /v1/sessions/{id}/checkpoints, /v1/checkpoints/{id}; DELETE /v1/checkpoints/{id}
void RegisterSessionRoutes(Server& server, supervisor::SessionRunner& sessions);

// usage_routes.cc:
//   GET /v1/usage                           the caller's window of its token's budget
//   GET /v1/admin/usage                     admin socket: the ledger's export (JSON lines or CSV)
void RegisterUsageRoutes(Server& server, const supervisor::Ledger& ledger, supervisor::SandboxManager& manager);

// admin_routes.cc, on the admin socket only (issuers and tokens: auth_api.h):
//   POST /v1/admin/backup {"path"}          an online copy of the store, on the worker pool
//   GET  /v1/admin/sandboxes                every user's sandboxes, with their owners
void RegisterAdminRoutes(Server& server, boost::asio::io_context& io, boost::asio::thread_pool& pool,
                         supervisor::SandboxManager& manager, const supervisor::DaemonConfig& config);

// node_routes.cc, on the admin socket only (supervisor/fleet/node_registry.h):
//   GET  /v1/admin/nodes                    {"nodes": [{"id", "address", "version", "alive",
//                                           "drained", "this", "sandboxes", ...}]}, by id
//   POST /v1/admin/nodes/{id}/drain         {"id", "drained": true}: it takes no new sandboxes
//   POST /v1/admin/nodes/{id}/undrain       {"id", "drained": false}; not_found for no such node
void RegisterNodeRoutes(Server& server, supervisor::NodeRegistry& nodes);

// image_routes.cc (`images` may be null: every route answers 503 unavailable):
//   GET    /v1/images, /v1/images/{ref}     any token: {"images": [...]}, one image; {ref} is a
//                                           name (its '/' percent-encoded or not) or a digest
//   POST   /v1/images/import {"path", "name"?, "select"?, "force"?}
//                                           admin socket: 201, the image; on the worker pool
//   POST   /v1/images/pull {"ref", "name"?, "force"?}
//                                           admin socket: 201, the image; on the worker pool
//   POST   /v1/images/{ref}/tag {"name", "force"?}   admin socket: 200, the image
//   DELETE /v1/images/{ref}                 admin socket: 204; conflict while a sandbox or a
//                                           snapshot uses it
//   POST   /v1/images/prune                 admin socket: {"layers_removed", "bytes_freed"}
void RegisterImageRoutes(Server& server, boost::asio::io_context& io, boost::asio::thread_pool& pool,
                         supervisor::ImageService* images);

// execute_routes.cc ("Headless execute" and "Git"):
//   POST /v1/execute                        scopes sandboxes + sessions: 202, the running record
//   GET  /v1/executions, /v1/executions/{id}, /v1/executions/{id}/bundle; DELETE /v1/executions/{id}
//   GET  /v1/sandboxes/{id}/git/diff, /git/bundle
//                                           scope files: the working tree against ?base=, ?path=
void RegisterExecuteRoutes(Server& server, supervisor::Executions& executions, const supervisor::DaemonConfig& config);

}  // namespace corral::api
