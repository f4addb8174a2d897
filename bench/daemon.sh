#!/usr/bin/env bash
# daemon.sh [BUILD_DIR] - corrald benchmark (issue 3), against crun exec and runc exec.
#
# Starts a private corrald (own state dir, run dir, admin socket, cgroup parent corral/bench-<pid>,
# a free loopback port) and measures, in ONE run:
#   1. exec round trip in a running sandbox: `exec` of ["true"] over one open WebSocket until its
#      `exit` event ($WARMUP + $RUNS; bench/exec_rtt.cc, then the Python client), and `corral exec SB -- true` as a whole process
#      (hyperfine -N); against `crun exec` and `runc exec` of `true` into a running container
#      (hyperfine -N, same runs), with ratios
#   2. streaming throughput: `cat` of a $STREAM_BYTES file in the sandbox to the `corral exec`
#      CLI, to a Python websockets client and to a minimal raw-socket client, best of
#      $STREAM_REPEAT, with the CPU time of corrald, corral-init, cat and the client
#   3. corrald's RSS with $IDLE_SANDBOXES idle sandboxes (and corral-init's), their creation time
#      (sequential, then $CREATE_CONCURRENCY concurrent clients), destruction, leak check
#   4. density (issue 19): create then first command done ($CREATE_RUNS, without and with a warm
#      pool of $POOL_SIZE), creates per second ($DENSITY_CONCURRENCY clients, $CREATE_TP_SECONDS s),
#      $DENSITY idle sandboxes (create latency first vs last, host memory and disk per sandbox,
#      exec at that density, destroying them all); bench/daemon_bench_density.py
# and writes the "daemon" section of bench/RESULTS.md (a full run: every phase and runtime,
# RUNS >= 200, WARMUP >= 10, STREAM_BYTES >= 1G, STREAM_REPEAT >= 3, IDLE_SANDBOXES >= 200,
# DENSITY >= 2000, CREATE_RUNS >= 200) or of
# bench/out/RESULTS-daemon-trial.md (anything less). Raw data goes to bench/out/daemon/, the
# daemon's state, bundles and rootfs to bench/.work/ (both git-ignored, removed at the end but
# for the raw data). Run as root. See bench/README.md.
#
# Environment:
#   CORRALD, CORRAL  the binaries (default BUILD_DIR/tools/{corrald,corral}; BUILD_DIR: ./build)
#   EXEC_RTT         the lean exec client (default BUILD_DIR/bench/exec_rtt)
#   PHASES="exec stream idle density"   RUNTIMES="crun runc"   (subsets for a trial)
#   RUNS=200 WARMUP=10
#   STREAM_BYTES=1G STREAM_REPEAT=3 SANDBOX_MEMORY=3G SANDBOX_DISK=2G  (the exec/stream sandbox)
#   IDLE_SANDBOXES=200 CREATE_CONCURRENCY=8 IDLE_MEMORY=64M IDLE_DISK=64M
#   DENSITY=2000 DENSITY_CONCURRENCY=4 CREATE_RUNS=200 CREATE_TP_SECONDS=10 POOL_SIZE=8
#   MEM=256M PIDS=256 MAP_UID=200000   (the crun/runc containers, as in cold_start.sh)
#   RESULTS_MD=path    where to write the report (overrides the choice above)
#   STATE_FS=host|xfs|ext4  the daemon's state dir on this directory's file system (host: layers
#                      are whatever corral doctor says), or on a 64G sparse XFS / ext4 with project
#                      quotas, loop-mounted for this run (project-quota layers; needs a kernel with
#                      CONFIG_XFS_QUOTA / CONFIG_QFMT_V2, as Debian's)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
BUILD=${1:-$REPO/build}
[ ! -d "$BUILD" ] || BUILD=$(cd "$BUILD" && pwd -P)
CORRALD=${CORRALD:-$BUILD/tools/corrald}
CORRAL=${CORRAL:-$BUILD/tools/corral}
EXEC_RTT=${EXEC_RTT:-$BUILD/bench/exec_rtt}
CORRALD_REAL=$(readlink -f "$CORRALD" || true)   # how cleanup recognises the daemon it started
ALL_PHASES="exec stream idle density"
PHASES=${PHASES:-$ALL_PHASES}
RUNTIMES=${RUNTIMES-crun runc}
RUNS=${RUNS:-200} WARMUP=${WARMUP:-10}
STREAM_BYTES=${STREAM_BYTES:-1G} STREAM_REPEAT=${STREAM_REPEAT:-3}
SANDBOX_MEMORY=${SANDBOX_MEMORY:-3G} SANDBOX_DISK=${SANDBOX_DISK:-2G}
IDLE_SANDBOXES=${IDLE_SANDBOXES:-200} CREATE_CONCURRENCY=${CREATE_CONCURRENCY:-8}
IDLE_MEMORY=${IDLE_MEMORY:-64M} IDLE_DISK=${IDLE_DISK:-64M}
DENSITY=${DENSITY:-2000} DENSITY_CONCURRENCY=${DENSITY_CONCURRENCY:-4} CREATE_RUNS=${CREATE_RUNS:-200}
CREATE_TP_SECONDS=${CREATE_TP_SECONDS:-10} POOL_SIZE=${POOL_SIZE:-8}
MEM=${MEM:-256M} PIDS=${PIDS:-256} MAP_UID=${MAP_UID:-200000}
export RUNS WARMUP STREAM_BYTES STREAM_REPEAT IDLE_SANDBOXES CREATE_CONCURRENCY IDLE_MEMORY IDLE_DISK \
  DENSITY DENSITY_CONCURRENCY CREATE_RUNS CREATE_TP_SECONDS POOL_SIZE
