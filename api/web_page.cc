#include "api/web_page.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>

#include "common/unique_fd.h"

namespace corral::api {
namespace {

constexpr size_t kMaxWebFile = 16 << 20;

bool Servable(const std::string& name) {
  if (name.empty() || name[0] == '.') return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
              c == '_';
    if (!ok) return false;
  }
  return true;
}

// Reads the regular files directly in dir_fd (not following symlinks) into files[prefix + name].
Status LoadDirectory(int dir_fd, const std::string& where, const std::string& prefix,
                     std::map<std::string, WebFile>& files) {
  int listing_fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (listing_fd < 0) return ErrnoError("open " + where);
  std::unique_ptr<DIR, int (*)(DIR*)> dir(fdopendir(listing_fd), closedir);
  if (!dir) {
    close(listing_fd);
    return ErrnoError("list " + where);
  }
  while (dirent* entry = readdir(dir.get())) {
    const std::string name = entry->d_name;
    if (!Servable(name)) continue;
    UniqueFd fd(openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd.valid()) continue;  // a symlink (ELOOP), or gone
    struct stat st {};
    if (fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (static_cast<size_t>(st.st_size) > kMaxWebFile) {
      return Status::Error(where + "/" + name + ": larger than 16 MiB", EFBIG);
    }
    std::string body(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < body.size()) {
      ssize_t n = read(fd.get(), body.data() + done, body.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("read " + where + "/" + name);
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    body.resize(done);
    files[prefix + name] = WebFile{WebContentType(name), std::move(body)};
  }
  return Status();
}

void Answer(const std::shared_ptr<const std::map<std::string, WebFile>>& files, const std::string& name,
            Responder& respond) {
  auto it = files->find(name);
  if (it == files->end()) {
    HttpResponse r;
    r.status = 404;
    r.body = R"({"error":{"code":"not_found","message":"no such file"}})";
    return respond(std::move(r));
  }
  HttpResponse r;
  r.content_type = it->second.content_type;
  r.body = it->second.body;
  // The page's files change with the daemon, not with their names: always revalidate.
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  r.headers.emplace_back("X-Frame-Options", "DENY");
  // Its own scripts only (styles may be inline: xterm.js writes its theme into a <style>);
  // fetch and WebSocket to this origin only.
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                         "font-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; "
                         "frame-ancestors 'none'");
  respond(std::move(r));
}

}  // namespace

std::string WebContentType(const std::string& name) {
  static const std::map<std::string, std::string> kTypes = {
      {".html", "text/html; charset=utf-8"},       {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},         {".map", "application/json"},
      {".json", "application/json"},               {".svg", "image/svg+xml"},
      {".png", "image/png"},                       {".ico", "image/x-icon"},
      {".woff2", "font/woff2"},                    {".txt", "text/plain; charset=utf-8"},
  };
  size_t dot = name.rfind('.');
  if (dot != std::string::npos) {
    auto it = kTypes.find(name.substr(dot));
    if (it != kTypes.end()) return it->second;
  }
  return "application/octet-stream";
}

StatusOr<std::map<std::string, WebFile>> LoadWebPage(const std::string& dir) {
  UniqueFd root(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return ErrnoError("open " + dir);
  std::map<std::string, WebFile> files;
  RETURN_IF_ERROR(LoadDirectory(root.get(), dir, "", files));
  if (!files.count("index.html")) return Status::Error(dir + " has no index.html", ENOENT);
  UniqueFd assets(openat(root.get(), "assets", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (assets.valid()) RETURN_IF_ERROR(LoadDirectory(assets.get(), dir + "/assets", "assets/", files));
  return files;
}

void RegisterWebPage(Server& server, std::map<std::string, WebFile> files) {
  auto shared = std::make_shared<const std::map<std::string, WebFile>>(std::move(files));
  server.Route("GET", "/", Auth::kNone, [shared](HttpRequest, Responder respond) {
    Answer(shared, "index.html", respond);
  });
  server.Route("GET", "/assets/{name}", Auth::kNone, [shared](HttpRequest request, Responder respond) {
    const std::string& name = request.params["name"];
    Answer(shared, Servable(name) ? "assets/" + name : std::string(), respond);
  });
}

}  // namespace corral::api
