#!/usr/bin/env bash
# build-previous.sh SOURCE_DIR [OUT_DIR] - builds the previous release named in
# dist/previous-release (its corrald, corral, corral-init and corral-mcp) into OUT_DIR/build, from
# `git archive` of that commit (the checkout is not touched), and prints OUT_DIR/build. OUT_DIR
# defaults to $CORRAL_PREVIOUS_CACHE/<commit> (/var/cache/corral/previous/<commit>): built once
# per commit for every build tree of this machine. Unoptimized and without debug info: the
# fastest build that runs. OUT_DIR/build/.built-<commit> marks a finished build.
# Callers at once (dist/test.sh starts it early; e2e test_upgrade and package_install need it)
# take turns on OUT_DIR.lock: the second waits for the first build and then uses it.
# Exit 77 (the reason on stderr) when the commit is not in this clone (a shallow clone).
set -euo pipefail
SRC=$1
commit=$(grep -v '^#' "$SRC/dist/previous-release" | head -1 | awk '{print $1}')
[ -n "$commit" ] || { echo "build-previous: no commit in dist/previous-release" >&2; exit 1; }
OUT=${2:-${CORRAL_PREVIOUS_CACHE:-/var/cache/corral/previous}/$commit}
mkdir -p "$(dirname "$OUT")"
exec 9>"$OUT.lock"
flock 9
if [ -f "$OUT/build/.built-$commit" ]; then echo "$OUT/build"; exit 0; fi
if ! git -C "$SRC" cat-file -e "$commit^{commit}" 2>/dev/null; then
  echo "build-previous: commit $commit is not in this clone (shallow?): git fetch --unshallow" >&2
  exit 77
fi
rm -rf "$OUT"
mkdir -p "$OUT/src"
git -C "$SRC" archive "$commit" | tar -x -C "$OUT/src"
cmake -S "$OUT/src" -B "$OUT/build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG= -DCMAKE_CXX_FLAGS_DEBUG= \
  -DCORRAL_BUILD_TESTS=OFF > "$OUT/configure.log" 2>&1 || { cat "$OUT/configure.log" >&2; exit 1; }
cmake --build "$OUT/build" -j"$(nproc)" --target corrald corral corral-init corral-mcp > "$OUT/build.log" 2>&1 \
  || { tail -40 "$OUT/build.log" >&2; exit 1; }
touch "$OUT/build/.built-$commit"
echo "$OUT/build"
