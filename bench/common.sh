# common.sh - what bench/cold_start.sh and bench/daemon.sh share: this host's cgroup layout, how
# crun runs on a hybrid host, the cleanup of what a run made, and the machine's description in
# the report's meta.json. Sourced (not run) after the script has set say(), die(), TAG, PY, OUT.

# ------------------------------------------------------------------- cgroup layout of this host
# CGMODE v1|v2, HYBRID 1 on a v1 host with a cgroup2 mount at /sys/fs/cgroup/unified, CGDESC for
# the report. The benchmarks' reference containers need the memory and pids controllers.
v1_hierarchies() { awk '$3 == "cgroup" {sub(".*/", "", $2); printf "%s ", $2}' /proc/self/mounts; }
if [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then
  CGMODE=v2 HYBRID=
  CGDESC="v2 (unified): $(cat /sys/fs/cgroup/cgroup.controllers)"
else
  CGMODE=v1 HYBRID=
  for c in memory pids; do
    [ "$(stat -f -c %T /sys/fs/cgroup/$c 2>/dev/null)" = cgroupfs ] || die "no v1 $c hierarchy at /sys/fs/cgroup/$c"
  done
  if [ "$(stat -f -c %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then
    HYBRID=1
    CGDESC="v1 hybrid: v1 hierarchies $(v1_hierarchies)+ cgroup2 at /sys/fs/cgroup/unified with controllers: $(cat /sys/fs/cgroup/unified/cgroup.controllers)"
  else
    CGDESC="v1: $(v1_hierarchies)"
  fi
fi

# crun 1.8.1 refuses a hybrid host whose cgroup2 mount (/sys/fs/cgroup/unified) is cgroup2fs.
# So crun runs in a private mount namespace where /sys/fs/cgroup/unified is covered by a fresh,
# throwaway tmpfs: crun then sees plain v1. (Only covering, never unmounting: after an unmount
# crun would write into the host's /sys/fs/cgroup tmpfs underneath; cgroup_tmpfs_unchanged checks.)
in_ns() { # tool cmd... : run cmd as the tool needs it
  local tool=$1; shift
  if [ "$tool" = crun ] && [ -n "$HYBRID" ]; then
    unshare -m --propagation private -- /bin/bash -c \
      'mount -t tmpfs -o size=64k,mode=755 crun-bench-unified /sys/fs/cgroup/unified || exit 125; exec "$@"' \
      in_ns "$@"
  else
    "$@"
  fi
}

# ------------------------------------------------------------------- cleanup helpers
# /sys/fs/cgroup itself (a tmpfs on v1 hosts) is compared before and after a run: any new entry
# there fails it.
CG_TMPFS=; [ "$(stat -f -c %T /sys/fs/cgroup)" != tmpfs ] || CG_TMPFS=1
CG_TMPFS_BEFORE=$(ls -A /sys/fs/cgroup | sort)
cg_mounts() { awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/self/mounts; }

# Kills and deletes this run's crun and runc containers ($TAG-*); 1 when one could not go.
remove_containers() {
  local rt id rc=0
  for rt in crun runc; do
    command -v $rt >/dev/null || continue
    for id in $(in_ns $rt $rt list -q 2>/dev/null | grep "^$TAG-"); do
      say "removing $rt container $id"
      in_ns $rt $rt kill "$id" KILL >/dev/null 2>&1
      in_ns $rt $rt delete -f "$id" >/dev/null 2>&1 || { say "could not delete $rt container $id"; rc=1; }
    done
  done
  return $rc
}

# Removes cgroup NAME (a path below each hierarchy's root) in every hierarchy, killing what is
# left in it; 1 when one is still there after a few tries.
remove_cgroup_tree() {
  local name=$1 m d p rc=0
  for m in $(cg_mounts); do
    d=$m/$name
    [ -d "$d" ] || continue
    find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r p; do kill -9 "$p" 2>/dev/null; done
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
      [ -d "$d" ] || break
      sleep 0.3
    done
    [ ! -d "$d" ] || { say "could not remove cgroup $d"; rc=1; }
  done
  return $rc
}

# Makes cgroup $CGBASE with the memory and pids controllers, the parent of the reference
# containers' cgroups (everything the run makes sits under one name).
make_cgroup_base() {
  if [ $CGMODE = v2 ]; then
    mkdir /sys/fs/cgroup/$CGBASE
    for c in memory pids; do
      grep -qw $c /sys/fs/cgroup/cgroup.subtree_control || echo +$c > /sys/fs/cgroup/cgroup.subtree_control
    done
    echo "+memory +pids" > /sys/fs/cgroup/$CGBASE/cgroup.subtree_control
  else
    mkdir /sys/fs/cgroup/memory/$CGBASE /sys/fs/cgroup/pids/$CGBASE
  fi
}

# 1 (and says what) when the run left new entries in the host's /sys/fs/cgroup tmpfs.
cgroup_tmpfs_unchanged() {
  local after; after=$(ls -A /sys/fs/cgroup | sort)
  if [ -n "$CG_TMPFS" ] && [ "$after" != "$CG_TMPFS_BEFORE" ]; then
    say "new entries in /sys/fs/cgroup (host tmpfs) during the run: $(comm -13 <(echo "$CG_TMPFS_BEFORE") <(echo "$after") | tr '\n' ' ')"
    return 1
  fi
}

# ------------------------------------------------------------------- the report's meta.json
ver() { "$@" 2>&1 | head -1; }

# "corral 0.x (git abc1234[, dirty])" of binary $1 built from repository $2.
corral_version_of() {
  local v; v="$("$1" --version 2>/dev/null | head -1 || true)"
  echo "${v:-corral} (git $(git -C "$2" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$2" diff --quiet HEAD 2>/dev/null || echo ', dirty'))"
}

# The machine.* entries of meta.json, one per line (LOAD_BEFORE and LOAD_AFTER: /proc/loadavg).
machine_meta() {
  echo "machine.cpu=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)"
  echo "machine.nproc=$(nproc)"
  echo "machine.memory=$(awk '/^MemTotal/{printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  echo "machine.kernel=$(uname -srm), Debian $(cat /etc/debian_version 2>/dev/null || echo '?')"
  echo "machine.cgroups=$CGDESC"
  echo "machine.load=loadavg $LOAD_BEFORE before, $LOAD_AFTER after"
}

# write_meta FILE "INT_KEYS" "FLOAT_KEYS" "LIST_KEYS" key=value...: a JSON object; "group.key"
# goes into the object "group"; the named keys become numbers or (space-separated) lists.
write_meta() {
  "$PY" - "$@" <<'EOF'
import json, sys
path, ints, floats, lists = sys.argv[1:5]
meta = {}
for kv in sys.argv[5:]:
    k, v = kv.split("=", 1)
    if "." in k:
        g, k = k.split(".", 1)
        meta.setdefault(g, {})[k] = v
    else:
        meta[k] = v
for k in lists.split():
    meta[k] = meta[k].split()
for k in ints.split():
    meta[k] = int(meta[k])
for k in floats.split():
    meta[k] = float(meta[k])
json.dump(meta, open(path, "w"), indent=1)
EOF
}
