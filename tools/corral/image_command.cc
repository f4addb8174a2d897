#include "tools/corral/image_command.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>

#include "tools/corral/client.h"
#include "tools/corral/json_text.h"
#include "tools/corral/option_scanner.h"
#include "tools/corral/remote_commands.h"

namespace corral::cli {
namespace {

constexpr char kSee[] = "corral image --help";
constexpr OptionSpec kName{"--name", 0, true};
constexpr OptionSpec kForce{"--force", 'f', false};

struct VerbSpec {
  std::string_view word;
  ImageVerb verb;
  std::vector<OptionSpec> options;
  size_t positionals;  // how many it takes
  const char* expected;
};

const std::vector<VerbSpec>& Verbs() {
  static const std::vector<VerbSpec> verbs = {
      {"import", ImageVerb::kImport, {kName, {"--select", 0, true}, kForce, kJson}, 1, "one FILE"},
      {"pull", ImageVerb::kPull, {kName, kForce, kJson}, 1, "one reference like 127.0.0.1:5000/acme/agent:1"},
      {"ls", ImageVerb::kList, {kJson, kUrl, kToken}, 0, "no argument"},
      {"list", ImageVerb::kList, {kJson, kUrl, kToken}, 0, "no argument"},
      {"inspect", ImageVerb::kInspect, {kUrl, kToken}, 1, "one image (a name or a digest)"},
      {"tag", ImageVerb::kTag, {kForce, kJson}, 2, "an image and its new NAME"},
      {"rm", ImageVerb::kRemove, {}, 1, "one image (a name or a digest)"},
      {"prune", ImageVerb::kPrune, {kJson}, 0, "no argument"},
  };
  return verbs;
}

std::string ImageTarget(const std::string& ref) { return "/v1/images/" + PercentEncode(ref); }

}  // namespace

StatusOr<std::string> AbsolutePath(const std::string& path) {
  if (path.empty()) return Status::Error("an empty path");
  if (path[0] == '/') return path;
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return Status::Error("getcwd failed", errno);
  return path == "." ? std::string(cwd) : std::string(cwd) + "/" + path;
}

const char* ImageUsage() {
  return "usage: corral image COMMAND [OPTIONS]\n"
         "\n"
         "  import FILE [--name N:T] [--select REF] [--force]\n"
         "                           an OCI image layout (a directory or a tar) or a `docker save`\n"
         "                           archive; --select picks one image of several in it\n"
         "  pull REF [--name N:T] [--force]\n"
         "                           from a registry (REF names it: 127.0.0.1:5000/acme/agent:1),\n"
         "                           with the credentials of corrald.toml's [[images.registry]]\n"
         "  ls                       NAME DIGEST SIZE CREATED SOURCE\n"
         "  inspect IMAGE            one image, as JSON (IMAGE: a name or a digest)\n"
         "  tag IMAGE NAME [--force] give IMAGE another name (--force: move NAME from another image)\n"
         "  rm IMAGE                 remove an image and its names (refused while a sandbox or a\n"
         "                           snapshot uses it); its layers stay until prune\n"
         "  prune                    remove the layers no image uses\n"
         "  build -t N:T [DIR]       an image from a recipe (corral image build --help)\n"
         "\n"
         "  --json                   print the daemon's JSON instead\n"
         "  --admin-socket PATH      corrald's admin socket (default: $CORRAL_ADMIN_SOCKET, else\n"
         "                           /run/corral/admin.sock); every command but ls and inspect needs it\n"
         "  --url URL, --token JWT   ls and inspect: ask the API with a user's token instead\n"
         "Then: corral sandbox create --image N:T\n";
}

StatusOr<ImageOptions> ParseImageOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  ImageOptions out;
  if (args.empty()) return Status::Error("missing command: import|pull|ls|inspect|tag|rm|prune");
  if (IsHelpWord(args[0])) return HelpOnly(out);
  if (args[0] == "build") return Status::Error("image build has options of its own (see corral image build --help)");
  const VerbSpec* verb = nullptr;
  for (const VerbSpec& candidate : Verbs()) {
    if (candidate.word == args[0]) verb = &candidate;
  }
  if (verb == nullptr) return Status::Error("unknown command 'image " + args[0] + "' (see " + kSee + ")");
  out.verb = verb->verb;
  ASSIGN_OR_RETURN(Scanned scanned, Scan(args, 1, With(verb->options, {kAdminSocket}), std::nullopt, kSee));
  if (scanned.help) return HelpOnly(out);
  const std::string what = "image " + args[0];
  if (scanned.positionals.size() != verb->positionals) return Status::Error(what + ": expected " + verb->expected);
  for (const std::string& positional : scanned.positionals) {
    if (positional.empty()) return Status::Error(what + ": an empty argument");
  }
  if (out.verb == ImageVerb::kImport) {
    ASSIGN_OR_RETURN(out.file, AbsolutePath(scanned.positionals[0]));
  } else if (!scanned.positionals.empty()) {
    out.ref = scanned.positionals[0];
  }
  if (out.verb == ImageVerb::kTag) out.name = scanned.positionals[1];
  if (auto name = scanned.Value("--name")) {
    if (name->empty()) return Status::Error("--name: empty");
    out.name = *name;
  }
  if (auto select = scanned.Value("--select")) {
    if (select->empty()) return Status::Error("--select: empty");
    out.select = *select;
  }
  out.force = scanned.Has("--force");
  out.json = scanned.Has("--json");
  out.admin = ResolveAdmin(scanned, env);
  if (scanned.Has("--url") || scanned.Has("--token")) {
    ASSIGN_OR_RETURN(out.server, ResolveServer(scanned, env));
  }
  return out;
}

