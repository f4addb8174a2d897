#include "supervisor/sandboxes/sandbox_git.h"

#include <cerrno>
#include <utility>

#include "supervisor/commands/run_to_end.h"

namespace corral::supervisor {
namespace {

// Every script starts in $1, the repository (the argument, never the command's cwd: a missing
// directory is then git's kind of error, not a failed start).
// An image without git: exit 127 and a message of ours rather than the shell's.
constexpr char kEnterRepo[] = R"sh(set -e
command -v git >/dev/null 2>&1 || { echo "this sandbox has no git (its image has none)" >&2; exit 127; }
cd -- "$1" 2>/dev/null || { printf 'no such directory: %s\n' "$1" >&2; exit 2; }
git rev-parse --git-dir >/dev/null
)sh";

// $2: the base revision, or "" for HEAD (the empty tree when there is no commit yet).
constexpr char kDiffScript[] = R"sh(head=$(git rev-parse -q --verify 'HEAD^{commit}' || true)
if [ -n "$2" ]; then
  base=$(git rev-parse -q --verify --end-of-options "$2^{commit}") || { printf 'unknown revision: %s\n' "$2" >&2; exit 2; }
elif [ -n "$head" ]; then
  base=$head
else
  base=$(git hash-object -t tree /dev/null)
fi
idx=$(mktemp /tmp/corral-index.XXXXXX)
trap 'rm -f "$idx"' EXIT
index=$(git rev-parse --git-path index)
if [ -f "$index" ]; then cp -- "$index" "$idx"; else rm -f "$idx"; fi
GIT_INDEX_FILE=$idx git add -A
printf '%s\n' "$head"
GIT_INDEX_FILE=$idx git diff --cached --patch-with-raw -z --no-color --no-ext-diff --no-textconv "$base" --
)sh";

// $2: the base revision, or "" for everything HEAD reaches. HEAD and its branch are the refs.
constexpr char kBundleScript[] = R"sh(git rev-parse -q --verify 'HEAD^{commit}' >/dev/null || { echo 'the repository has no commits' >&2; exit 2; }
branch=$(git symbolic-ref -q HEAD || true)
if [ -n "$2" ]; then
  base=$(git rev-parse -q --verify --end-of-options "$2^{commit}") || { printf 'unknown revision: %s\n' "$2" >&2; exit 2; }
  exec git bundle create -q - HEAD ${branch:+"$branch"} --not "$base"
fi
exec git bundle create -q - HEAD ${branch:+"$branch"}
)sh";

// $1: the bundle file (removed in any case), $2: the new repository.
constexpr char kCloneScript[] = R"sh(set -e
trap 'rm -f -- "$1"' EXIT
git clone -q --no-hardlinks -- "$1" "$2"
cd -- "$2"
git rev-parse -q --verify 'HEAD^{commit}' || { echo 'the bundle has no HEAD commit (make it with: git bundle create FILE --all)' >&2; exit 2; }
)sh";

// $2: the commit message.
constexpr char kCommitScript[] = R"sh(git add -A
if ! git diff --cached --quiet --no-ext-diff; then
  git -c user.name=corral -c user.email=agent@corral.invalid -c commit.gpgsign=false commit -q --no-verify -m "$2"
fi
git rev-parse 'HEAD^{commit}'
)sh";

ExecSpec Script(const std::string& sandbox, const std::string& script, std::vector<std::string> args) {
  ExecSpec spec;
  spec.sandbox = sandbox;
  spec.cwd = "/";
  spec.argv = {"/bin/sh", "-c", script, "corral-git"};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  // Nothing asks a terminal for credentials; no pager, no colors.
  spec.env = {"GIT_TERMINAL_PROMPT=0", "GIT_PAGER=cat", "LC_ALL=C"};
  return spec;
}

std::string Trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  return text;
}

// A script that did not succeed: git's message (the last lines of stderr) as EINVAL (ENOTSUP
// when the sandbox has no git), or the error RunToEnd gave.
Status Failure(const std::string& what, const StatusOr<RunToEndResult>& run) {
  if (!run.ok()) return run.status().WithContext(what);
  std::string message = Trim(run->err);
  constexpr size_t kMaxMessage = 2000;
  if (message.size() > kMaxMessage) message = "..." + message.substr(message.size() - kMaxMessage);
  if (run->exit_code) {
    return Status::Error(what + ": " + (message.empty() ? "git failed" : message),
                         *run->exit_code == 127 ? ENOTSUP : EINVAL);
  }
  // Killed or never started: the outcome says how.
  const std::string outcome = run->outcome.is_object() ? run->outcome.value("outcome", "?") : "?";
  return Status::Error(what + ": git ended " + outcome + (message.empty() ? "" : ": " + message), EBUSY);
}

