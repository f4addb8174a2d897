// SandboxGit: git in a running sandbox, as its `agent` user, for the API's git routes and for
// headless executions. Each call is one short `sh -c` script run with RunToEnd (git is the one
// the sandbox's image has: the host's, for the "host" image); user input reaches it only as
// arguments, never as script text, and revisions are resolved with --end-of-options.
//
//   Diff    the working tree, untracked files included, against a base commit (default HEAD),
//           without touching the repository's index: the files are staged in a copy of it
//           (GIT_INDEX_FILE in /tmp, removed afterwards) and diffed from there.
//   Bundle  a git bundle of base..HEAD (all of HEAD without a base) that `git fetch` accepts.
//   Clone   a bundle file in the sandbox into a new repository; its HEAD commit.
//   CommitAll  commits whatever the working tree holds that HEAD does not (as "corral"); HEAD.
//
// Errors: git's own refusals (not a repository, an unknown revision, ...) are EINVAL with git's
// message; a sandbox that is not running EBUSY; output above the cap EFBIG; a git that hangs
// ETIMEDOUT. Callbacks run on the event loop, never from inside the call.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "common/status.h"
#include "supervisor/sandboxes/sandbox_manager.h"

namespace corral::supervisor {

// One changed path, from `git diff --raw`: status added|modified|deleted|renamed|copied|
// type_changed|unmerged|unknown; `from` is the old path of a rename or copy.
struct GitFileChange {
  std::string path;
  std::string status;
  std::string from;
};

struct GitDiff {
  std::string head;                   // the commit HEAD names; "" in a repository without commits
  std::string diff;                   // the patch (text; binary files as "Binary files ... differ")
  std::vector<GitFileChange> files;
  bool truncated = false;             // the patch (or, rarely, the file list) was cut at the cap
};

// Parses what the diff script prints: HEAD's commit on the first line, then the output of
// `git diff --patch-with-raw -z` (raw records ":old new sha sha X\0path\0[path\0]", one NUL,
// then the patch). The patch is cut to `max_patch_bytes` (truncated). Pure; for tests.
StatusOr<GitDiff> ParseDiffOutput(std::string_view output, size_t max_patch_bytes, bool output_truncated);

// "M" -> "modified", "R087" -> "renamed", ...
std::string GitStatusName(std::string_view letters);

class SandboxGit {
 public:
  template <typename T>
  using Done = std::function<void(StatusOr<T>)>;

  SandboxGit(boost::asio::io_context& io, SandboxManager& manager) : io_(io), manager_(manager) {}

  // `repo`: an absolute path in the sandbox (the repository or a directory in it). `base`: a
  // revision ("" = HEAD; the empty tree in a repository without commits). With `truncate`, a
  // patch above `max_bytes` is cut (GitDiff::truncated); without, it is EFBIG.
  void Diff(const Caller& caller, const UserCaps& caps, const std::string& sandbox, const std::string& repo,
            const std::string& base, size_t max_bytes, bool truncate, Done<GitDiff> done);
  // `base` "": every commit HEAD reaches. EINVAL when base..HEAD is empty (git refuses an empty
  // bundle); EFBIG above `max_bytes`.
  void Bundle(const Caller& caller, const UserCaps& caps, const std::string& sandbox, const std::string& repo,
              const std::string& base, size_t max_bytes, Done<std::string> done);
  // Clones the bundle file `bundle` (removed afterwards) into the new directory `repo`; its HEAD.
  void Clone(const Caller& caller, const UserCaps& caps, const std::string& sandbox, const std::string& bundle,
             const std::string& repo, Done<std::string> done);
  // `git add -A` and, when that staged anything, a commit with `message`; HEAD afterwards.
  void CommitAll(const Caller& caller, const UserCaps& caps, const std::string& sandbox, const std::string& repo,
                 const std::string& message, Done<std::string> done);

  // How long one git script may take.
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

 private:
  boost::asio::io_context& io_;
  SandboxManager& manager_;
  std::chrono::milliseconds timeout_ = std::chrono::minutes(5);
};

}  // namespace corral::supervisor
