#include "tools/corral/host_tools.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <glob.h>
#include <poll.h>
#include <regex.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "tools/corral/json_text.h"

extern char** environ;

namespace corral::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr size_t kMaxOutputBytes = 256 << 10;   // what one result carries back to the agent
constexpr uintmax_t kMaxFileBytes = 8 << 20;    // files HostRead/HostEdit/HostGrep open
constexpr int kDefaultBashTimeout = 120;
constexpr int kMaxBashTimeout = 600;
constexpr size_t kMaxMatches = 500;

HostToolResult Error(std::string text) { return {std::move(text), true}; }

// The output, cut to kMaxOutputBytes with a note.
std::string Capped(std::string text) {
  if (text.size() <= kMaxOutputBytes) return text;
  const size_t total = text.size();
  text.resize(kMaxOutputBytes);
  return text + "\n[cut: " + std::to_string(total) + " bytes in all]";
}

// `path` (relative to root, or absolute) as a path inside root, symlinks followed; an error when
// it leads outside.
bool Resolve(const std::string& root, const std::string& path, fs::path* out, std::string* why) {
  if (path.empty()) {
    *why = "path: required";
    return false;
  }
  std::error_code ec;
  fs::path joined = fs::path(path).is_absolute() ? fs::path(path) : fs::path(root) / path;
  fs::path resolved = fs::weakly_canonical(joined, ec);
  if (ec) {
    *why = path + ": " + ec.message();
    return false;
  }
  const std::string text = resolved.string();
  if (text != root && text.rfind(root + "/", 0) != 0) {
    *why = path + " is outside the working directory " + root;
    return false;
  }
  *out = resolved;
  return true;
}

bool ReadSmallFile(const fs::path& path, std::string* content, std::string* why) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    *why = path.string() + ": not a regular file";
    return false;
  }
  if (fs::file_size(path, ec) > kMaxFileBytes) {
    *why = path.string() + ": larger than " + std::to_string(kMaxFileBytes) + " bytes";
    return false;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *why = path.string() + ": " + strerror(errno);
    return false;
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  *content = buffer.str();
  return true;
}

bool WriteFile(const fs::path& path, const std::string& content, std::string* why) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !out.write(content.data(), static_cast<std::streamsize>(content.size()))) {
    *why = path.string() + ": " + strerror(errno);
    return false;
  }
  return true;
}

int64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