ImageRequest BuildImageRequest(const ImageOptions& options) {
  nlohmann::json body = nlohmann::json::object();
  if (!options.name.empty()) body["name"] = options.name;
  if (options.force) body["force"] = true;
  switch (options.verb) {
    case ImageVerb::kImport:
      body["path"] = options.file;
      if (!options.select.empty()) body["select"] = options.select;
      return {"POST", "/v1/images/import", body};
    case ImageVerb::kPull:
      body["ref"] = options.ref;
      return {"POST", "/v1/images/pull", body};
    case ImageVerb::kTag: return {"POST", ImageTarget(options.ref) + "/tag", body};
    case ImageVerb::kRemove: return {"DELETE", ImageTarget(options.ref), nullptr};
    case ImageVerb::kPrune: return {"POST", "/v1/images/prune", nullptr};
    case ImageVerb::kInspect: return {"GET", ImageTarget(options.ref), nullptr};
    case ImageVerb::kList: return {"GET", "/v1/images", nullptr};
  }
  return {"GET", "/v1/images", nullptr};
}

std::string FormatBytes(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  snprintf(text, sizeof(text), "%.1f %s", value, units[unit]);
  return text;
}

std::string FormatImageTable(const nlohmann::json& images, int64_t now) {
  std::vector<std::vector<std::string>> rows = {{"NAME", "DIGEST", "SIZE", "CREATED", "SOURCE"}};
  if (!images.is_array()) return FormatTable(rows);
  for (const auto& image : images) {
    std::string digest = StringAt(image, "digest");
    if (digest.starts_with("sha256:")) digest = digest.substr(7, 12);
    const uint64_t size = image.value("size", uint64_t{0});
    const std::string created = FormatAge(now - image.value("created_at", int64_t{0}));
    std::vector<std::string> names;
    if (image.contains("names") && image["names"].is_array()) {
      for (const auto& name : image["names"]) {
        if (name.is_string()) names.push_back(name.get<std::string>());
      }
    }
    if (names.empty()) names.push_back("<none>");
    for (const std::string& name : names) {
      rows.push_back({name, digest, FormatBytes(size), created, StringAt(image, "source")});
    }
  }
  return FormatTable(rows);
}

int RunImageCommand(const ImageOptions& options) {
  const ImageRequest request = BuildImageRequest(options);
  const Endpoint endpoint = options.server ? Endpoint::Server(*options.server) : Endpoint::Admin(options.admin);
  StatusOr<nlohmann::json> answer = nlohmann::json::object();
  if (request.method == "DELETE") {  // 204, no body
    auto sent = SendRequest(endpoint, request.method, request.target);
    if (!sent.ok()) answer = sent.status();
  } else {
    answer = CallJson(endpoint, request.method, request.target, request.body);
  }
  if (!answer.ok()) {
    fprintf(stderr, "corral image: %s\n", answer.status().ToString().c_str());
    return 1;
  }
  const nlohmann::json& j = *answer;
  if (options.json || options.verb == ImageVerb::kInspect) {
    fputs(Pretty(j).c_str(), stdout);
    return 0;
  }
  switch (options.verb) {
    case ImageVerb::kList:
      fputs(FormatImageTable(j.value("images", nlohmann::json::array()), time(nullptr)).c_str(), stdout);
      break;
    case ImageVerb::kRemove: printf("removed %s\n", options.ref.c_str()); break;
    case ImageVerb::kPrune:
      printf("removed %llu layers, %s freed\n", static_cast<unsigned long long>(j.value("layers_removed", 0ull)),
             FormatBytes(j.value("bytes_freed", uint64_t{0})).c_str());
      break;
    default: {
      const std::string names = j.contains("names") ? j["names"].dump() : "[]";
      printf("%s %s\n", StringAt(j, "digest").c_str(), names.c_str());
    }
  }
  return 0;
}

}  // namespace corral::cli
