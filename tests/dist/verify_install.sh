#!/usr/bin/env bash
# verify_install.sh SOURCE_DIR BUILD_DIR - `cmake --install` as other distributions use it.
#   1. DESTDIR=<tmp> cmake --install BUILD_DIR: every file where dist/install.cmake says, with its
#      mode, and the unit naming the installed corrald and config.
#   2. A second tree configured (not built) with -DCMAKE_INSTALL_PREFIX=/usr/local: the unit, the
#      install destinations and the paths compiled into corrald and corral all follow the prefix.
set -euo pipefail
SRC=$1
BUILD=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "verify_install: FAILED: $*" >&2; exit 1; }

DESTDIR=$tmp/root cmake --install "$BUILD" > "$tmp/install.log"
expected="0644 /etc/corral/corrald.toml
0644 /lib/systemd/system/corrald.service
0755 /usr/bin/corral
0755 /usr/bin/corrald
0755 /usr/libexec/corral/corral-claude
0755 /usr/libexec/corral/corral-cli
0755 /usr/libexec/corral/corral-init
0755 /usr/libexec/corral/corral-mcp
0644 /usr/share/doc/corral/README.md
0644 /usr/share/doc/corral/examples/grafana-dashboard.json
0644 /usr/share/doc/corral/examples/prometheus.yml"
got=$(cd "$tmp/root" && find . -type f ! -path './usr/share/corral/web/*' -printf '%#m %p\n' | sed 's| \./| /|' | LC_ALL=C sort -k2)
[ "$got" = "$expected" ] || fail "installed files differ:
$(diff <(echo "$expected") <(echo "$got"))"
if [ -f "$BUILD/tools/web/index.html" ]; then
  [ -f "$tmp/root/usr/share/corral/web/index.html" ] || fail "the built web page was not installed"
fi
grep -qx 'ExecStart=/usr/bin/corrald --config /etc/corral/corrald.toml --foreground' \
  "$tmp/root/lib/systemd/system/corrald.service" || fail "the installed unit's ExecStart"
cmp -s "$SRC/dist/corrald.toml" "$tmp/root/etc/corral/corrald.toml" || fail "corrald.toml differs from dist/"
"$tmp/root/usr/bin/corrald" --help 2>&1 | grep -q /etc/corral/corrald.toml || fail "corrald --help names another config"

# A control with another prefix: configure only (seconds), then read what it generated.
cmake -S "$SRC" -B "$tmp/local" -DCMAKE_INSTALL_PREFIX=/usr/local -DCORRAL_BUILD_TESTS=OFF > "$tmp/configure.log" 2>&1 \
  || { cat "$tmp/configure.log" >&2; fail "configure with prefix /usr/local"; }
grep -qx 'ExecStart=/usr/local/bin/corrald --config /usr/local/etc/corral/corrald.toml --foreground' \
  "$tmp/local/dist/corrald.service" || fail "prefix /usr/local: the unit's ExecStart"
grep -q '"/usr/local/lib/systemd/system"' "$tmp/local/cmake_install.cmake" || fail "prefix /usr/local: the unit's directory"
grep -q '"/usr/local/etc/corral"' "$tmp/local/cmake_install.cmake" || fail "prefix /usr/local: the config's directory"
for d in CORRAL_LIBEXEC_DIR=/usr/local/libexec/corral CORRAL_CONFIG_FILE=/usr/local/etc/corral/corrald.toml \
         CORRAL_WEB_DIR=/usr/local/share/corral/web; do
  # compile_commands.json writes -DNAME=\\\"VALUE\\\"
  grep -oE "${d%%=*}=[^ ]*" "$tmp/local/compile_commands.json" | tr -d '\\"' | grep -qx -- "$d" \
    || fail "prefix /usr/local: $d is not compiled in"
done
echo "verify_install: OK ($(echo "$expected" | wc -l) files in place; prefix /usr/local follows)"