bool IsHex(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

std::string GitStatusName(std::string_view letters) {
  switch (letters.empty() ? '?' : letters[0]) {
    case 'A': return "added";
    case 'M': return "modified";
    case 'D': return "deleted";
    case 'R': return "renamed";
    case 'C': return "copied";
    case 'T': return "type_changed";
    case 'U': return "unmerged";
    default: return "unknown";
  }
}

StatusOr<GitDiff> ParseDiffOutput(std::string_view output, size_t max_patch_bytes, bool output_truncated) {
  GitDiff diff;
  const size_t newline = output.find('\n');
  if (newline == std::string_view::npos) return Status::Error("git diff: no HEAD line in its output", EIO);
  diff.head = std::string(output.substr(0, newline));
  if (!diff.head.empty() && !IsHex(diff.head)) return Status::Error("git diff: HEAD is not a commit id", EIO);
  std::string_view rest = output.substr(newline + 1);
  // Raw records: ":100644 100644 <sha> <sha> M\0path\0", renames and copies with two paths.
  // A record without its end: the output was cut at the cap (nothing of the patch is there).
  const Status cut = Status::Error("git diff: a raw record without its end", EIO);
  while (!rest.empty() && rest[0] == ':') {
    const size_t meta_end = rest.find('\0');
    if (meta_end == std::string_view::npos) {
      if (!output_truncated) return cut;
      rest = {};
      break;
    }
    std::string_view meta = rest.substr(0, meta_end);
    const size_t space = meta.rfind(' ');
    const std::string status = GitStatusName(space == std::string_view::npos ? "" : meta.substr(space + 1));
    const bool two_paths = status == "renamed" || status == "copied";
    size_t at = meta_end + 1;
    std::string_view paths[2];
    bool complete = true;
    for (int i = 0; i < (two_paths ? 2 : 1); ++i) {
      const size_t end = rest.find('\0', at);
      if (end == std::string_view::npos) {
        complete = false;
        break;
      }
      paths[i] = rest.substr(at, end - at);
      at = end + 1;
    }
    if (!complete) {
      if (!output_truncated) return cut;
      rest = {};
      break;
    }
    GitFileChange change;
    change.status = status;
    if (two_paths) {
      change.from = std::string(paths[0]);
      change.path = std::string(paths[1]);
    } else {
      change.path = std::string(paths[0]);
    }
    diff.files.push_back(std::move(change));
    rest.remove_prefix(at);
  }
  // One NUL between the records and the patch; nothing at all when nothing changed.
  if (!rest.empty() && rest[0] == '\0') rest.remove_prefix(1);
  diff.truncated = output_truncated;
  if (rest.size() > max_patch_bytes) {
    rest = rest.substr(0, max_patch_bytes);
    diff.truncated = true;
  }
  diff.diff = std::string(rest);
  return diff;
}

void SandboxGit::Diff(const Caller& caller, const UserCaps& caps, const std::string& sandbox, const std::string& repo,
                      const std::string& base, size_t max_bytes, bool truncate, Done<GitDiff> done) {
  RunToEndOptions options;
  // Room for HEAD's line and the raw records beside the patch itself.
  options.max_stdout_bytes = max_bytes + (truncate ? (1 << 20) : 0);
  options.truncate_stdout = truncate;
  options.timeout = timeout_;
  RunToEnd(io_, manager_, caller, caps, Script(sandbox, std::string(kEnterRepo) + kDiffScript, {repo, base}), options,
           [done = std::move(done), max_bytes](StatusOr<RunToEndResult> run) {
             if (!run.ok() || !run->succeeded()) return done(Failure("git diff", run));
             done(ParseDiffOutput(run->out, max_bytes, run->truncated));
           });
}

void SandboxGit::Bundle(const Caller& caller, const UserCaps& caps, const std::string& sandbox,
                        const std::string& repo, const std::string& base, size_t max_bytes, Done<std::string> done) {
  RunToEndOptions options;
  options.max_stdout_bytes = max_bytes;
  options.timeout = timeout_;
  RunToEnd(io_, manager_, caller, caps, Script(sandbox, std::string(kEnterRepo) + kBundleScript, {repo, base}),
           options, [done = std::move(done)](StatusOr<RunToEndResult> run) {
             if (!run.ok() || !run->succeeded()) return done(Failure("git bundle", run));
             done(std::move(run->out));
           });
}

void SandboxGit::Clone(const Caller& caller, const UserCaps& caps, const std::string& sandbox,
                       const std::string& bundle, const std::string& repo, Done<std::string> done) {
  RunToEndOptions options;
  options.max_stdout_bytes = 4096;
  options.timeout = timeout_;
  RunToEnd(io_, manager_, caller, caps, Script(sandbox, kCloneScript, {bundle, repo}), options,
           [done = std::move(done)](StatusOr<RunToEndResult> run) {
             if (!run.ok() || !run->succeeded()) return done(Failure("git clone", run));
             const std::string head = Trim(run->out);
             if (!IsHex(head)) return done(Status::Error("git clone: HEAD is not a commit id", EIO));
             done(head);
           });
}

void SandboxGit::CommitAll(const Caller& caller, const UserCaps& caps, const std::string& sandbox,
                           const std::string& repo, const std::string& message, Done<std::string> done) {
  RunToEndOptions options;
  options.max_stdout_bytes = 64 << 10;
  options.timeout = timeout_;
  RunToEnd(io_, manager_, caller, caps, Script(sandbox, std::string(kEnterRepo) + kCommitScript, {repo, message}),
           options, [done = std::move(done)](StatusOr<RunToEndResult> run) {
             if (!run.ok() || !run->succeeded()) return done(Failure("git commit", run));
             const std::string head = Trim(run->out);
             if (!IsHex(head)) return done(Status::Error("git commit: HEAD is not a commit id", EIO));
             done(head);
           });
}

}  // namespace corral::supervisor
