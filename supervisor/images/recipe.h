// Build recipes: the Dockerfile subset `corral image build` reads (issue 18). A pure parser: text
// in, steps out, no file or network access; the executor (image_build.h) does the work.
//
// Syntax (as Docker's, the subset below):
//  - one instruction a line; a line ending in `\` continues on the next; `#` at the start of a
//    line (after blanks) is a comment, also inside a continuation; blank lines are skipped;
//  - instructions are case-insensitive: FROM, RUN, COPY, ADD, ENV, WORKDIR, USER, ARG. Anything
//    else is an error naming the line ("line 7: unknown instruction CMD"): corral runs no
//    entrypoint (commands are the daemon's), so CMD, ENTRYPOINT, EXPOSE... are refused, not
//    silently dropped;
//  - FROM image | scratch: exactly one, the first instruction (only ARG may come before it).
//    No multi-stage builds (`AS name`, a second FROM);
//  - RUN command (shell form: ["/bin/sh", "-c", command]) or RUN ["prog", "arg"...] (exec form,
//    a JSON array of strings). No flags (--mount, --network: a RUN has its sandbox's network);
//  - COPY [--chown=uid[:gid]] src... dest, or the JSON form. Sources are paths relative to the
//    build context; an absolute source or one whose `..` climbs out of the context is refused.
//    No wildcards (`*` is a file name like any other), no --from. dest: absolute, or relative
//    to the WORKDIR in effect; several sources need a dest ending in "/". The owner is numeric
//    (an image's /etc/passwd is not read), root (0:0) by default;
//  - ADD archive /: a local tar (plain, gzip or zstd) in the context, unpacked at the image's
//    root as one layer: what `FROM scratch` needs for a rootfs tarball. ADD of URLs, of plain
//    files and to any other destination is refused (COPY copies files);
//  - ENV K=V [K2="v 2"...] or ENV K V; WORKDIR /abs (or relative to the previous one); USER
//    name|uid[:gid|:group]; ARG NAME[=default].
//  - Variables: `$NAME`, `${NAME}` and `${NAME:-default}` in FROM (ARGs only), COPY, ADD, ENV,
//    WORKDIR and USER are replaced by the ARG or ENV value in effect (unset: empty); `\$` is a
//    literal `$`. RUN's text is not substituted: its command sees the ARGs and ENVs as its
//    environment (exec form included), so the shell expands them as Docker's does.
//  - A `--build-arg` for a name no ARG declares is an error (a typo would otherwise build an
//    image silently without it).
//
// Caps: kMaxRecipeBytes of text, kMaxRecipeSteps instructions after FROM.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace corral::supervisor {

inline constexpr size_t kMaxRecipeBytes = 256 * 1024;
inline constexpr size_t kMaxRecipeSteps = 100;

enum class StepKind { kRun, kCopy, kAdd, kEnv, kWorkdir, kUser };

struct RecipeStep {
  StepKind kind = StepKind::kRun;
  int line = 0;                       // where the instruction starts (1-based)
  std::vector<std::string> argv;      // RUN: the command
  std::vector<std::string> env;       // RUN: the ARGs in effect ("K=V", sorted), besides the ENVs
  std::vector<std::string> sources;   // COPY, ADD: relative to the context, normalized ("a/b")
  std::string dest;                   // COPY, ADD: absolute; a trailing "/" kept (a directory)
  uint32_t uid = 0, gid = 0;          // COPY: the owner of what it copies
  std::string key, value;             // ENV (one step a variable)
  std::string path;                   // WORKDIR: absolute, normalized
  std::string user;                   // USER: as given after substitution

  // A canonical, unambiguous text of the step (JSON): what the build cache hashes with the
  // parent's id (and, for COPY and ADD, the sources' content).
  std::string CanonicalText() const;
};

struct Recipe {
  std::string from;  // an image name or "scratch", variables replaced
  int from_line = 0;
  std::vector<RecipeStep> steps;
};

// Parses `text` with the `--build-arg` values `build_args`. Errors (EINVAL) start with the line:
// "recipe line 3: COPY: source ../secret leaves the build context".
StatusOr<Recipe> ParseRecipe(std::string_view text, const std::map<std::string, std::string>& build_args);

// Lexically normalizes a path relative to the context ("./a//b/../c" -> "a/c"); an error when it
// is absolute, empty, holds NUL or climbs above the context. Exposed for the executor, which
// opens each source under the context with RESOLVE_BENEATH as well.
StatusOr<std::string> NormalizeContextPath(std::string_view path);

}  // namespace corral::supervisor
