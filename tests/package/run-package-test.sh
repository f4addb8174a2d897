#!/usr/bin/env bash
# run-package-test.sh BUILD_DIR - the Debian package on a clean Debian 12, in a QEMU guest that
# boots systemd.
#
# CTest entry point of test `package_install` (tests/CMakeLists.txt):
#   1. builds the package from BUILD_DIR (cpack; BUILD_DIR/package/corral_*.deb);
#   2. makes a clean Debian 12 (debootstrap --variant=minbase, with systemd) and installs into it,
#      through apt, what the package's Depends names, and nothing else (guest-tree.sh; cached
#      under $CORRAL_PKGVM_CACHE, default /var/cache/corral/pkgvm, keyed by that list); the guest
#      sees it read-only under a tmpfs overlay, so every run starts from the same clean tree;
#   3. builds the previous release (dist/previous-release; once per commit, tests/upgrade/build-previous.sh, shared
#      with e2e test_upgrade) for the upgrade step;
#   4. boots it (tests/cgv2/run-in-cgv2-vm.sh --root --boot-systemd: Debian's kernel, systemd as
#      PID 1, cgroup v2 as systemd sets it up) and runs in-guest.sh there: dpkg -i, systemctl
#      enable --now, a first sandbox in corrald-sandboxes.scope, stop/start/restart with it
#      running, the layout before the scope, reload, journald fields, dpkg -r (state kept),
#      reinstall (the workspace is still there), dpkg -P (nothing left), then the upgrade in place
#      from the previous release with a sandbox running, and dpkg -P again.
#
# Exit status: 0 passed, 1 failed, 77 skipped (QEMU, debootstrap or the Debian mirror missing;
# the reason on stderr).
set -uo pipefail

ME=package_install
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
SRC=$(cd "$HERE/../.." && pwd -P)
RUNNER=$SRC/tests/cgv2/run-in-cgv2-vm.sh

skip() { echo "$ME: SKIPPED: $*" >&2; exit 77; }
fail() { echo "$ME: FAILED: $*" >&2; exit 1; }

[ $# -eq 1 ] || fail "usage: $0 BUILD_DIR"
BUILD=$(cd "$1" && pwd -P) || fail "BUILD_DIR $1 is not a directory"
[ "$(uname -m)" = x86_64 ] || skip "host is $(uname -m); the guest needs an x86_64 host"
[ "$(id -u)" = 0 ] || skip "not root (debootstrap and the guest runner need root)"
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 is not installed (dist/install-deps.sh)"
command -v debootstrap >/dev/null || skip "debootstrap is not installed (dist/install-deps.sh)"
command -v cpack >/dev/null || fail "cpack is missing"

t0=$(date +%s)
# --- 1. the package
rm -rf "$BUILD/package"
( cd "$BUILD" && cpack -G DEB ) > "$BUILD/cpack.log" 2>&1 || { cat "$BUILD/cpack.log" >&2; fail "cpack failed"; }
DEB=$(ls "$BUILD"/package/corral_*_amd64.deb 2>/dev/null | head -1)
[ -n "$DEB" ] || fail "cpack made no corral_*_amd64.deb"
echo "$ME: $(basename "$DEB"), $(du -k "$DEB" | cut -f1) KiB"

# --- 2. a clean Debian 12 with the package's dependencies (tests/package/guest-tree.sh: cached)
deps=$(dpkg-deb -f "$DEB" Depends | sed 's/([^)]*)//g; s/,/ /g')
tree_rc=0
ROOTFS=$("$HERE/guest-tree.sh" deps "$deps") || tree_rc=$?
case $tree_rc in
  0) ;;
  77) skip "no clean Debian 12 tree (the reason is above)" ;;
  *) fail "no clean Debian 12 tree (the reason is above)" ;;
esac
echo "$ME: clean tree $ROOTFS ready after $(( $(date +%s) - t0 )) s"

# --- 3. boot it and run the test
if ! prep=$("$RUNNER" --prepare 2>&1); then
  skip "cannot prepare the guest kernel: $(printf '%s\n' "$prep" | tail -1)"
fi
WORK=$(mktemp -d /var/tmp/corral-package-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cp "$DEB" "$HERE/in-guest.sh" "$WORK/"
# The previous release (dist/previous-release) for the upgrade in place: built once into
# /var/cache/corral/previous/<commit> by tests/upgrade/build-previous.sh, as e2e test_upgrade builds it.
PREV_ARG=
prev_rc=0
prev_build=$("$SRC/tests/upgrade/build-previous.sh" "$SRC" 2>"$BUILD/previous-release.log") || prev_rc=$?
if [ "$prev_rc" -eq 0 ]; then
  prev_build=$(printf '%s\n' "$prev_build" | tail -1)
  mkdir "$WORK/prev"
  cp "$prev_build"/tools/corrald "$prev_build"/tools/corral "$prev_build"/tools/corral-init \
     "$prev_build"/tools/corral-mcp "$prev_build/../src/dist/corrald.toml" "$WORK/prev/"
  # Since the front split (corral runs corral-cli for everything but run and gc).
  [ ! -x "$prev_build"/tools/corral-cli ] || cp "$prev_build"/tools/corral-cli "$WORK/prev/"
  grep -v '^#' "$SRC/dist/previous-release" | head -1 | awk '{print $1}' > "$WORK/prev/commit"
  PREV_ARG=$WORK/prev
elif [ "$prev_rc" -eq 77 ]; then
  echo "$ME: no upgrade step: $(tail -1 "$BUILD/previous-release.log")"
else
  tail -20 "$BUILD/previous-release.log" >&2
  fail "building the previous release failed (log: $BUILD/previous-release.log)"
fi
env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  CGV2VM_CACHE="${CGV2VM_CACHE:-/var/cache/corral/cgv2vm}" CGV2VM_CONSOLE="${CGV2VM_CONSOLE:-}" \
  "$RUNNER" --root "$ROOTFS" --boot-systemd --share "$WORK" --cwd "$WORK" --mem 2G \
  --timeout "${CORRAL_PKGVM_TIMEOUT:-600}" -- /bin/bash "$WORK/in-guest.sh" "$WORK/$(basename "$DEB")" $PREV_ARG
rc=$?
el=$(( $(date +%s) - t0 ))
case $rc in
  0)   echo "$ME: passed (${el} s)"; exit 0 ;;
  124) fail "the guest timed out (${el} s)" ;;
  125) fail "the VM or its setup failed (${el} s; CGV2VM_CONSOLE=1 shows the guest console)" ;;
  *)   fail "the test in the guest failed (rc $rc, ${el} s; its output is above)" ;;
esac