HostToolResult Bash(const json& input, const std::string& root) {
  const std::string command = StringAt(input, "command");
  if (command.empty()) return Error("command: required");
  int timeout = kDefaultBashTimeout;
  if (input.contains("timeout_s") && input["timeout_s"].is_number_integer()) {
    timeout = std::clamp(input["timeout_s"].get<int>(), 1, kMaxBashTimeout);
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return Error(std::string("pipe: ") + strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  posix_spawn_file_actions_addchdir_np(&actions, root.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // its own group: a timeout kills it all
  posix_spawnattr_setpgroup(&attr, 0);
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, "/bin/sh", &actions, &attr, const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(pipe_fds[1]);
  if (rc != 0) {
    close(pipe_fds[0]);
    return Error(std::string("cannot run /bin/sh: ") + strerror(rc));
  }
  std::string output;
  bool timed_out = false;
  const int64_t deadline = NowMs() + static_cast<int64_t>(timeout) * 1000;
  char buffer[65536];
  for (;;) {
    const int64_t left = deadline - NowMs();
    if (left <= 0) {
      timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    pollfd p = {pipe_fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t n = read(pipe_fds[0], buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (output.size() < kMaxOutputBytes * 2) output.append(buffer, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string head;
  if (timed_out) {
    head = "timed out after " + std::to_string(timeout) + " s (killed)\n";
  } else if (WIFEXITED(status)) {
    head = "exit code " + std::to_string(WEXITSTATUS(status)) + "\n";
  } else if (WIFSIGNALED(status)) {
    head = "killed by signal " + std::to_string(WTERMSIG(status)) + "\n";
  }
  const bool failed = timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  return {Capped(head + output), failed};
}

HostToolResult Read(const json& input, const std::string& root) {
  fs::path path;
  std::string why, content;
  if (!Resolve(root, StringAt(input, "path"), &path, &why) || !ReadSmallFile(path, &content, &why)) return Error(why);
  int64_t offset = 1, limit = 2000;
  if (input.contains("offset") && input["offset"].is_number_integer()) offset = std::max<int64_t>(1, input["offset"]);
  if (input.contains("limit") && input["limit"].is_number_integer()) limit = std::max<int64_t>(1, input["limit"]);
  std::istringstream lines(content);
  std::string line, out;
  int64_t number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (number < offset) continue;
    if (number >= offset + limit) break;
    char prefix[24];
    snprintf(prefix, sizeof(prefix), "%6lld\t", static_cast<long long>(number));
    out += prefix + line + "\n";
  }
  if (out.empty()) out = content.empty() ? "(empty file)" : "(no lines at offset " + std::to_string(offset) + ")";
  return {Capped(out), false};
}

HostToolResult Write(const json& input, const std::string& root) {
  fs::path path;
  std::string why;
  if (!input.contains("content") || !input["content"].is_string()) return Error("content: required");
  if (!Resolve(root, StringAt(input, "path"), &path, &why)) return Error(why);
  const std::string content = input["content"].get<std::string>();
  if (!WriteFile(path, content, &why)) return Error(why);
  return {"wrote " + std::to_string(content.size()) + " bytes to " + path.string(), false};
}

HostToolResult Edit(const json& input, const std::string& root) {
  fs::path path;
  std::string why, content;
  const std::string old_text = StringAt(input, "old_string");
  if (old_text.empty()) return Error("old_string: required, not empty");
  if (!input.contains("new_string") || !input["new_string"].is_string()) return Error("new_string: required");
  const std::string new_text = input["new_string"].get<std::string>();
  const bool all = input.value("replace_all", false);
  if (!Resolve(root, StringAt(input, "path"), &path, &why) || !ReadSmallFile(path, &content, &why)) return Error(why);
  size_t count = 0;
  for (size_t at = content.find(old_text); at != std::string::npos; at = content.find(old_text, at + old_text.size())) {
    ++count;
  }
  if (count == 0) return Error("old_string does not occur in " + path.string());
  if (count > 1 && !all) {
    return Error("old_string occurs " + std::to_string(count) + " times in " + path.string() +
                 "; give more context or replace_all");
  }
  std::string edited;
  size_t from = 0;
  for (size_t at = content.find(old_text); at != std::string::npos; at = content.find(old_text, from)) {
    edited.append(content, from, at - from);
    edited += new_text;
    from = at + old_text.size();
    if (!all) break;
  }
  edited.append(content, from, std::string::npos);
  if (!WriteFile(path, edited, &why)) return Error(why);
  return {"replaced " + std::to_string(all ? count : 1) + " occurrence(s) in " + path.string(), false};
}

// A pattern or path relative to the directory, without ".." (glob would follow it out).
bool Contained(const std::string& pattern) {
  if (pattern.empty() || pattern[0] == '/') return false;
  for (const auto& part : fs::path(pattern)) {
    if (part == "..") return false;
  }
  return true;
}

HostToolResult Glob(const json& input, const std::string& root) {
  const std::string pattern = StringAt(input, "pattern");
  if (!Contained(pattern)) return Error("pattern: a relative pattern without \"..\", e.g. src/*.cc");
  glob_t found = {};
  const int rc = glob((root + "/" + pattern).c_str(), GLOB_MARK, nullptr, &found);
  std::string out;
  size_t shown = 0;
  if (rc == 0) {
    for (size_t i = 0; i < found.gl_pathc && shown < 1000; ++i, ++shown) {
      out += std::string(found.gl_pathv[i]).substr(root.size() + 1) + "\n";
    }
    if (found.gl_pathc > shown) out += "[" + std::to_string(found.gl_pathc - shown) + " more]\n";
  }
  globfree(&found);
  if (rc == GLOB_NOMATCH || (rc == 0 && out.empty())) return {"no match", false};
  if (rc != 0) return Error("glob failed");
  return {Capped(out), false};
}

HostToolResult Grep(const json& input, const std::string& root) {
  const std::string pattern = StringAt(input, "pattern");
  if (pattern.empty()) return Error("pattern: required (an extended regular expression)");
  regex_t regex;
  if (regcomp(&regex, pattern.c_str(), REG_EXTENDED | REG_NOSUB) != 0) return Error("pattern: not a valid regex");
  fs::path base;
  std::string why;
  const std::string where = StringAt(input, "path").empty() ? "." : StringAt(input, "path");
  if (!Resolve(root, where, &base, &why)) {
    regfree(&regex);
    return Error(why);
  }
  const std::string name_glob = StringAt(input, "glob");
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_regular_file(base, ec)) {
    files.push_back(base);
  } else {
    for (auto it = fs::recursive_directory_iterator(base, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_directory(ec) && it->path().filename() == ".git") {
        it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
      if (!name_glob.empty() && fnmatch(name_glob.c_str(), it->path().filename().c_str(), 0) != 0) continue;
      files.push_back(it->path());
    }
  }
  std::string out;
  size_t matches = 0;
  for (const fs::path& file : files) {
    std::string content, skip;
    if (!ReadSmallFile(file, &content, &skip)) continue;
    if (content.find('\0') != std::string::npos) continue;  // binary
    std::istringstream lines(content);
    std::string line;
    size_t number = 0;
    const std::string shown = file.string() == root ? "." : file.string().substr(root.size() + 1);
    while (std::getline(lines, line) && matches < kMaxMatches) {
      ++number;
      if (regexec(&regex, line.c_str(), 0, nullptr, 0) == 0) {
        out += shown + ":" + std::to_string(number) + ":" + line + "\n";
        ++matches;
      }
    }
  }
  regfree(&regex);
  if (matches >= kMaxMatches) out += "[stopped at " + std::to_string(kMaxMatches) + " matches]\n";
  return {out.empty() ? "no match" : Capped(out), false};
}

json Schema(json properties, std::vector<std::string> required) {
  return {{"type", "object"}, {"properties", std::move(properties)}, {"required", std::move(required)}};
}

}  // namespace

json HostToolDeclarations() {
  const json text = {{"type", "string"}};
  const json integer = {{"type", "integer"}};
  return json::array({
      {{"name", "HostBash"},
       {"description",
        "Runs a shell command on the user's own machine (not in the sandbox), in the directory the user started "
        "corral in. Returns the exit code and the output. The user is asked first."},
       {"input_schema", Schema({{"command", text}, {"timeout_s", integer}}, {"command"})}},
      {{"name", "HostRead"},
       {"description", "Reads a file on the user's machine (relative to the user's working directory), with line "
                       "numbers."},
       {"input_schema", Schema({{"path", text}, {"offset", integer}, {"limit", integer}}, {"path"})}},
      {{"name", "HostWrite"},
       {"description", "Creates or replaces a file on the user's machine (inside the user's working directory)."},
       {"input_schema", Schema({{"path", text}, {"content", text}}, {"path", "content"})}},
      {{"name", "HostEdit"},
       {"description", "Replaces old_string (which must occur exactly once, unless replace_all) with new_string in "
                       "a file on the user's machine."},
       {"input_schema", Schema({{"path", text}, {"old_string", text}, {"new_string", text},
                                {"replace_all", {{"type", "boolean"}}}},
                               {"path", "old_string", "new_string"})}},
      {{"name", "HostGlob"},
       {"description", "Lists files on the user's machine matching a glob pattern relative to the working directory."},
       {"input_schema", Schema({{"pattern", text}}, {"pattern"})}},
      {{"name", "HostGrep"},
       {"description", "Searches files on the user's machine for an extended regular expression; path narrows the "
                       "search, glob filters file names."},
       {"input_schema", Schema({{"pattern", text}, {"path", text}, {"glob", text}}, {"pattern"})}},
  });
}

bool IsHostTool(const std::string& name) {
  for (const char* tool : {"HostBash", "HostRead", "HostWrite", "HostEdit", "HostGlob", "HostGrep"}) {
    if (name == tool) return true;
  }
  return false;
}

HostToolResult RunHostTool(const std::string& name, const json& input, const std::string& root) {
  try {
    if (!input.is_object()) return Error("input: expected an object");
    if (name == "HostBash") return Bash(input, root);
    if (name == "HostRead") return Read(input, root);
    if (name == "HostWrite") return Write(input, root);
    if (name == "HostEdit") return Edit(input, root);
    if (name == "HostGlob") return Glob(input, root);
    if (name == "HostGrep") return Grep(input, root);
    return Error("no such host tool: " + name);
  } catch (const std::exception& e) {
    return Error(std::string("host tool failed: ") + e.what());
  }
}

std::string DescribeHostCall(const std::string& name, const json& input) {
  std::string what;
  for (const char* key : {"command", "path", "pattern"}) {
    if (input.contains(key) && input[key].is_string()) {
      what = input[key].get<std::string>();
      break;
    }
  }
  if (what.empty()) what = input.dump();
  for (char& c : what) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  if (what.size() > 200) what = what.substr(0, 200) + "...";
  return name + ": " + what;
}

}  // namespace corral::cli
