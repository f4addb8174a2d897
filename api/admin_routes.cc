// The admin socket's routes for the store and every user's sandboxes (issuers, tokens and
// revocations are auth_api.h's; the ledger's export usage_routes.cc's).
#include <chrono>
#include <string>
#include <utility>

#include <boost/asio/post.hpp>

#include "api/auth_mapping.h"
#include "api/protocol_json.h"
#include "api/routes.h"
#include "common/log.h"
#include "supervisor/store/store_backup.h"

namespace corral::api {
namespace {

// POST /v1/admin/backup {"path": "/abs/file"}: an online copy of the store
// (supervisor/store/store_backup.h), made on the worker pool while the daemon serves.
void Backup(boost::asio::io_context& io, boost::asio::thread_pool& pool, const std::string& db, HttpRequest request,
            Responder respond) {
  auto body = ParseBody(request.body);
  if (!body.ok()) return respond(ErrorResponse(body.status()));
  Status fields = RefuseUnknownFields(*body, {"path"});
  if (!fields.ok()) return respond(ErrorResponse(fields));
  if (!body->contains("path") || !(*body)["path"].is_string()) {
    return respond(ErrorResponse(Status::Error("path: expected the backup file's absolute path", EINVAL)));
  }
  const std::string path = (*body)["path"].get<std::string>();
  boost::asio::post(pool, [&io, db, path, respond] {
    const auto start = std::chrono::steady_clock::now();
    auto made = supervisor::BackupStore(db, path);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    HttpResponse response;
    if (made.ok()) {
      LogInfo("admin", "store backed up", {{"path", path}, {"bytes", std::to_string(made->bytes)}});
      response = JsonResponse(201, {{"path", made->path}, {"bytes", made->bytes},
                                    {"schema_version", made->schema_version}, {"seconds", took}});
    } else {
      LogWarn("admin", "store backup failed", {{"path", path}, {"error", made.status().ToString()}});
      response = ErrorResponse(made.status());
    }
    boost::asio::post(io, [respond, response = std::move(response)]() mutable { respond(std::move(response)); });
  });
}

}  // namespace

void RegisterAdminRoutes(Server& server, boost::asio::io_context& io, boost::asio::thread_pool& pool,
                         supervisor::SandboxManager& manager, const supervisor::DaemonConfig& config) {
  server.Route("POST", "/v1/admin/backup", Auth::kAdminOnly,
               [&io, &pool, db = config.state_dir + "/corrald.db", postgresql = config.store_postgresql](
                   HttpRequest request, Responder respond) {
                 if (postgresql) {
                   return respond(ErrorResponse(Status::Error(
                       "the store is in PostgreSQL (store.backend): back it up with PostgreSQL's own tools "
                       "(pg_dump, or the server's base backups and WAL archive), as docs/FLEET.md says",
                       ENOTSUP)));
                 }
                 Backup(io, pool, db, std::move(request), std::move(respond));
               });
  server.Route("GET", "/v1/admin/sandboxes", Auth::kAdminOnly, [&manager](HttpRequest request, Responder respond) {
    respond(ListResponse(manager.List(CallerOfToken(request.auth)), "sandboxes",
                         [](const supervisor::SandboxRow& row) { return SandboxJson(row, /*with_owner=*/true); }));
  });
}

}  // namespace corral::api
