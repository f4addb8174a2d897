// corral: the command-line client. Today: `corral run` (the sandbox engine as a command) and
// `corral gc`.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/corral/run_command.h"
#include "tools/corral/run_options.h"

namespace {

constexpr char kUsage[] =
    "usage: corral <command> [ARGS...]\n"
    "\n"
    "commands:\n"
    "  run [OPTIONS] -- CMD [ARGS...]   run CMD in a fresh sandbox (corral run --help)\n"
    "  gc                               remove what killed runs left behind\n"
    "  version                          print the version\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
    fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "run") {
    if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
      fputs(corral::cli::RunUsage(), stdout);
      return 0;
    }
    auto options = corral::cli::ParseRunOptions(args);
    if (!options.ok()) {
      fprintf(stderr, "corral run: %s\n", options.status().ToString().c_str());
      return 125;
    }
    return corral::cli::RunSandbox(*options, corral::cli::DefaultRunEnvironment());
  }
  if (command == "gc") return corral::cli::RunGc(corral::cli::DefaultRunEnvironment());
  if (command == "version" || command == "--version") {
    printf("corral 0.1.0\n");
    return 0;
  }
  fprintf(stderr, "corral: unknown command '%s'\n%s", command.c_str(), kUsage);
  return 2;
}
