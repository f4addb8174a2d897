#!/usr/bin/env bash
# guest-tree.sh base | deps "PKG PKG..." - the clean Debian 12 trees the package test boots.
#
#   base   debootstrap --variant=minbase with systemd: $CACHE/base-<key>. The slow part (the
#          mirror and dpkg), and the same for every build, so dist/test.sh starts it in the
#          background while corral compiles.
#   deps   a copy of base with the packages named (the .deb's Depends) installed through apt,
#          and nothing else: $CACHE/rootfs-<key of the list>. Prints its path.
# Both are cached (a tree is used only once it is complete: .corral-ready) and take turns on
# $CACHE/.lock, so callers at once wait for each other instead of racing.
# Cache: $CORRAL_PKGVM_CACHE (default /var/cache/corral/pkgvm).
# Exit status: 0 ready, 1 failed, 77 no Debian mirror or debootstrap failed (the reason on stderr).
set -uo pipefail

ME=guest-tree
CACHE=${CORRAL_PKGVM_CACHE:-/var/cache/corral/pkgvm}
skip() { echo "$ME: SKIPPED: $*" >&2; exit 77; }
fail() { echo "$ME: FAILED: $*" >&2; exit 1; }

mode=${1:-}
mkdir -p "$CACHE" || fail "cannot create $CACHE"
exec 9>"$CACHE/.lock"; flock 9

base_key=$(echo "bookworm minbase systemd" | md5sum | cut -c1-12)
BASE=$CACHE/base-$base_key

make_base() {
  [ -f "$BASE/.corral-ready" ] && return 0
  command -v debootstrap >/dev/null || skip "debootstrap is not installed (dist/install-deps.sh)"
  local mirror
  mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 2>/dev/null | awk '$2 == "bookworm" {print $1; exit}')
  [ -n "$mirror" ] || skip "no Debian bookworm mirror in the apt configuration"
  rm -rf "$BASE.tmp"
  echo "$ME: debootstrap bookworm (minbase, systemd) from $mirror" >&2
  if ! debootstrap --variant=minbase --include=systemd,systemd-sysv bookworm "$BASE.tmp" "$mirror" \
       > "$CACHE/debootstrap.log" 2>&1; then
    tail -5 "$CACHE/debootstrap.log" >&2; rm -rf "$BASE.tmp"
    skip "debootstrap failed (is the Debian mirror reachable?); log: $CACHE/debootstrap.log"
  fi
  touch "$BASE.tmp/.corral-ready"
  rm -rf "$BASE"; mv "$BASE.tmp" "$BASE"
}

make_deps() {
  local deps=$1 key tree
  key=$(echo "bookworm minbase systemd $deps" | md5sum | cut -c1-12)
  tree=$CACHE/rootfs-$key
  if [ ! -f "$tree/.corral-ready" ]; then
    make_base
    rm -rf "$tree.tmp"
    cp -a "$BASE" "$tree.tmp" || fail "cannot copy $BASE"
    rm -f "$tree.tmp/.corral-ready"
    echo "$ME: apt-get install in the tree: $deps" >&2
    # In a private mount namespace: its /proc and /dev mounts go when it ends. No service starts.
    printf '#!/bin/sh\nexit 101\n' > "$tree.tmp/usr/sbin/policy-rc.d"; chmod 755 "$tree.tmp/usr/sbin/policy-rc.d"
    if ! unshare -m --propagation private sh -c '
          mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" &&
          DEBIAN_FRONTEND=noninteractive chroot "$1" apt-get install -y -q --no-install-recommends $2' \
          sh "$tree.tmp" "$deps" > "$CACHE/apt.log" 2>&1; then
      tail -20 "$CACHE/apt.log" >&2; rm -rf "$tree.tmp"
      fail "the package's Depends cannot be installed on Debian 12 (apt-get in the tree; log: $CACHE/apt.log)"
    fi
    rm -f "$tree.tmp/usr/sbin/policy-rc.d"
    chroot "$tree.tmp" apt-get clean
    touch "$tree.tmp/.corral-ready"
    rm -rf "$tree"; mv "$tree.tmp" "$tree"
  fi
  echo "$tree"
}

case $mode in
  base) make_base ;;
  deps) [ $# -eq 2 ] || fail "usage: $0 deps \"PKG PKG...\""; make_deps "$2" ;;
  *) fail "usage: $0 base | deps \"PKG PKG...\"" ;;
esac