PY=/usr/bin/python3          # Debian's, with python3-websockets (not a pyenv shim)
DRIVER=$HERE/daemon_bench.py
OUT=$HERE/out/daemon
WORK=$HERE/.work/daemon-$$   # this run's: daemon state (disk images), rootfs, bundles
TAG=cd$$                     # crun/runc container ids
CGBASE=corral-bench-d$$      # parent cgroup of the containers (absolute path)
CGPARENT=corral/bench-$$     # corrald's cgroup_parent (relative)
RUN_DIR=/run/corral-bench-$$
T_START=$(date +%s)

say() { echo "daemon: $*" >&2; }
die() { echo "daemon: FAILED: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (sudo $0 ...)"
for p in $PHASES; do case " $ALL_PHASES " in *" $p "*) ;; *) die "unknown phase '$p' (known: $ALL_PHASES)" ;; esac; done
for r in $RUNTIMES; do case $r in crun|runc) ;; *) die "unknown runtime '$r' in RUNTIMES (crun runc)" ;; esac; done
for c in hyperfine "$PY" unshare numfmt losetup; do
  command -v "$c" >/dev/null || die "$c not found (dist/install-deps.sh installs what this needs)"
done
"$PY" -c 'import websockets' 2>/dev/null || die "$PY has no websockets module (apt-get install python3-websockets)"
for b in "$CORRALD" "$CORRAL" "$(dirname "$CORRALD")/corral-init" "$EXEC_RTT"; do
  [ -x "$b" ] || die "$b not built (cmake --build BUILD_DIR --target corrald corral corral-init exec_rtt)"
done
for r in $RUNTIMES; do command -v "$r" >/dev/null || die "$r not installed"; done
MEM_BYTES=$(numfmt --from=iec "$MEM")
has_phase() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }

. "$HERE/common.sh"   # CGMODE, HYBRID, CGDESC, in_ns, cleanup helpers, the report's meta

