#!/usr/bin/env bash
# run-root-suite-in-vm.sh BUILD_DIR - the root test suites again, over the cgroup v2 backend.
#
# CTest entry point of test `cgroup_v2_suite_in_qemu` (tests/CMakeLists.txt). Boots ONE QEMU
# guest (Debian's kernel, a unified cgroup2 hierarchy at /sys/fs/cgroup; see README.md here and
# run-in-cgv2-vm.sh) that shares BUILD_DIR and the source tree read-write, and runs every root
# test binary BUILD_DIR/tests/root_* in it as root, one after the other, with
#   CORRAL_EXPECT_CGROUP_VERSION=2  and  --gtest_output=xml:BUILD_DIR/cgv2-results/<name>.xml
# (console output of each binary also goes to BUILD_DIR/cgv2-results/<name>.log).
#
# Exit status: 0 every binary passed, 1 any failed (or the guest/VM failed), 77 QEMU cannot run
# here (the one-line reason is on stderr; CTest shows the test as skipped).
#
# Environment: CORRAL_CGV2_TIMEOUT (whole VM, seconds; default 1400, below CTest's 1500),
# CORRAL_CGV2_BIN_TIMEOUT (per binary in the guest; default 300), CORRAL_CGV2_FILTER (passed as
# --gtest_filter), and every CGV2VM_* variable of run-in-cgv2-vm.sh (e.g. CGV2VM_CACHE).
set -uo pipefail

ME=cgroup_v2_suite_in_qemu
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
SRC=$(cd "$HERE/../.." && pwd -P)
RUNNER=$HERE/run-in-cgv2-vm.sh

skip() { echo "$ME: SKIPPED: $*" >&2; exit 77; }
fail() { echo "$ME: FAILED: $*" >&2; exit 1; }

[ $# -eq 1 ] || fail "usage: $0 BUILD_DIR"
[ -d "$1" ] || fail "BUILD_DIR $1 is not a directory"
BUILD=$(cd "$1" && pwd -P)

# --- can QEMU run here? (each reason is a skip, not a failure)
[ "$(uname -m)" = x86_64 ] || skip "host is $(uname -m); the cgroup v2 guest needs an x86_64 host"
[ "$(id -u)" = 0 ] || skip "not root (the guest runner and the root tests need root)"
command -v qemu-system-x86_64 >/dev/null \
  || skip "qemu-system-x86_64 not installed (dist/install-deps.sh installs qemu-system-x86)"

# --- which binaries (ELF executables named root_*; not the gtest_discover_tests *.cmake files)
BINS=()
for f in "$BUILD"/tests/root_*; do
  [ -f "$f" ] && [ -x "$f" ] || continue
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
  BINS+=("$f")
done
[ ${#BINS[@]} -gt 0 ] || fail "no root test binaries in $BUILD/tests (build first: root_* missing)"

case "$BUILD/" in "$SRC"/*) SHARES=(--share "$SRC") ;;           # build dir inside the clone
                  *)        SHARES=(--share "$SRC" --share "$BUILD") ;; esac

t0=$(date +%s.%N)
# kernel + initramfs into the cache (idempotent; ~0.1 s when ready, ~9 s the first time)
if ! prep=$("$RUNNER" --prepare 2>&1); then
  skip "cannot prepare the guest kernel (no Debian mirror / apt?): $(printf '%s\n' "$prep" | tail -1)"
fi

RESULTS=$BUILD/cgv2-results
rm -rf "$RESULTS"; mkdir -p "$RESULTS" || fail "cannot create $RESULTS"
echo "$ME: ${#BINS[@]} root test binaries, one guest (results in $RESULTS)"

CORRAL_EXPECT_CGROUP_VERSION=2 CORRAL_CGV2_FILTER=${CORRAL_CGV2_FILTER:-} \
CORRAL_CGV2_BIN_TIMEOUT=${CORRAL_CGV2_BIN_TIMEOUT:-300} \
  "$RUNNER" "${SHARES[@]}" --cwd "$BUILD" --merge-stderr --timeout "${CORRAL_CGV2_TIMEOUT:-1400}" \
  -- /bin/bash "$HERE/in-guest-root-suite.sh" "$RESULTS" "${BINS[@]}"
rc=$?
el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
case $rc in
  0)   echo "$ME: all ${#BINS[@]} binaries passed over cgroup v2 (${el} s wall, one boot)"; exit 0 ;;
  124) fail "the guest timed out (${el} s; CORRAL_CGV2_TIMEOUT)" ;;
  125) fail "the VM or its setup failed (rc 125, ${el} s; rerun with CGV2VM_CONSOLE=1 for the guest console)" ;;
  *)   fail "failures in the cgroup v2 suite (guest rc $rc, ${el} s; see $RESULTS)" ;;
esac
