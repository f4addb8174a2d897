// corral: the command line's front door. `corral run` and `corral gc` drive the sandbox engine on
// this host, and run here: a small static program that starts in a fraction of a millisecond, so
// that a sandbox's cold start is the sandbox's and not the dynamic loader's (bench/cold_start.sh).
// Every other command is the full client, corral-cli (main.cc: the API, the admin socket, images,
// tar, tokens; linked with libarchive, OpenSSL, SQLite), which this executes with the same
// arguments: beside this program in a build tree, else from the package's libexec directory.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/corral/run_command.h"

namespace {

std::string Beside(const char* name) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return "";
  std::string exe(self, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/') + 1) + name;
}

// Runs corral-cli with this program's arguments; returns only when it could not.
int ExecFullClient(char** argv) {
  std::string path = Beside("corral-cli");
  if (path.empty() || access(path.c_str(), X_OK) != 0) path = CORRAL_LIBEXEC_DIR "/corral-cli";
  execv(path.c_str(), argv);
  fprintf(stderr, "corral: cannot run %s: %s\n", path.c_str(), strerror(errno));
  return 127;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace corral::cli;
  const char* command = argc >= 2 ? argv[1] : "";
  if (strcmp(command, "run") == 0) return RunMain(std::vector<std::string>(argv + 2, argv + argc));
  if (strcmp(command, "gc") == 0) return RunGc(DefaultRunEnvironment());
  return ExecFullClient(argv);
}