# ------------------------------------------------------------------- cleanup (trap EXIT)
# What this run creates: corrald (DAEMON_PID) and its sandboxes, cgroups $CGPARENT and $CGBASE
# in every hierarchy, containers $TAG-* of crun and runc, $RUN_DIR, $WORK (state dir with the
# disk images, attached to loop devices while sandboxes run). Nothing else is touched.
DAEMON_PID=
daemon_alive() { [ -n "$DAEMON_PID" ] && [ "$(readlink "/proc/$DAEMON_PID/exe" 2>/dev/null)" = "$CORRALD_REAL" ]; }
cleanup() {
  local rc=$? bad='' id m d p l
  set +e
  if daemon_alive; then
    if [ -S "$RUN_DIR/admin.sock" ]; then
      BENCH_ADMIN_SOCKET=$RUN_DIR/admin.sock timeout 300 "$PY" "$DRIVER" destroy-all \
        || { say "could not destroy every sandbox through the API"; bad=1; }
    fi
    kill -TERM "$DAEMON_PID"
    for _ in $(seq 100); do daemon_alive || break; sleep 0.2; done
    daemon_alive && { say "corrald did not stop; SIGKILL"; kill -KILL "$DAEMON_PID"; }
  fi
  remove_containers || bad=1
  remove_cgroup_tree "$CGPARENT" || bad=1
  remove_cgroup_tree "$CGBASE" || bad=1
  # The state dir's own file system (STATE_FS), once nothing of the daemon's uses it.
  if [ -n "${STATE_MOUNT:-}" ] && mountpoint -q "$STATE_MOUNT"; then
    umount "$STATE_MOUNT" 2>/dev/null || { say "$STATE_MOUNT is busy; unmounting it lazily"; umount -l "$STATE_MOUNT"; bad=1; }
  fi
  # Loop devices on our images: autocleared when the sandboxes' mounts go; detach what is left.
  for l in /sys/block/loop*/loop/backing_file; do
    [ -e "$l" ] || continue
    case "$(cat "$l" 2>/dev/null)" in
      "$WORK"/*) d=/dev/$(basename "$(dirname "$(dirname "$l")")"); say "detaching leftover $d"; losetup -d "$d"; bad=1 ;;
    esac
  done
  if grep -qF -e "$WORK" -e "$RUN_DIR" /proc/self/mountinfo; then
    say "mounts of $WORK or $RUN_DIR are left in the host's mount namespace; not removing them"; bad=1
  else
    rm -rf "$WORK" "$RUN_DIR"
  fi
  cgroup_tmpfs_unchanged || bad=1
  if [ -n "$bad" ]; then say "cleanup was not clean (see above)"; [ "$rc" != 0 ] || rc=1; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$OUT" "$WORK"
rm -f "$OUT"/*.json "$OUT"/*.txt "$OUT"/corrald.log

# ------------------------------------------------------------------- crun/runc: running containers
if has_phase exec && [ -n "$RUNTIMES" ]; then
  make_cgroup_base
  # The same rootfs and bundle as cold_start.sh (its helper makes them), but the container's
  # process is `sleep infinity`: it stays up, and `exec` runs `true` beside it.
  ROOTFS=$WORK/rootfs
  mkdir -p "$ROOTFS"/{usr,proc,dev,tmp}
  for l in /bin /sbin /lib /lib32 /lib64 /libx32; do
    [ -L "$l" ] && ln -s "$(readlink "$l")" "$ROOTFS$l"
  done
  chmod 755 "$ROOTFS"
  for rt in $RUNTIMES; do
    B=$WORK/bundle-$rt
    "$PY" "$HERE/cold_start_helper.py" bundle "$B" "$ROOTFS" "/$CGBASE/$rt" "$MEM_BYTES" "$PIDS" "$MAP_UID" >/dev/null
    "$PY" - "$B/config.json" <<'EOF'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["process"]["args"] = ["sleep", "infinity"]
json.dump(cfg, open(sys.argv[1], "w"), indent=1)
EOF
    in_ns $rt $rt run -d --bundle "$B" "$TAG-$rt" </dev/null >/dev/null 2>"$OUT/$rt-run.err" \
      || die "$rt run -d failed: $(cat "$OUT/$rt-run.err")"
    err=$(in_ns $rt $rt exec "$TAG-$rt" true 2>&1 </dev/null) || die "$rt exec $TAG-$rt true failed: $err"
  done
fi

# ------------------------------------------------------------------- corrald
STATE_DIR=$WORK/state
DISK_QUOTA=auto
STATE_FS=${STATE_FS:-host}
if [ "$STATE_FS" != host ]; then
  case $STATE_FS in
    xfs)  MKFS=(mkfs.xfs -q -f) ;;
    ext4) MKFS=(mkfs.ext4 -q -F -O quota,project) ;;
    *)    die "STATE_FS=$STATE_FS: expected host, xfs or ext4" ;;
  esac
  STATE_MOUNT=$WORK/state-fs
  mkdir -p "$STATE_MOUNT" && truncate -s 64G "$WORK/state-fs.img" && "${MKFS[@]}" "$WORK/state-fs.img" >/dev/null \
    || die "cannot make the $STATE_FS file system"
  mount -t "$STATE_FS" -o loop,prjquota "$WORK/state-fs.img" "$STATE_MOUNT" \
    || die "cannot mount a $STATE_FS with prjquota (a kernel without quota support?)"
  STATE_DIR=$STATE_MOUNT/state DISK_QUOTA=project
fi
CFG=$WORK/corrald.toml
MOST=$IDLE_SANDBOXES
if has_phase density && [ "$DENSITY" -gt "$MOST" ]; then MOST=$DENSITY; fi
# About 16 of corrald's descriptors per sandbox (corral doctor's open_files): its hard limit is
# raised for this run (corrald raises its soft limit to it), as the unit's LimitNOFILE does.
ulimit -Hn 1048576 2>/dev/null || ulimit -Hn "$(cat /proc/sys/fs/nr_open)" 2>/dev/null || say "cannot raise the hard limit of open files (no CAP_SYS_RESOURCE): it stays $(ulimit -Hn)"
LOG=$OUT/corrald.log
cat > "$CFG" <<EOF
[daemon]
state_dir = "$STATE_DIR"
run_dir = "$RUN_DIR"
admin_socket = "$RUN_DIR/admin.sock"
cgroup_parent = "$CGPARENT"

[api]
listen = "127.0.0.1:0"
# One user makes every request here, far more than a minute's default share: the benchmark
# measures the daemon, not its rate limit.
requests_per_minute = 0

[sandbox]
max_sandboxes_per_user = $((MOST + 64))
max_sandboxes = $((MOST + 64 > 1000 ? MOST + 64 : 1000))
stop_grace = 2
disk_quota = "$DISK_QUOTA"

# The density phase sets it through reloads (daemon_bench_density.py).
[pool]
sizes = {}
EOF
: > "$LOG"
setsid "$CORRALD" --config "$CFG" --foreground >>"$LOG" 2>&1 </dev/null &
DAEMON_PID=$!
sleep 0.1
daemon_alive || die "corrald did not start (pid $DAEMON_PID): $(tail -5 "$LOG")"
export BENCH_LOG=$LOG BENCH_ADMIN_SOCKET=$RUN_DIR/admin.sock BENCH_STATE_DIR=$STATE_DIR BENCH_CONFIG=$CFG \
  BENCH_RUN_DIR=$RUN_DIR BENCH_CGROUP_PARENT=$CGPARENT BENCH_DAEMON_PID=$DAEMON_PID CORRAL
"$PY" "$DRIVER" setup "$WORK/env" || die "corrald setup failed: $(tail -5 "$LOG")"
set -a; . "$WORK/env"; set +a       # CORRAL_URL, CORRAL_TOKEN (for the driver and the CLI)
"$PY" "$DRIVER" rss "$OUT/rss-start.json"
say "corrald $DAEMON_PID on $CORRAL_URL; phases: $PHASES; runtimes: ${RUNTIMES:-none}; cgroups: $CGDESC"

# ------------------------------------------------------------------- measure
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
if has_phase idle; then
  say "idle: $IDLE_SANDBOXES sandboxes (memory $IDLE_MEMORY, disk $IDLE_DISK), sequential then $CREATE_CONCURRENCY concurrent"
  "$PY" "$DRIVER" idle "$OUT/idle.json" || die "idle sandboxes phase"
fi
if has_phase density; then
  say "density: create then first command ($CREATE_RUNS, pool off and $POOL_SIZE), creates/s, $DENSITY idle sandboxes"
  "$PY" "$DRIVER" density "$OUT/density.json" || die "density phase"
fi
if has_phase exec || has_phase stream; then
  BENCH_SANDBOX=$("$PY" "$DRIVER" create bench "$SANDBOX_MEMORY" "$SANDBOX_DISK") || die "cannot create the bench sandbox"
  export BENCH_SANDBOX
fi
declare -A CMD
if has_phase exec; then
  say "exec: over one WebSocket ($WARMUP warmup + $RUNS runs)"
  "$PY" "$DRIVER" exec-ws "$OUT/exec-ws.json" || die "exec over WebSocket"
  say "exec: over one WebSocket, lean client ($WARMUP warmup + $RUNS runs)"
  "$EXEC_RTT" "$CORRAL_URL" "$CORRAL_TOKEN" "$BENCH_SANDBOX" "$RUNS" "$WARMUP" "$OUT/exec-lean.json" \
    || die "exec over WebSocket (exec_rtt)"
  CMD[corral-cli]="$CORRAL exec $BENCH_SANDBOX -- true"
  CMD[corral-version]="$CORRAL version"     # the CLI's process start alone (no connection)
  CMD[true]=/bin/true                       # fork+exec of `true` on the host: the floor
  for rt in $RUNTIMES; do CMD[$rt]="$(command -v $rt) exec $TAG-$rt true"; done
  for t in corral-cli corral-version true $RUNTIMES; do
    say "exec: $t ($WARMUP warmup + $RUNS runs)"
    in_ns "$t" hyperfine -N --style basic --warmup "$WARMUP" --runs "$RUNS" \
      --export-json "$OUT/latency-$t.json" --command-name "$t" "${CMD[$t]}" >/dev/null \
      || die "hyperfine failed for $t: ${CMD[$t]}"
  done
fi
if has_phase stream; then
  say "stream: cat of $STREAM_BYTES, best of $STREAM_REPEAT per client"
  "$PY" "$DRIVER" stream "$OUT/stream.json" || die "streaming phase"
fi
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
"$PY" "$DRIVER" rss "$OUT/rss-end.json"
if [ -n "${BENCH_SANDBOX:-}" ]; then
  BENCH_ADMIN_SOCKET=$RUN_DIR/admin.sock "$PY" "$DRIVER" destroy-all || die "cannot destroy the bench sandbox"
fi
"$PY" "$DRIVER" leaks "$OUT/leaks-end.json" || die "something leaked (see $OUT/leaks-end.json)"

# ------------------------------------------------------------------- report
TRIAL=
[ "$RUNS" -ge 200 ] && [ "$WARMUP" -ge 10 ] && [ "$STREAM_REPEAT" -ge 3 ] && [ "$IDLE_SANDBOXES" -ge 200 ] \
  && [ "$(numfmt --from=iec "$STREAM_BYTES")" -ge $((1 << 30)) ] && [ "$DENSITY" -ge 2000 ] && [ "$CREATE_RUNS" -ge 200 ] \
  || TRIAL="RUNS=$RUNS WARMUP=$WARMUP STREAM_BYTES=$STREAM_BYTES STREAM_REPEAT=$STREAM_REPEAT IDLE_SANDBOXES=$IDLE_SANDBOXES DENSITY=$DENSITY CREATE_RUNS=$CREATE_RUNS"
for p in $ALL_PHASES; do has_phase $p || TRIAL="${TRIAL:+$TRIAL, }without $p"; done
for r in crun runc; do case " $RUNTIMES " in *" $r "*) ;; *) TRIAL="${TRIAL:+$TRIAL, }without $r" ;; esac; done
RESULTS_MD=${RESULTS_MD:-$([ -z "$TRIAL" ] && echo "$HERE/RESULTS.md" || echo "$HERE/out/RESULTS-daemon-trial.md")}
# The report replaces only the daemon section of RESULTS_MD (bench/results_md.py); the trial file
# is this script's alone, so it starts afresh.
[ "$RESULTS_MD" != "$HERE/out/RESULTS-daemon-trial.md" ] || rm -f "$RESULTS_MD"
corral_version=$(corral_version_of "$CORRAL" "$REPO")
meta=(
  "date=$(date -u '+%Y-%m-%d %H:%M UTC')" "elapsed_s=$(( $(date +%s) - T_START ))"
  "phases=$PHASES" "runtimes=$RUNTIMES" "trial=$TRIAL" "runs=$RUNS" "warmup=$WARMUP"
  "stream_bytes=$STREAM_BYTES" "stream_repeat=$STREAM_REPEAT" "sandbox_memory=$SANDBOX_MEMORY"
  "sandbox_disk=$SANDBOX_DISK" "idle_sandboxes=$IDLE_SANDBOXES" "create_concurrency=$CREATE_CONCURRENCY"
  "idle_memory=$IDLE_MEMORY" "idle_disk=$IDLE_DISK" "mem=$MEM" "pids=$PIDS" "density=$DENSITY"
  "pool_size=$POOL_SIZE"
  "versions.corral=$corral_version"
  "versions.crun=$(ver crun --version)" "versions.runc=$(ver runc --version)"
  "versions.hyperfine=$(ver hyperfine --version)"
  "versions.python3-websockets=$("$PY" -c 'import websockets, sys; print(websockets.__version__, "on Python", sys.version.split()[0])')"
)
for t in "${!CMD[@]}"; do meta+=("commands.$t=${CMD[$t]}"); done
[ -z "$HYBRID" ] || meta+=("notes.crun=crun 1.8.1 refuses hybrid cgroup hosts, so \`crun run -d\` and the \`crun exec\` measurements ran in a private mount namespace where a throwaway tmpfs covers /sys/fs/cgroup/unified (as in the cold-start benchmark; not part of the timed command).")
mapfile -t -O ${#meta[@]} meta < <(machine_meta)
# How the daemon made the sandboxes' writable layers (its log says which, and why).
meta+=("machine.layers=$("$PY" -c 'import json, sys
for line in open(sys.argv[1]):
    if "disk caps of new sandboxes" in line:
        e = json.loads(line); print(e["kind"] + ": " + e["why"]); break' "$LOG" 2>/dev/null)")
write_meta "$OUT/meta.json" "elapsed_s runs warmup stream_repeat idle_sandboxes create_concurrency" "" "phases runtimes" "${meta[@]}"
"$PY" "$DRIVER" report "$OUT" "$RESULTS_MD"
say "report: $RESULTS_MD${TRIAL:+ (trial: $TRIAL)}"
