#!/usr/bin/env bash
# verify_unit.sh UNIT CORRALD CONFIG - checks dist/corrald.service without a running systemd.
#
# CTest entry point of test `dist_corrald_service` (tests/CMakeLists.txt, label unit).
#   UNIT     dist/corrald.service
#   CORRALD  the built corrald binary
#   CONFIG   dist/corrald.toml (its commented-out lines are corrald's defaults: config_test.cc)
#
# 1. `systemd-analyze verify` finds nothing to say about a copy of UNIT whose ExecStart= names
#    CORRALD (verify insists that the binary exists). verify exits 0 on some warnings, such as
#    an unknown key, so any output line that names the unit fails the test too.
# 2. Controls, so that step 1 can fail: a copy with a misspelled key and a copy whose ExecStart=
#    names a missing binary must both be flagged.
# 3. CORRALD accepts ExecStart='s arguments (followed by --help, so nothing starts).
# 4. Every capability named in CapabilityBoundingSet= exists (verify ignores a misspelled one).
# 5. StateDirectory= and RuntimeDirectory= are corrald's default state_dir and run_dir, the
#    default admin_socket lies in the run directory, and RuntimeDirectoryPreserve=yes.
#
# Exit status: 0 pass, 1 fail, 77 systemd-analyze is not installed (reason on stderr; Debian
# package `systemd`, which dist/install-deps.sh installs).
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 UNIT CORRALD CONFIG" >&2
  exit 1
fi
unit=$1 corrald=$2 config=$3
name=${unit##*/}

if ! command -v systemd-analyze >/dev/null; then
  echo "skipped: systemd-analyze is not installed (Debian package systemd: dist/install-deps.sh)" >&2
  exit 77
fi
for f in "$unit" "$config"; do
  [ -f "$f" ] || { echo "FAIL: $f: no such file" >&2; exit 1; }
done
[ -x "$corrald" ] || { echo "FAIL: $corrald: not an executable (build the corrald target)" >&2; exit 1; }
corrald=$(realpath "$corrald")  # ExecStart= needs an absolute path

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# Flags that make verify depend only on the file: no man pages looked up for Documentation=,
# no generators run; --recursive-errors=no makes warnings about UNIT itself (not about the host's
# other units it pulls in) a non-zero exit status (systemd >= 250).
verify_flags=(--man=no --generators=no)
if systemd-analyze --help 2>&1 | grep -q -- '--recursive-errors'; then
  verify_flags+=(--recursive-errors=no)
fi

# verify DIR: runs verify on DIR/$name; 0 when it has nothing to say about the unit, else 1 with
# the lines that name the unit (or all its output) and its exit status.
verify() {
  local out status=0
  out=$(systemd-analyze verify "${verify_flags[@]}" "$1/$name" 2>&1) || status=$?
  local about_unit
  about_unit=$(grep -F "$name" <<<"$out" || true)
  if [ "$status" -ne 0 ] || [ -n "$about_unit" ]; then
    echo "${about_unit:-$out}"
    echo "(systemd-analyze verify exit status $status)"
    return 1
  fi
}

# A copy of UNIT in its own directory, ExecStart='s program replaced by $2.
copy_with_program() {
  mkdir -p "$1"
  sed "s|^ExecStart=[^ ]*|ExecStart=$2|" "$unit" >"$1/$name"
}

count=$(grep -c '^ExecStart=/usr/bin/corrald ' "$unit" || true)
[ "$count" = 1 ] || fail "$name: expected one 'ExecStart=/usr/bin/corrald ...' line, found $count"

# 1. The unit as shipped, pointed at the built binary.
copy_with_program "$tmp/good" "$corrald"
if said=$(verify "$tmp/good"); then
  echo "ok: systemd-analyze verify has nothing to say about $name"
else
  fail "systemd-analyze verify flags $name:"
  echo "$said" >&2
fi

# 2. Controls: each broken copy must be flagged.
copy_with_program "$tmp/typo" "$corrald"
sed -i 's|^Type=notify$|Type=notify\nTypo=notify|' "$tmp/typo/$name"
grep -q '^Typo=notify$' "$tmp/typo/$name" || fail "control: could not insert Typo=notify (no Type=notify line?)"
if said=$(verify "$tmp/typo"); then
  fail "control: verify did not flag the unknown key Typo= (so step 1 proves nothing)"
elif ! grep -q "Typo" <<<"$said"; then
  fail "control: verify flagged the copy with Typo=, but not for Typo=:"
  echo "$said" >&2
else
  echo "ok: control with Typo=notify flagged: $(grep -m1 Typo <<<"$said")"
fi

copy_with_program "$tmp/missing" "$tmp/no-such-corrald"
if said=$(verify "$tmp/missing"); then
  fail "control: verify did not flag an ExecStart= binary that does not exist"
else
  echo "ok: control with a missing ExecStart= binary flagged: $(grep -m1 -F "$name" <<<"$said")"
fi

# 3. corrald parses ExecStart='s arguments (an unknown one exits 2 before --help is seen).
read -r -a exec_args <<<"$(sed -n 's|^ExecStart=[^ ]* *||p' "$unit")"
if ! "$corrald" "${exec_args[@]}" --help >/dev/null 2>"$tmp/args.err"; then
  fail "corrald rejects ExecStart='s arguments (${exec_args[*]}): $(cat "$tmp/args.err")"
else
  echo "ok: corrald accepts ExecStart='s arguments: ${exec_args[*]}"
fi

# 4. verify ignores a misspelled capability, which would silently stay in the bounding set:
#    every name in CapabilityBoundingSet= must be one the kernel headers define.
header=/usr/include/linux/capability.h
caps=$(sed -n 's|^CapabilityBoundingSet=~\{0,1\}||p' "$unit")
if [ ! -f "$header" ]; then
  fail "$header is missing (Debian package linux-libc-dev): cannot check CapabilityBoundingSet="
else
  for cap in $caps; do
    grep -Eq "^#define[[:space:]]+${cap}[[:space:]]" "$header" || fail "CapabilityBoundingSet=: unknown capability $cap"
  done
  echo "ok: CapabilityBoundingSet= names $(wc -w <<<"$caps") capabilities, all known"
fi

# 5. The unit's directories are corrald's defaults.
directive() { sed -n "s|^$1=||p" "$unit"; }
default_of() { sed -n "s|^# $1 = \"\(.*\)\"\$|\1|p" "$config"; }
state_dir=$(default_of state_dir) run_dir=$(default_of run_dir) admin_socket=$(default_of admin_socket)
[ "/var/lib/$(directive StateDirectory)" = "$state_dir" ] ||
  fail "StateDirectory=$(directive StateDirectory) is not the default state_dir '$state_dir'"
[ "/run/$(directive RuntimeDirectory)" = "$run_dir" ] ||
  fail "RuntimeDirectory=$(directive RuntimeDirectory) is not the default run_dir '$run_dir'"
case "$admin_socket" in
  "$run_dir"/?*) ;;
  *) fail "the default admin_socket '$admin_socket' is not in the run directory '$run_dir'" ;;
esac
[ "$(directive RuntimeDirectoryPreserve)" = yes ] ||
  fail "RuntimeDirectoryPreserve= must be yes: running sandboxes' sockets are in $run_dir"
[ "$failures" -gt 0 ] || echo "ok: StateDirectory=, RuntimeDirectory= match $state_dir, $run_dir ($admin_socket)"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "PASS"
