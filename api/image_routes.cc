// The image routes (routes.h): listing for any token, changes on the admin socket. Import, pull
// and prune unpack, copy or remove whole file trees: they run on the worker pool and post their
// answer back to the event loop. The others read the store, as the sandbox routes do.
#include <cerrno>
#include <functional>
#include <string>
#include <utility>

#include <boost/asio/post.hpp>

#include "api/image_json.h"
#include "api/protocol_json.h"
#include "api/routes.h"
#include "common/log.h"

namespace corral::api {
namespace {

using supervisor::ImageRecord;
using supervisor::ImageService;

// The image service's errors as the API's: an image over images.max_size (EFBIG) is over a limit
// of the daemon's (limit_exceeded), not a request body too large.
HttpResponse ImageError(const Status& status) {
  if (status.error_number() == EFBIG) return ErrorResponse(Status::Error(std::string(status.message()), EDQUOT));
  return ErrorResponse(status);
}

template <typename T, typename ToJson>
HttpResponse ImageResponse(int code, const StatusOr<T>& value, ToJson&& to_json) {
  if (!value.ok()) return ImageError(value.status());
  return JsonResponse(code, to_json(*value));
}

// Runs `work` on the pool and answers with what it returns, on the event loop.
void ImageOnPool(boost::asio::io_context& io, boost::asio::thread_pool& pool, Responder respond,
            std::function<HttpResponse()> work) {
  boost::asio::post(pool, [&io, respond = std::move(respond), work = std::move(work)] {
    HttpResponse response = work();
    boost::asio::post(io, [respond, response = std::move(response)]() mutable { respond(std::move(response)); });
  });
}

// The request's body parsed by `parse`; nullopt once the error is answered.
template <typename Parse>
auto ParsedImageBody(const HttpRequest& request, const Responder& respond, Parse parse) -> decltype(parse(nlohmann::json())) {
  auto body = ParseBody(request.body);
  if (!body.ok()) {
    respond(ErrorResponse(body.status()));
    return body.status();
  }
  auto parsed = parse(*body);
  if (!parsed.ok()) respond(ErrorResponse(parsed.status()));
  return parsed;
}

// An import or a pull on the pool: logged either way (`what` and the request's `subject` field,
// e.g. "path"), then 201 with the image.
void AddImageOnPool(boost::asio::io_context& io, boost::asio::thread_pool& pool, Responder respond, std::string what,
                    std::pair<std::string, std::string> subject, std::function<StatusOr<ImageRecord>()> add) {
  ImageOnPool(io, pool, std::move(respond), [what = std::move(what), subject = std::move(subject), add = std::move(add)] {
    auto image = add();
    if (image.ok()) {
      LogInfo("images", what + " done", {{subject.first, subject.second}, {"digest", image->digest}});
    } else {
      LogWarn("images", what + " refused", {{subject.first, subject.second}, {"error", image.status().ToString()}});
    }
    return ImageResponse(201, image, ImageJson);
  });
}

void ImportImage(boost::asio::io_context& io, boost::asio::thread_pool& pool, ImageService& images, HttpRequest request,
                 Responder respond) {
  auto parsed = ParsedImageBody(request, respond, ParseImport);
  if (!parsed.ok()) return;
  AddImageOnPool(io, pool, std::move(respond), "import", {"path", parsed->path},
                 [&images, import = std::move(*parsed)] { return images.Import(import); });
}

void PullImage(boost::asio::io_context& io, boost::asio::thread_pool& pool, ImageService& images, HttpRequest request,
               Responder respond) {
  auto parsed = ParsedImageBody(request, respond, ParsePull);
  if (!parsed.ok()) return;
  AddImageOnPool(io, pool, std::move(respond), "pull", {"ref", parsed->ref},
                 [&images, pull = std::move(*parsed)] { return images.Pull(pull); });
}

void TagImage(ImageService& images, HttpRequest request, Responder respond) {
  auto parsed = ParsedImageBody(request, respond, ParseTag);
  if (!parsed.ok()) return;
  respond(ImageResponse(200, images.Tag(request.params["ref"], parsed->name, parsed->force), ImageJson));
}

void RemoveImage(ImageService& images, HttpRequest request, Responder respond) {
  Status removed = images.Remove(request.params["ref"]);
  if (!removed.ok()) return respond(ImageError(removed));
  LogInfo("images", "removed", {{"ref", request.params["ref"]}});
  respond(HttpResponse{204, "application/json", "", {}});
}

void PruneImages(boost::asio::io_context& io, boost::asio::thread_pool& pool, ImageService& images, Responder respond) {
  ImageOnPool(io, pool, std::move(respond), [&images] {
    auto report = images.Prune();
    if (report.ok()) {
      LogInfo("images", "pruned", {{"layers", std::to_string(report->layers)}, {"bytes", std::to_string(report->bytes)}});
    }
    return ImageResponse(200, report, PruneJson);
  });
}

using ImageHandler = std::function<void(ImageService&, HttpRequest, Responder)>;

// `handler` with the service, or 503 when this daemon has none.
HttpHandler WithImages(ImageService* images, ImageHandler handler) {
  return [images, handler = std::move(handler)](HttpRequest request, Responder respond) {
    if (images == nullptr) {
      return respond(ErrorResponse(Status::Error("images are not set up on this daemon", EAGAIN)));
    }
    handler(*images, std::move(request), std::move(respond));
  };
}

}  // namespace

void RegisterImageRoutes(Server& server, boost::asio::io_context& io, boost::asio::thread_pool& pool,
                         supervisor::ImageService* images) {
  server.Route("GET", "/v1/images", Auth::kRequired, WithImages(images, [](ImageService& s, HttpRequest, Responder respond) {
    respond(ListResponse(s.List(), "images", ImageJson));
  }));
  server.Route("GET", "/v1/images/{ref...}", Auth::kRequired,
               WithImages(images, [](ImageService& s, HttpRequest request, Responder respond) {
                 respond(ImageResponse(200, s.Get(request.params["ref"]), ImageJson));
               }));
  server.Route("POST", "/v1/images/import", Auth::kAdminOnly,
               WithImages(images, [&io, &pool](ImageService& s, HttpRequest request, Responder respond) {
                 ImportImage(io, pool, s, std::move(request), std::move(respond));
               }));
  server.Route("POST", "/v1/images/pull", Auth::kAdminOnly,
               WithImages(images, [&io, &pool](ImageService& s, HttpRequest request, Responder respond) {
                 PullImage(io, pool, s, std::move(request), std::move(respond));
               }));
  server.Route("POST", "/v1/images/prune", Auth::kAdminOnly,
               WithImages(images, [&io, &pool](ImageService& s, HttpRequest, Responder respond) {
                 PruneImages(io, pool, s, std::move(respond));
               }));
  server.Route("POST", "/v1/images/{ref...}/tag", Auth::kAdminOnly, WithImages(images, TagImage));
  server.Route("DELETE", "/v1/images/{ref...}", Auth::kAdminOnly, WithImages(images, RemoveImage));
}

}  // namespace corral::api
