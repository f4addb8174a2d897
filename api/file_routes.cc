// The file API: each operation runs on the worker pool (file I/O never blocks the event loop),
// in the sandbox's root as its agent (supervisor/sandboxes/sandbox_files.h), and answers on the loop.
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <boost/asio/post.hpp>

#include "api/auth_mapping.h"
#include "api/protocol_json.h"
#include "api/routes.h"

namespace corral::api {
namespace {

using nlohmann::json;
using supervisor::SandboxFiles;
using Op = HttpResponse (*)(const SandboxFiles&, HttpRequest&);

void FileOp(boost::asio::io_context& io, boost::asio::thread_pool& pool, supervisor::SandboxManager& manager,
            const supervisor::DaemonConfig& config, HttpRequest request, Responder respond, Op op) {
  if (!RequireScope(request, kScopeFiles, respond)) return;
  auto access = manager.OpenFiles(CallerOfToken(request.auth), request.params["id"]);
  if (!access.ok()) return respond(ErrorResponse(access.status()));
  auto shared = std::make_shared<supervisor::FileAccess>(std::move(*access));
  auto req = std::make_shared<HttpRequest>(std::move(request));
  boost::asio::post(pool, [&io, shared, req, respond, op, max = config.max_file_bytes] {
    SandboxFiles files(shared->root.get(), shared->uid, shared->gid, max);
    HttpResponse response = op(files, *req);
    boost::asio::post(io, [respond, response = std::move(response)]() mutable { respond(std::move(response)); });
  });
}

HttpResponse Read(const SandboxFiles& files, HttpRequest& request) {
  auto path = QueryPath(request);
  if (!path.ok()) return ErrorResponse(path.status());
  auto data = files.Read(*path);
  if (!data.ok()) return ErrorResponse(data.status());
  return BytesResponse(std::move(*data));
}

// ?path=, a flag (false when absent) and ?mode=: what write and mkdir take.
struct PathFlagMode {
  std::string path;
  bool flag = false;
  uint32_t mode = 0;
};

StatusOr<PathFlagMode> ParsePathFlagMode(const HttpRequest& request, const char* flag, uint32_t default_mode) {
  PathFlagMode out;
  ASSIGN_OR_RETURN(out.path, QueryPath(request));
  ASSIGN_OR_RETURN(out.flag, QueryBool(request, flag, false));
  ASSIGN_OR_RETURN(out.mode, QueryMode(request, default_mode));
  return out;
}

HttpResponse Write(const SandboxFiles& files, HttpRequest& request) {
  auto asked = ParsePathFlagMode(request, "append", 0644);
  if (!asked.ok()) return ErrorResponse(asked.status());
  auto size = files.Write(asked->path, request.body, asked->mode, /*append=*/asked->flag);
  if (!size.ok()) return ErrorResponse(size.status());
  return JsonResponse(200, {{"path", asked->path}, {"size", *size}});
}

HttpResponse Stat(const SandboxFiles& files, HttpRequest& request) {
  auto path = QueryPath(request);
  if (!path.ok()) return ErrorResponse(path.status());
  auto info = files.Stat(*path);
  if (!info.ok()) return ErrorResponse(info.status());
  json j = FileInfoJson(*info);
  j["path"] = *path;
  return JsonResponse(200, j);
}

HttpResponse List(const SandboxFiles& files, HttpRequest& request) {
  auto path = QueryPath(request);
  if (!path.ok()) return ErrorResponse(path.status());
  auto entries = files.List(*path);
  if (!entries.ok()) return ErrorResponse(entries.status());
  json list = json::array();
  for (const auto& entry : *entries) list.push_back(FileInfoJson(entry));
  return JsonResponse(200, {{"path", *path}, {"entries", list}});
}

HttpResponse Mkdir(const SandboxFiles& files, HttpRequest& request) {
  auto asked = ParsePathFlagMode(request, "parents", 0755);
  if (!asked.ok()) return ErrorResponse(asked.status());
  Status made = files.Mkdir(asked->path, asked->mode, /*parents=*/asked->flag);
  if (!made.ok()) return ErrorResponse(made);
  return JsonResponse(200, {{"path", asked->path}});
}

HttpResponse Remove(const SandboxFiles& files, HttpRequest& request) {
  auto path = QueryPath(request);
  auto recursive = QueryBool(request, "recursive", false);
  if (!path.ok()) return ErrorResponse(path.status());
  if (!recursive.ok()) return ErrorResponse(recursive.status());
  Status removed = files.Remove(*path, *recursive);
  if (!removed.ok()) return ErrorResponse(removed);
  return JsonResponse(200, {{"path", *path}});
}

HttpResponse Rename(const SandboxFiles& files, HttpRequest& request) {
  auto from = QueryPath(request, "from");
  auto to = QueryPath(request, "to");
  if (!from.ok()) return ErrorResponse(from.status());
  if (!to.ok()) return ErrorResponse(to.status());
  Status renamed = files.Rename(*from, *to);
  if (!renamed.ok()) return ErrorResponse(renamed);
  return JsonResponse(200, {{"from", *from}, {"to", *to}});
}

HttpResponse GetTar(const SandboxFiles& files, HttpRequest& request) {
  auto path = QueryPath(request);
  if (!path.ok()) return ErrorResponse(path.status());
  auto tar = files.TarDirectory(*path);
  if (!tar.ok()) return ErrorResponse(tar.status());
  return BytesResponse(std::move(*tar), "application/x-tar");
}

HttpResponse PutTar(const SandboxFiles& files, HttpRequest& request) {
  auto path = QueryPath(request);
  if (!path.ok()) return ErrorResponse(path.status());
  auto entries = files.ExtractTar(*path, request.body);
  if (!entries.ok()) return ErrorResponse(entries.status());
  return JsonResponse(200, {{"path", *path}, {"entries", *entries}});
}

}  // namespace

void RegisterFileRoutes(Server& server, boost::asio::io_context& io, boost::asio::thread_pool& pool,
                        supervisor::SandboxManager& manager, const supervisor::DaemonConfig& config) {
  auto route = [&](const char* method, const char* op_name, Op op) {
    RouteOptions options;
    // Uploads (PUT) may be as large as a file may be.
    if (std::string_view(method) == "PUT") {
      options.max_body_bytes = std::max(config.server_limits.max_body_bytes, config.max_file_bytes);
    }
    server.Route(method, std::string("/v1/sandboxes/{id}/fs/") + op_name, Auth::kRequired, options,
                 [&io, &pool, &manager, &config, op](HttpRequest request, Responder respond) {
                   FileOp(io, pool, manager, config, std::move(request), std::move(respond), op);
                 });
  };
  route("GET", "read", Read);
  route("PUT", "write", Write);
  route("GET", "stat", Stat);
  route("GET", "list", List);
  route("POST", "mkdir", Mkdir);
  route("POST", "remove", Remove);
  route("POST", "rename", Rename);
  route("GET", "tar", GetTar);
  route("PUT", "tar", PutTar);
}

}  // namespace corral::api
