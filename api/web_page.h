// The web page corrald serves (DESIGN: clients): a static single-page app built from
// sdk/typescript and xterm.js into a directory (web/dist, installed as /usr/share/corral/web),
// answered at `/` (index.html) and `/assets/<name>`. The files are read once, when the daemon
// starts: a request never touches the disk, and a page rebuilt under a running daemon is served
// after its restart. Only regular files directly in the directory and in its assets/ directory
// are served, and never one whose name starts with a dot; symlinks are not followed.
#pragma once

#include <map>
#include <string>

#include "api/server.h"
#include "common/status.h"

namespace corral::api {

struct WebFile {
  std::string content_type;
  std::string body;
};

// name ("index.html", "assets/main.js") -> file. An error when `dir` has no index.html.
StatusOr<std::map<std::string, WebFile>> LoadWebPage(const std::string& dir);

// The Content-Type for a file name, by its extension ("application/octet-stream" if unknown).
std::string WebContentType(const std::string& name);

// Routes GET / and GET /assets/{name} (no token: the page holds no secret; it asks the user for
// a token and sends it with its own requests).
void RegisterWebPage(Server& server, std::map<std::string, WebFile> files);

}  // namespace corral::api
