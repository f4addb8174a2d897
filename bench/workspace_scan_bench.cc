// workspace_scan_bench: what one scan of a session's workspace costs (the `file_change` events,
// supervisor/sessions/workspace_scan.h), against GNU find describing the same entries.
//
//   workspace_scan_bench [ENTRIES] [RUNS]        (ENTRIES: 20000, sessions.file_scan_entries'
//                                                 default; RUNS: 15)
//
// Makes a tree of about ENTRIES entries in a fresh directory under /tmp, shaped like a project
// with its dependencies (directories of 50 files, two levels deep), and, alternating, times
//   - ScanWorkspace over it, as corrald runs it (openat2 per directory, statx per entry, names
//     sorted), through "/" as the root;
//   - `find DIR -printf '%y %s %i %T@ %C@\n'` (one lstat per entry, what a scan learns of each),
//     started with posix_spawn, its output to /dev/null;
// both with the tree in the page cache (one untimed run of each first). Then DiffScans of two
// scans between which 1% of the files changed, and the memory one scan holds (malloc's count of
// bytes in use with the scan and without). Prints medians, the ratio to find, the CPU model, and
// what corrald's scan pacing makes of them (a scan at most every max(interval, 10 x its time)).
// No root needed. Removes its tree.
#include <fcntl.h>
#include <malloc.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "supervisor/sessions/workspace_scan.h"

extern char** environ;

using corral::supervisor::DiffScans;
using corral::supervisor::ScanLimits;
using corral::supervisor::ScanWorkspace;
using corral::supervisor::WorkspaceScan;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kFilesPerDir = 50;

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

void WriteFile(const std::string& path, size_t size) {
  std::ofstream out(path, std::ios::binary);
  out << std::string(size, 'x');
  if (!out) {
    std::perror(path.c_str());
    std::exit(1);
  }
}

// pkg_NNN/sub_NN/file_NN.js: about `entries` entries (files and their directories).
std::vector<std::string> MakeTree(const std::string& top, size_t entries) {
  std::vector<std::string> files;
  size_t made = 0;
  for (int pkg = 0; made < entries; ++pkg) {
    const std::string package = top + "/pkg_" + std::to_string(pkg);
    std::filesystem::create_directory(package);
    ++made;
    for (int sub = 0; sub < 4 && made < entries; ++sub) {
      const std::string dir = package + "/sub_" + std::to_string(sub);
      std::filesystem::create_directory(dir);
      ++made;
      for (int f = 0; f < kFilesPerDir && made < entries; ++f, ++made) {
        files.push_back(dir + "/file_" + std::to_string(f) + ".js");
        WriteFile(files.back(), 100 + static_cast<size_t>(f) * 37);
      }
    }
  }
  return files;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Millis(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

WorkspaceScan Scan(int root, const std::string& dir, const ScanLimits& limits) {
  auto scan = ScanWorkspace(root, dir, limits);
  if (!scan.ok()) {
    std::fprintf(stderr, "scan: %s\n", scan.status().message().c_str());
    std::exit(1);
  }
  return std::move(*scan);
}

double TimeFind(const std::string& dir) {
  std::string format = "%y %s %i %T@ %C@\\n";
  std::vector<char*> argv = {const_cast<char*>("find"), const_cast<char*>(dir.c_str()),
                             const_cast<char*>("-printf"), format.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  const auto began = Clock::now();
  pid_t pid = 0;
  if (posix_spawnp(&pid, "find", &actions, nullptr, argv.data(), environ) != 0) {
    std::perror("posix_spawnp find");
    std::exit(1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  const double took = Millis(began);
  posix_spawn_file_actions_destroy(&actions);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "find failed\n");
    std::exit(1);
  }
  return took;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t entries = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 20000;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 15;
  char templ[] = "/tmp/corral-scan-bench-XXXXXX";
  if (mkdtemp(templ) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string top = templ;
  const std::vector<std::string> files = MakeTree(top, entries);
  const int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  ScanLimits limits;
  limits.max_entries = entries + 1;

  // Warm the page cache and the dentries for both.
  WorkspaceScan first = Scan(root, top, limits);
  TimeFind(top);
  std::vector<double> scan_ms, find_ms;
  for (int i = 0; i < runs; ++i) {
    auto began = Clock::now();
    WorkspaceScan scan = Scan(root, top, limits);
    scan_ms.push_back(Millis(began));
    find_ms.push_back(TimeFind(top));
  }

  // 1% of the files changed (a size each), then the diff of the two scans.
  for (size_t i = 0; i < files.size(); i += 100) WriteFile(files[i], 7);
  WorkspaceScan after = Scan(root, top, limits);
  std::vector<double> diff_ms;
  size_t changes = 0;
  for (int i = 0; i < runs; ++i) {
    auto began = Clock::now();
    changes = DiffScans(first, after).size();
    diff_ms.push_back(Millis(began));
  }

  // What one scan holds.
  const size_t before = mallinfo2().uordblks;
  size_t held = 0;
  {
    WorkspaceScan scan = Scan(root, top, limits);
    held = mallinfo2().uordblks - before;
  }
  close(root);
  std::filesystem::remove_all(top);

  const double scan = Median(scan_ms);
  const double find = Median(find_ms);
  const size_t seen = first.entries.size();
  std::printf("CPU: %s, %ld cores\n", CpuModel().c_str(), sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("tree: %zu entries (%zu files), page cache warm, %d runs each, medians\n", seen, files.size(), runs);
  std::printf("ScanWorkspace:        %8.2f ms  (%.2f us an entry)\n", scan, scan * 1000 / static_cast<double>(seen));
  std::printf("find -printf (lstat): %8.2f ms  (ratio scan/find: %.2f)\n", find, scan / find);
  std::printf("DiffScans:            %8.2f ms  (%zu changes found of %zu made)\n", Median(diff_ms), changes,
              (files.size() + 99) / 100);
  std::printf("memory of one scan:   %8zu bytes (%.0f bytes an entry)\n", held,
              static_cast<double>(held) / static_cast<double>(seen));
  std::printf("pacing at sessions.file_scan_interval = 2 s: a scan every %.2f s, %.1f%% of a core per session\n",
              std::max(2.0, scan * 10 / 1000), 100 * scan / 1000 / std::max(2.0, scan * 10 / 1000));
  return 0;
}
