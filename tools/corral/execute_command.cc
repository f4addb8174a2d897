#include "tools/corral/execute_command.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <thread>

#include "common/base64.h"
#include "common/file_util.h"
#include "common/unique_fd.h"
#include "tools/corral/client.h"
#include "tools/corral/json_text.h"

extern char** environ;

namespace corral::cli {
namespace {

using nlohmann::json;

constexpr int kExitFailed = 1;
constexpr int kExitRefused = 2;

// `git -C DIR bundle create - --all`, its stdout collected; git's stderr is the user's.
StatusOr<std::string> BundleWorkTree(const std::string& dir) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return ErrnoError("pipe");
  UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 1);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  const char* argv[] = {"git", "-C", dir.c_str(), "bundle", "create", "-q", "-", "--all", nullptr};
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, "git", &actions, nullptr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return ErrnoError("run git (is it installed?)", rc);
  write_end.reset();
  std::string bundle;
  char buffer[65536];
  for (;;) {
    ssize_t n = read(read_end.get(), buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    bundle.append(buffer, static_cast<size_t>(n));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::Error("git bundle create in " + dir + " failed (a repository with at least one commit?)");
  }
  return bundle;
}

StatusOr<std::string> RepoBundle(const std::string& repo) {
  struct stat st;
  if (stat(repo.c_str(), &st) != 0) return ErrnoError("--repo " + repo);
  if (S_ISDIR(st.st_mode)) return BundleWorkTree(repo);
  if (!S_ISREG(st.st_mode)) return Status::Error("--repo " + repo + ": neither a directory nor a bundle file");
  return ReadFileToString(repo);
}

// Downloads `target` into `path` (through a temporary file, renamed when complete).
Status Download(const Endpoint& endpoint, const std::string& target, const std::string& path) {
  const std::string partial = path + ".part";
  UniqueFd fd(open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return ErrnoError("create " + partial);
  auto reply = SendRequest(endpoint, "GET", target, "", "application/json", [&fd, &partial](std::string_view chunk) {
    while (!chunk.empty()) {
      ssize_t n = write(fd.get(), chunk.data(), chunk.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoError("write " + partial);
      chunk.remove_prefix(static_cast<size_t>(n));
    }
    return Status();
  });
  fd.reset();
  if (!reply.ok()) {
    unlink(partial.c_str());
    return reply.status();
  }
  if (rename(partial.c_str(), path.c_str()) != 0) return ErrnoError("rename " + partial);
  return Status();
}

std::string Query(const GitOptions& options) {
  std::string query;
  auto add = [&query](const char* key, const std::string& value) {
    if (value.empty()) return;
    query += (query.empty() ? "?" : "&") + std::string(key) + "=" + PercentEncode(value);
  };
  add("path", options.path);
  add("base", options.base);
  return query;
}

}  // namespace

std::string EncodeBase64(std::string_view data) { return Base64Encode(data); }

std::string FormatExecution(const json& record, const std::string& out_dir, bool have_bundle) {
  std::string text;
  const std::string state = StringAt(record, "state");
  text += "execution " + StringAt(record, "id") + ": " + state;
  if (!StringAt(record, "outcome").empty()) text += " (agent: " + StringAt(record, "outcome") + ")";
  text += "\n";
  if (!StringAt(record, "error").empty()) text += "error: " + StringAt(record, "error") + "\n";
  const std::string summary = StringAt(record, "summary");
  if (!summary.empty()) text += "\n" + summary + (summary.back() == '\n' ? "" : "\n");
  const json files = record.is_object() && record.contains("files_changed") ? record["files_changed"] : json::array();
  text += "\nfiles changed: " + std::to_string(files.is_array() ? files.size() : 0) + "\n";
  if (files.is_array()) {
    for (const auto& file : files) {
      std::string status = StringAt(file, "status");
      status.resize(std::max<size_t>(status.size(), 12), ' ');
      text += "  " + status + StringAt(file, "path");
      if (!StringAt(file, "from").empty()) text += " (from " + StringAt(file, "from") + ")";
      text += "\n";
    }
  }
  if (record.value("truncated", false)) text += "  (the diff in result.json is truncated)\n";
  int64_t calls = 0;
  if (record.contains("usage") && record["usage"].is_object()) calls = record["usage"].value("calls", int64_t{0});
  text += "cost: USD " + StringAt(record, "cost_usd") + " (" + std::to_string(calls) + " model call" +
          (calls == 1 ? "" : "s") + ")\n";
  text += "\nresult: " + out_dir + "/result.json\n";
  if (have_bundle) {
    text += "changes: " + out_dir + "/changes.bundle (" + StringAt(record, "base").substr(0, 12) + ".." +
            StringAt(record, "head").substr(0, 12) + ")\n"
            "  git fetch " + out_dir + "/changes.bundle && git log -p HEAD..FETCH_HEAD\n"
            "  git merge FETCH_HEAD    (or: git cherry-pick HEAD..FETCH_HEAD)\n";
  } else {
    text += "changes: none to fetch (no new commits)\n";
  }
  if (record.value("keep_sandbox", false) && record.contains("sandbox") && record["sandbox"].is_string()) {
    text += "sandbox: " + StringAt(record, "sandbox") + " (kept; the repository is in /home/agent/repo)\n";
  }
  return text;
}

int RunExecuteCommand(const ExecuteOptions& options) {
  const Endpoint endpoint = Endpoint::Server(options.server);
  auto bundle = RepoBundle(options.repo);
  if (!bundle.ok()) {
    fprintf(stderr, "corral: %s\n", bundle.status().ToString().c_str());
    return kExitRefused;
  }
  json body = {{"repo", {{"bundle", EncodeBase64(*bundle)}}}, {"task", options.task}};
  bundle->clear();
  if (options.keep) body["keep_sandbox"] = true;
  if (!options.model.empty()) body["model"] = options.model;
  if (options.timeout_s) body["timeout_s"] = *options.timeout_s;
  auto started = CallJson(endpoint, "POST", "/v1/execute", body);
  body.clear();
  if (!started.ok()) {
    fprintf(stderr, "corral: %s\n", started.status().ToString().c_str());
    return kExitRefused;
  }
  const std::string id = StringAt(*started, "id");
  fprintf(stderr, "corral: execution %s: the agent works in sandbox %s (session %s)\n", id.c_str(),
          StringAt(*started, "sandbox").c_str(), StringAt(*started, "session").c_str());

  json record;
  int unreachable = 0;
  for (auto pause = std::chrono::milliseconds(250);; pause = std::min(pause * 2, std::chrono::milliseconds(2000))) {
    std::this_thread::sleep_for(pause);
    auto polled = CallJson(endpoint, "GET", "/v1/executions/" + PercentEncode(id));
    if (!polled.ok()) {
      // A daemon restarting answers again soon (a minute of tries); anything else is final.
      if (polled.status().error_number() != 0 && ++unreachable < 30) continue;
      fprintf(stderr, "corral: %s (execution %s)\n", polled.status().ToString().c_str(), id.c_str());
      return kExitRefused;
    }
    unreachable = 0;
    if (StringAt(*polled, "state") != "running") {
      record = std::move(*polled);
      break;
    }
  }

  const std::string out_dir = options.out_dir.empty() ? ".corral-execute-" + id : options.out_dir;
  Status written = MakeDirs(out_dir, 0755);
  if (written.ok()) written = WriteNewFile(out_dir + "/result.json", Pretty(record), 0644);
  const bool have_bundle = record.value("bundle_bytes", int64_t{0}) > 0;
  if (written.ok() && have_bundle) {
    written = Download(endpoint, "/v1/executions/" + PercentEncode(id) + "/bundle", out_dir + "/changes.bundle");
  }
  if (!written.ok()) {
    fprintf(stderr, "corral: %s (the execution's record stays: GET /v1/executions/%s)\n",
            written.ToString().c_str(), id.c_str());
    return kExitFailed;
  }
  fputs(options.json ? Pretty(record).c_str() : FormatExecution(record, out_dir, have_bundle).c_str(), stdout);
  return StringAt(record, "state") == "completed" ? 0 : kExitFailed;
}

int RunGitCommand(const GitOptions& options) {
  const Endpoint endpoint = Endpoint::Server(options.server);
  const std::string target = "/v1/sandboxes/" + PercentEncode(options.sandbox) + "/git/" +
                             (options.verb == GitVerb::kDiff ? "diff" : "bundle") + Query(options);
  if (options.verb == GitVerb::kBundle) {
    Status downloaded = Download(endpoint, target, options.out);
    if (!downloaded.ok()) {
      fprintf(stderr, "corral: %s\n", downloaded.ToString().c_str());
      return kExitFailed;
    }
    fprintf(stderr, "corral: wrote %s; fetch it with: git fetch %s\n", options.out.c_str(), options.out.c_str());
    return 0;
  }
  auto diff = CallJson(endpoint, "GET", target);
  if (!diff.ok()) {
    fprintf(stderr, "corral: %s\n", diff.status().ToString().c_str());
    return kExitFailed;
  }
  fputs(options.json ? Pretty(*diff).c_str() : StringAt(*diff, "diff").c_str(), stdout);
  return 0;
}

}  // namespace corral::cli
