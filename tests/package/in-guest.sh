#!/bin/bash
# in-guest.sh DEB [PREV_DIR] - run by run-package-test.sh inside the guest: a clean Debian 12 booted with
# systemd (PID 1) and cgroup v2, with the package's dependencies and nothing of corral. Each step
# is what an operator does, checked from outside corrald.
set -euo pipefail
# `... | has PATTERN`: like `grep -q`, but it reads all its input. Under pipefail, grep -q's early
# exit makes the command before it die of SIGPIPE, and the pipeline fails although it matched.
has() { [ "$(grep -c "$@")" != 0 ]; }
DEB=$1
# The previous release's corrald, corral, corral-init, corral-mcp, corrald.toml and commit
# (run-package-test.sh), for the upgrade in place; "" skips that step.
PREV=${2:-}
step() { echo; echo "== $*"; }
fail() {
  echo "FAILED: $*"
  echo "--- journalctl -u corrald (last 40 lines)"
  journalctl -u corrald --no-pager -o cat 2>/dev/null | tail -40 || true
  echo "--- the sandboxes' scope: systemd's view, its journal, its cgroups and their processes"
  systemctl status --no-pager corrald-sandboxes.scope 2>&1 | head -20 || true
  journalctl -u corrald-sandboxes.scope --no-pager -o short-monotonic 2>/dev/null | tail -20 || true
  local dir
  for dir in $(find /sys/fs/cgroup/system.slice/corrald-sandboxes.scope /sys/fs/cgroup/corral -type d 2>/dev/null); do
    echo "$dir: procs [$(tr '\n' ' ' < "$dir/cgroup.procs" 2>/dev/null)] $(grep populated "$dir/cgroup.events" 2>/dev/null)"
  done
  exit 1
}
trap 'fail "line $LINENO: $BASH_COMMAND"' ERR
expect_eq() { [ "$1" = "$2" ] || fail "$3: '$1', expected '$2'"; }

step "a clean host: no corral yet"
! command -v corral >/dev/null || fail "corral is already installed"
! getent group corral >/dev/null || fail "the corral group already exists"
[ ! -e /var/lib/corral ] || fail "/var/lib/corral already exists"
echo "systemd $(systemctl --version | head -1 | cut -d' ' -f2), $(stat -f -c %T /sys/fs/cgroup) at /sys/fs/cgroup"

step "dpkg -i $(basename "$DEB")"
dpkg -i "$DEB"
for f in /usr/bin/corrald /usr/bin/corral /usr/libexec/corral/corral-init /usr/libexec/corral/corral-mcp \
         /usr/libexec/corral/corral-claude /usr/libexec/corral/corral-cli; do
  [ -x "$f" ] || fail "$f is not installed"
done
[ -f /lib/systemd/system/corrald.service ] || fail "no unit"
[ -f /etc/corral/corrald.toml ] || fail "no config"
[ -f /usr/share/corral/web/index.html ] || fail "no web page"
grep -qx /etc/corral/corrald.toml /var/lib/dpkg/info/corral.conffiles || fail "corrald.toml is not a conffile"
getent group corral >/dev/null || fail "the corral group was not created"
expect_eq "$(stat -c '%a %U:%G' /var/lib/corral)" "700 root:root" "/var/lib/corral"
expect_eq "$(systemctl is-enabled corrald || true)" disabled "corrald after install"
expect_eq "$(systemctl is-active corrald || true)" inactive "corrald after install"

step "corral doctor"
corral doctor || fail "doctor found a FAIL on a clean Debian 12"

step "systemctl enable --now corrald"
systemctl enable --now corrald
expect_eq "$(systemctl is-active corrald)" active "corrald"
expect_eq "$(stat -c '%a %U:%G' /run/corral/admin.sock)" "660 root:corral" "the admin socket"

