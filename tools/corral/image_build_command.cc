#include "tools/corral/image_build_command.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

#include "common/file_util.h"
#include "tools/corral/client.h"
#include "tools/corral/image_command.h"
#include "tools/corral/json_text.h"
#include "tools/corral/option_scanner.h"

namespace corral::cli {
namespace {

constexpr char kBuildSee[] = "corral image build --help";
constexpr auto kPollInterval = std::chrono::milliseconds(200);

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

}  // namespace

const char* ImageBuildUsage() {
  return "usage: corral image build [-f RECIPE] -t NAME:TAG [OPTIONS] [DIR]\n"
         "\n"
         "Builds an image from a recipe, a Dockerfile subset: FROM (an image, scratch, or\n"
         "debian:bookworm, made by mmdebstrap from the host's mirror when missing), RUN (in a\n"
         "sandbox of the image so far, with a sandbox's limits and egress rules), COPY, ADD (a\n"
         "local rootfs archive at /), ENV, WORKDIR, USER, ARG. Each RUN, COPY and ADD is a layer;\n"
         "steps are cached by (parent, step). DIR (default .) is the context COPY reads from.\n"
         "\n"
         "  -f, --file RECIPE        the recipe (default DIR/Recipe, else DIR/Dockerfile)\n"
         "  -t, --tag NAME:TAG       the image's name\n"
         "  --build-arg K=V          a value for the recipe's ARG K (repeatable)\n"
         "  --no-cache               run every step again\n"
         "  --force                  move NAME:TAG if it names another image\n"
         "  --json                   the build's record as JSON on stdout (the log on stderr)\n"
         "  --admin-socket PATH      corrald's admin socket (default: $CORRAL_ADMIN_SOCKET, else\n"
         "                           /run/corral/admin.sock)\n";
}

StatusOr<ImageBuildOptions> ParseImageBuildOptions(const std::vector<std::string>& args, const EnvLookup& env) {
  ImageBuildOptions out;
  const std::vector<OptionSpec> specs = {{"--file", 0, true}, {"--tag", 0, true}, {"--build-arg", 0, true},
                                         {"--no-cache", 0, false}, {"--force", 0, false}, kJson, kAdminSocket};
  // -f and -t take values, which the scanner's short options do not: spelled long first.
  std::vector<std::string> spelled = args;
  for (std::string& arg : spelled) {
    if (arg == "-f") arg = "--file";
    if (arg == "-t") arg = "--tag";
  }
  ASSIGN_OR_RETURN(Scanned scanned, Scan(spelled, 1, specs, std::nullopt, kBuildSee));
  if (scanned.help) return HelpOnly(out);
  if (scanned.positionals.size() > 1) return Status::Error("image build: expected at most one DIR");
  ASSIGN_OR_RETURN(out.context, AbsolutePath(scanned.positionals.empty() ? "." : scanned.positionals[0]));
  if (auto file = scanned.Value("--file")) {
    ASSIGN_OR_RETURN(out.recipe_path, AbsolutePath(*file));
  } else {
    out.recipe_path = out.context + "/Recipe";
    if (!Exists(out.recipe_path) && Exists(out.context + "/Dockerfile")) out.recipe_path = out.context + "/Dockerfile";
  }
  auto tag = scanned.Value("--tag");
  if (!tag || tag->empty()) return Status::Error("image build: -t NAME:TAG is required");
  out.name = *tag;
  for (const auto& [option, value] : scanned.options) {
    if (option != "--build-arg") continue;
    const size_t eq = value.find('=');
    if (eq == std::string::npos || eq == 0) return Status::Error("--build-arg: expected K=V, got '" + value + "'");
    out.build_args[value.substr(0, eq)] = value.substr(eq + 1);
  }
  out.no_cache = scanned.Has("--no-cache");
  out.force = scanned.Has("--force");
  out.json = scanned.Has("--json");
  out.admin = ResolveAdmin(scanned, env);
  return out;
}

nlohmann::json ImageBuildBody(const ImageBuildOptions& options, const std::string& recipe) {
  nlohmann::json body = {{"recipe", recipe}, {"context", options.context}, {"name", options.name}};
  if (!options.build_args.empty()) body["build_args"] = options.build_args;
  if (options.no_cache) body["no_cache"] = true;
  if (options.force) body["force"] = true;
  return body;
}

int RunImageBuildCommand(const ImageBuildOptions& options) {
  auto recipe = ReadFileToString(options.recipe_path);
  if (!recipe.ok()) {
    fprintf(stderr, "corral image build: cannot read the recipe %s: %s\n", options.recipe_path.c_str(),
            recipe.status().ToString().c_str());
    return 2;
  }
  const Endpoint endpoint = Endpoint::Admin(options.admin);
  auto started = CallJson(endpoint, "POST", "/v1/images/build", ImageBuildBody(options, *recipe));
  if (!started.ok()) {
    fprintf(stderr, "corral image build: %s\n", started.status().ToString().c_str());
    return 1;
  }
  const std::string id = StringAt(*started, "id");
  FILE* log = options.json ? stderr : stdout;
  uint64_t after = 0;
  for (;;) {
    auto status = CallJson(endpoint, "GET", "/v1/images/builds/" + id + "?after=" + std::to_string(after));
    if (!status.ok()) {
      fprintf(stderr, "corral image build: %s: %s\n", id.c_str(), status.status().ToString().c_str());
      return 1;
    }
    const std::string text = StringAt(*status, "log");
    fputs(text.c_str(), log);
    fflush(log);
    after = status->value("next", after);
    const std::string state = StringAt(*status, "state");
    if (state == "running") {
      if (text.empty()) std::this_thread::sleep_for(kPollInterval);
      continue;
    }
    if (options.json) fputs(Pretty(*status).c_str(), stdout);
    if (state == "succeeded") {
      if (!options.json) printf("%s\n", StringAt(status->value("image", nlohmann::json::object()), "digest").c_str());
      return 0;
    }
    const nlohmann::json error = status->value("error", nlohmann::json::object());
    fprintf(stderr, "corral image build: %s: %s\n", StringAt(error, "code").c_str(), StringAt(error, "message").c_str());
    return 1;
  }
}

}  // namespace corral::cli