step "a first sandbox"
SECRET=$(corral admin issuer add acme)
[ ${#SECRET} -ge 32 ] || fail "issuer add printed '$SECRET'"
export CORRAL_URL=http://127.0.0.1:7878
CORRAL_TOKEN=$(corral token mint --issuer acme --user alice)
export CORRAL_TOKEN
SB=$(corral sandbox create)
echo "sandbox $SB"
out=$(corral exec "$SB" -- sh -c 'echo kept > ~/kept.txt && echo hello from $(id -un)')
echo "$out"
[[ "$out" == "hello from "* ]] || fail "exec printed '$out'"
corral sandbox ls

step "cgroups: the sandbox in corrald-sandboxes.scope (delegated to corrald), corrald alone in its unit"
SCOPE=/sys/fs/cgroup/system.slice/corrald-sandboxes.scope
[ -d "$SCOPE/$SB/init" ] || fail "the sandbox's cgroup is not under $SCOPE: $(find /sys/fs/cgroup -type d -name "$SB")"
expect_eq "$(systemctl show -P ActiveState corrald-sandboxes.scope)" active "the scope"
expect_eq "$(systemctl show -P Delegate corrald-sandboxes.scope)" yes "the scope's Delegate="
expect_eq "$(systemctl show -P TasksMax corrald-sandboxes.scope)" infinity "the scope's TasksMax="
expect_eq "$(systemctl show -P OOMPolicy corrald-sandboxes.scope)" continue "the scope's OOMPolicy="
expect_eq "$(systemctl show -P TimeoutStopUSec corrald-sandboxes.scope)" 5s "the scope's TimeoutStopSec= (sandbox.stop_grace)"
expect_eq "$(cat "$SCOPE/$SB/memory.max")" 1073741824 "the sandbox's memory.max (sandbox.default_memory)"
expect_eq "$(cat "$SCOPE/cgroup.procs")" "" "processes in the scope's own cgroup"
MAIN=$(systemctl show -P MainPID corrald)
ANCHOR=$(cat "$SCOPE/anchor/cgroup.procs")
expect_eq "$(ps -o ppid= -p "$ANCHOR" | tr -d ' ')" "$MAIN" "the parent of the scope's anchor"
expect_eq "$(find /sys/fs/cgroup/system.slice/corrald.service -name cgroup.procs -exec cat {} +)" "$MAIN" \
  "the processes in corrald.service"
[ ! -e /sys/fs/cgroup/corral ] || fail "/sys/fs/cgroup/corral exists"
systemctl status corrald-sandboxes.scope --no-pager | head -12

step "systemctl stop corrald, then start: the sandbox and the scope run on, the new corrald adopts it"
INIT=$(cat "$SCOPE/$SB/init/cgroup.procs")
systemctl stop corrald
expect_eq "$(systemctl is-active corrald || true)" inactive "corrald after stop"
[ -d "/proc/$INIT" ] || fail "the sandbox's init died with corrald"
expect_eq "$(systemctl show -P ActiveState corrald-sandboxes.scope)" active "the scope while corrald is stopped"
[ ! -d "/proc/$ANCHOR" ] || fail "the anchor outlived corrald"
systemctl start corrald
expect_eq "$(systemctl is-active corrald)" active "corrald after start"
expect_eq "$(cat "$SCOPE/$SB/init/cgroup.procs")" "$INIT" "the sandbox's init after the restart"
expect_eq "$(corral exec "$SB" -- cat kept.txt)" kept "the workspace after the restart"
expect_eq "$(ps -o ppid= -p "$(cat "$SCOPE/anchor/cgroup.procs")" | tr -d ' ')" "$(systemctl show -P MainPID corrald)" \
  "the parent of the new anchor"
systemctl restart corrald
expect_eq "$(systemctl is-active corrald)" active "corrald after systemctl restart"
expect_eq "$(cat "$SCOPE/$SB/init/cgroup.procs")" "$INIT" "the sandbox's init after systemctl restart"

step "the layout before the scope (/sys/fs/cgroup/corral/<id>): a running sandbox is adopted there"
# What every corrald before this one did by default, named in the config here.
sed -i 's|^# cgroup_parent = ""$|cgroup_parent = "corral"|' /etc/corral/corrald.toml
grep -qx 'cgroup_parent = "corral"' /etc/corral/corrald.toml || fail "could not set cgroup_parent"
systemctl restart corrald
OLD=$(corral sandbox create)
[ -d "/sys/fs/cgroup/corral/$OLD/init" ] || fail "the sandbox is not at /sys/fs/cgroup/corral/$OLD"
OLD_INIT=$(cat "/sys/fs/cgroup/corral/$OLD/init/cgroup.procs")
corral exec "$OLD" -- sh -c 'echo old > ~/old.txt'
corral exec "$OLD" -- sleep 600 >/dev/null 2>&1 &
for _ in $(seq 100); do
  SLEEPER=$(cat /sys/fs/cgroup/corral/"$OLD"/cmd-*/cgroup.procs 2>/dev/null | head -1 || true)
  [ -n "$SLEEPER" ] && break; sleep 0.1
done
[ -n "$SLEEPER" ] || fail "the sleeping command did not start"
# The upgrade: the default again, and corrald restarted as the package's postinst does.
sed -i 's|^cgroup_parent = "corral"$|# cgroup_parent = ""|' /etc/corral/corrald.toml
systemctl try-restart corrald
expect_eq "$(systemctl is-active corrald)" active "corrald after the upgrade"
journalctl -u corrald --no-pager -o cat | has "joined the sandboxes' scope" || fail "corrald did not join the running scope"
expect_eq "$(cat "/sys/fs/cgroup/corral/$OLD/init/cgroup.procs")" "$OLD_INIT" "the old sandbox's init after the upgrade"
[ -d "/proc/$SLEEPER" ] || fail "the old sandbox's command died in the upgrade"
expect_eq "$(corral exec "$OLD" -- cat old.txt)" old "the old sandbox's workspace"
[ ! -e "$SCOPE/$OLD" ] || fail "the old sandbox has a cgroup in the scope too"
NEW=$(corral sandbox create)
[ -d "$SCOPE/$NEW/init" ] || fail "a new sandbox is not in the scope"
corral sandbox stop "$OLD" >/dev/null
[ ! -e /sys/fs/cgroup/corral ] || fail "/sys/fs/cgroup/corral is left after the old sandbox stopped: $(find /sys/fs/cgroup/corral)"
[ ! -d "/proc/$SLEEPER" ] || fail "the old sandbox's command outlived its stop"
corral sandbox start "$OLD" >/dev/null
[ -d "$SCOPE/$OLD/init" ] || fail "the old sandbox, started again, is not in the scope"
expect_eq "$(corral exec "$OLD" -- cat old.txt)" old "the old sandbox's workspace in the scope"
corral sandbox ls

step "the scope killed under corrald (systemctl kill): its sandboxes stop; the next start makes it again"
systemctl kill --signal=KILL corrald-sandboxes.scope
killed_at=$(date +%s%N)
# systemd removes the scope once its cgroup is empty: 0.5 s in this emulated guest with the host
# busy, but more than 10 s once in CI (cause unseen; a failure now prints systemd's view of the
# scope, its journal and every cgroup under it with its processes).
for _ in $(seq 600); do [ -e "$SCOPE" ] || break; sleep 0.1; done
[ ! -e "$SCOPE" ] || fail "the killed scope is still there after 60 s"
echo "the scope went $(( ($(date +%s%N) - killed_at) / 1000000 )) ms after the kill"
running() { corral sandbox ls | awk '$3 == "running"' | wc -l; }
for _ in $(seq 100); do [ "$(running)" = 0 ] && break; sleep 0.1; done
expect_eq "$(running)" 0 "sandboxes running after the scope was killed"
corral sandbox start "$SB" > /dev/null
[ -d "$SCOPE/$SB/init" ] || fail "started again, the sandbox is not in a new scope"
expect_eq "$(systemctl show -P ActiveState corrald-sandboxes.scope)" active "the new scope"
expect_eq "$(ps -o ppid= -p "$(cat "$SCOPE/anchor/cgroup.procs")" | tr -d ' ')" "$(systemctl show -P MainPID corrald)" \
  "the parent of the new scope's anchor"
expect_eq "$(corral exec "$SB" -- cat kept.txt)" kept "the workspace in the new scope"

step "systemctl reload corrald (SIGHUP): still serving, the sandbox still there"
systemctl reload corrald
sleep 1
expect_eq "$(systemctl is-active corrald)" active "corrald after reload"
expect_eq "$(corral exec "$SB" -- cat kept.txt)" kept "the workspace after reload"

step "the journal has corrald's fields"
journalctl -u corrald -o json --no-pager > /tmp/journal.json
grep -q '"COMPONENT"' /tmp/journal.json || fail "no COMPONENT field in corrald's journal entries"
grep -q '"SANDBOX":"'"$SB"'"' /tmp/journal.json || fail "no entry carries SANDBOX=$SB"
grep '"COMPONENT":"corrald"' /tmp/journal.json | grep '"MESSAGE":"listening address=' | has '"PRIORITY":"6"' \
  || fail "no listening entry of corrald at PRIORITY 6 (info)"
grep '"COMPONENT":"doctor"' /tmp/journal.json | has '"PRIORITY":"4"' || fail "no doctor WARN at PRIORITY 4"
journalctl -u corrald -p warning --no-pager -o cat | has 'claude not found' || fail "journalctl -p warning misses the doctor's WARN"
echo "$(grep -c '"COMPONENT"' /tmp/journal.json) entries with COMPONENT; e.g.:"
journalctl -u corrald --no-pager -o cat SANDBOX="$SB" | head -3
# No secret in the journal: the issuer's, nor the token's signature.
! grep -qF "$SECRET" /tmp/journal.json || fail "the issuer secret is in the journal"
! grep -qF "${CORRAL_TOKEN##*.}" /tmp/journal.json || fail "a token signature is in the journal"

step "dpkg -r corral: corrald and the sandbox stop, the state stays"
dpkg -r corral
expect_eq "$(systemctl is-active corrald || true)" inactive "corrald after remove"
[ ! -e /usr/bin/corrald ] || fail "corrald is still installed"
[ -f /var/lib/corral/corrald.db ] || fail "remove lost the store"
[ -f /etc/corral/corrald.toml ] || fail "remove lost the config"
left=$(find /sys/fs/cgroup -path '*corral*' -name cgroup.procs -exec cat {} + 2>/dev/null | wc -l)
expect_eq "$left" 0 "processes left in corral's cgroups after remove"
# Empty, the scope goes (systemd collects it).
for _ in $(seq 50); do [ -e "$SCOPE" ] || break; sleep 0.1; done
[ ! -e "$SCOPE" ] || fail "the scope is left after remove: $(systemctl show -P ActiveState corrald-sandboxes.scope)"

step "dpkg -i again: the sandbox and its workspace are back"
dpkg -i "$DEB"
systemctl start corrald
corral sandbox start "$SB" > /dev/null
expect_eq "$(corral exec "$SB" -- cat kept.txt)" kept "the workspace after reinstall"

nothing_left() {
  for p in /var/lib/corral /etc/corral /run/corral /usr/bin/corral /lib/systemd/system/corrald.service; do
    [ ! -e "$p" ] || fail "$p is still there after purge"
  done
  ! grep -qE ' /(var/lib|run)/corral[/ ]' /proc/self/mountinfo || fail "mounts left: $(grep -E ' /(var/lib|run)/corral' /proc/self/mountinfo)"
  for _ in $(seq 50); do find /sys/fs/cgroup -name '*corral*' | has . || break; sleep 0.1; done
  ! find /sys/fs/cgroup -name '*corral*' | has . || fail "cgroups left: $(find /sys/fs/cgroup -name '*corral*')"
  ! ls /etc/systemd/system/*/corrald.service >/dev/null 2>&1 || fail "the unit is still enabled"
}

step "dpkg -P corral: nothing left"
dpkg -P corral
nothing_left

if [ -n "$PREV" ]; then
  step "upgrade in place from the previous release ($(cat "$PREV/commit")): its running sandbox is adopted at /sys/fs/cgroup/corral/<id>"
  # The previous release had no package: its binaries and its corrald.toml over this package's
  # files, under this package's unit (its own also had Delegate=yes and no ExecReload=; its
  # corrald relies on neither).
  dpkg -i "$DEB" > /dev/null
  cp "$PREV/corrald" "$PREV/corral" /usr/bin/
  cp "$PREV/corral-init" "$PREV/corral-mcp" /usr/libexec/corral/
  [ ! -f "$PREV/corral-cli" ] || cp "$PREV/corral-cli" /usr/libexec/corral/
  cp "$PREV/corrald.toml" /etc/corral/corrald.toml
  systemctl start corrald
  corral admin issuer add acme > /dev/null
  CORRAL_TOKEN=$(corral token mint --issuer acme --user alice)
  OLD=$(corral sandbox create)
  [ -d "/sys/fs/cgroup/corral/$OLD/init" ] || fail "the previous release's sandbox is not at /sys/fs/cgroup/corral/$OLD"
  OLD_INIT=$(cat "/sys/fs/cgroup/corral/$OLD/init/cgroup.procs")
  corral exec "$OLD" -- sh -c 'echo before > ~/upgrade.txt'
  corral exec "$OLD" -- sleep 600 >/dev/null 2>&1 &
  SLEEPER=
  for _ in $(seq 100); do
    SLEEPER=$(cat /sys/fs/cgroup/corral/"$OLD"/cmd-*/cgroup.procs 2>/dev/null | head -1 || true)
    [ -n "$SLEEPER" ] && break; sleep 0.1
  done
  [ -n "$SLEEPER" ] || fail "the previous release's command did not start"
  dpkg -i "$DEB" > /dev/null  # the upgrade: the postinst's try-restart starts this corrald
  expect_eq "$(systemctl is-active corrald)" active "corrald after the upgrade"
  journalctl -u corrald --no-pager -o cat | has "adopted where it runs.*sandbox=$OLD cgroup=corral/$OLD" \
    || fail "the upgraded corrald did not adopt $OLD at corral/$OLD"
  expect_eq "$(cat "/sys/fs/cgroup/corral/$OLD/init/cgroup.procs")" "$OLD_INIT" "the sandbox's init after the upgrade"
  [ -d "/proc/$SLEEPER" ] || fail "the sandbox's command died in the upgrade"
  expect_eq "$(corral exec "$OLD" -- cat upgrade.txt)" before "the workspace after the upgrade"
  corral sandbox stop "$OLD" > /dev/null
  [ ! -e /sys/fs/cgroup/corral ] || fail "/sys/fs/cgroup/corral is left: $(find /sys/fs/cgroup/corral)"
  corral sandbox start "$OLD" > /dev/null
  [ -d "$SCOPE/$OLD/init" ] || fail "started again, the sandbox is not in the scope"
  systemd-cgls --no-pager /system.slice/corrald-sandboxes.scope

  step "dpkg -P corral again: nothing left"
  dpkg -P corral
  nothing_left
else
  echo
  echo "(no upgrade from the previous release: run-package-test.sh could not build it here)"
fi
echo
echo "PASS"
