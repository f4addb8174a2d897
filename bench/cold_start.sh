#!/usr/bin/env bash
# cold_start.sh [BUILD_DIR] - cold-start benchmark of corral against bubblewrap, crun and runc.
#
# Each tool creates a sandbox with full isolation (user, pid, mount, net, ipc, uts and cgroup
# namespaces, a cgroup with memory and pids limits, seccomp where the tool has it), runs
# /bin/true in it and tears it down. In ONE run this measures, per tool:
#   latency     hyperfine -N, $WARMUP warmups + $RUNS runs -> p50, p95 (from hyperfine's `times`)
#   throughput  $TP_WORKERS workers running the command back to back for $TP_SECONDS s
#   peak RSS    /usr/bin/time -f %M, $RSS_RUNS runs
# and writes the cold_start section of bench/RESULTS.md (a full run: every tool, RUNS >= 100,
# TP_SECONDS >= 10; other sections of the file stay as they are) or bench/out/RESULTS-trial.md
# (anything less). Raw data goes to bench/out/, generated bundles and
# the wrapper binary to bench/.work/ (both git-ignored). Run as root. See bench/README.md.
#
# Environment:
#   CORRAL      corral binary (default BUILD_DIR/tools/corral; BUILD_DIR defaults to ./build)
#   TOOLS       subset/order of: corral bwrap-cg bwrap unshare crun runc cgwrap true
#               (default: all of them; the first one present of corral, bwrap-cg is the
#               reference of the ratios, or REF=tool)
#   RUNS=100 WARMUP=5 TP_SECONDS=10 TP_WORKERS=2 RSS_RUNS=10 MEM=256M PIDS=256
#   MAP_UID=200000     host uid/gid that root in the crun/runc user namespace maps to (65536 ids)
#   RESULTS_MD=path    where to write the report (overrides the choice above)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$HERE/.." && pwd -P)
BUILD=${1:-$REPO/build}
[ ! -d "$BUILD" ] || BUILD=$(cd "$BUILD" && pwd -P)   # absolute: the commands go into the report
CORRAL=${CORRAL:-$BUILD/tools/corral}
ALL_TOOLS="corral bwrap-cg bwrap unshare crun runc cgwrap true"
TOOLS=${TOOLS:-$ALL_TOOLS}
RUNS=${RUNS:-100} WARMUP=${WARMUP:-5} TP_SECONDS=${TP_SECONDS:-10} TP_WORKERS=${TP_WORKERS:-2}
RSS_RUNS=${RSS_RUNS:-10} MEM=${MEM:-256M} PIDS=${PIDS:-256} MAP_UID=${MAP_UID:-200000}
WORK=$HERE/.work
OUT=$HERE/out
PY=/usr/bin/python3          # not a pyenv shim: it is on the measured path of the throughput loop
HELPER=$HERE/cold_start_helper.py
TAG=cb$$                     # unique per invocation: container ids, cgroup names
CGBASE=corral-bench-$$       # parent cgroup of everything this run creates (absolute path)
T_START=$(date +%s)

say() { echo "cold_start: $*" >&2; }
die() { echo "cold_start: FAILED: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (sudo $0 ...)"
for t in $TOOLS; do
  case " $ALL_TOOLS " in *" $t "*) ;; *) die "unknown tool '$t' in TOOLS (known: $ALL_TOOLS)" ;; esac
done
for c in hyperfine "$PY" /usr/bin/time cc unshare; do
  command -v "$c" >/dev/null || die "$c not found (dist/install-deps.sh installs what this needs)"
done
to_bytes() { numfmt --from=iec "$1"; }
MEM_BYTES=$(to_bytes "$MEM")

. "$HERE/common.sh"   # CGMODE, HYBRID, CGDESC, in_ns, cleanup helpers, the report's meta

# ------------------------------------------------------------------- cleanup (trap EXIT)
# What this run creates: cgroups named $CGBASE (and below) in every cgroup hierarchy, containers
# named $TAG-* in crun's and runc's state, files under bench/.work and bench/out. /sys/fs/cgroup
# itself (a tmpfs on v1 hosts) is compared before and after: any new entry there fails the run.
cleanup() {
  local rc=$?
  set +e
  remove_containers || rc=1
  remove_cgroup_tree "$CGBASE" || rc=1
  cgroup_tmpfs_unchanged || rc=1
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# parent cgroups (so that everything this run makes sits under one name)
make_cgroup_base

# ------------------------------------------------------------------- work dir, rootfs, bundles
mkdir -p "$WORK" "$OUT"
rm -f "$OUT"/latency-*.json "$OUT"/throughput-*.json "$OUT"/rss-*.txt "$OUT"/meta.json
ROOTFS=$WORK/rootfs
# host-derived minimal root: /usr bind-mounted read-only by the runtime; merged-usr symlinks
for m in usr proc dev tmp; do   # runtimes mount in their own namespaces; never rm -rf through a mount
  ! mountpoint -q "$ROOTFS/$m" 2>/dev/null || die "$ROOTFS/$m is a mount point in the host namespace"
done
rm -rf "$ROOTFS"; mkdir -p "$ROOTFS"/{usr,proc,dev,tmp}
LIBLINKS=()
for l in /bin /sbin /lib /lib32 /lib64 /libx32; do
  [ -L "$l" ] || continue
  ln -s "$(readlink "$l")" "$ROOTFS$l"
  LIBLINKS+=(--symlink "$(readlink "$l")" "$l")
done
chmod 755 "$ROOTFS"

CGWRAP=$WORK/cgwrap
cc -O2 -Wall -static -o "$CGWRAP" "$HERE/cgwrap.c" 2>/dev/null || cc -O2 -Wall -o "$CGWRAP" "$HERE/cgwrap.c" \
  || die "cannot compile bench/cgwrap.c"

# ------------------------------------------------------------------- the commands
declare -A CMD WHAT
BWRAP_ARGS="--unshare-all --ro-bind /usr /usr ${LIBLINKS[*]} --proc /proc --dev /dev --tmpfs /tmp"
CMD[corral]="$CORRAL run --memory $MEM --pids $PIDS -- /bin/true"
WHAT[corral]="\`corral run\` (image host, memory+pids limits, seccomp, corral-init)"
CMD[bwrap-cg]="$CGWRAP $CGMODE $CGBASE $MEM_BYTES $PIDS -- $(command -v bwrap) $BWRAP_ARGS /bin/true"
WHAT[bwrap-cg]="\`bwrap --unshare-all\` in a memory+pids cgroup made by \`cgwrap\`, no seccomp"
CMD[bwrap]="$(command -v bwrap) $BWRAP_ARGS /bin/true"
WHAT[bwrap]="\`bwrap --unshare-all\` alone: no cgroup, no seccomp (reference)"
CMD[unshare]="$(command -v unshare) --user --map-root-user --pid --fork --mount --net --uts --ipc /bin/true"
WHAT[unshare]="\`unshare\` of user, pid, mount, net, uts and ipc namespaces around \`/bin/true\`: the namespaces alone, no root file system, cgroup or seccomp"
CMD[cgwrap]="$CGWRAP $CGMODE $CGBASE $MEM_BYTES $PIDS -- /bin/true"
WHAT[cgwrap]="the cgroup wrapper alone around \`/bin/true\`, no sandbox (its own cost)"
CMD[true]=/bin/true
WHAT[true]="plain fork+exec of \`/bin/true\`: the floor"
WHAT[crun]="\`crun run\`, OCI bundle, 7 namespaces, memory+pids limits, seccomp allowlist"
WHAT[runc]="\`runc run\`, same bundle"
# crun and runc: one bundle per worker (each its own container id and cgroup); worker 0 also
# does the latency runs
bundle_cmd() { # runtime worker -> command line
  echo "$(command -v "$1") run --bundle $WORK/bundle-$1-w$2 $TAG-$1-w$2"
}

PRESENT=()
for t in $TOOLS; do
  case $t in
    corral)
      [ -x "$CORRAL" ] || die "corral binary $CORRAL not found (set CORRAL or BUILD_DIR, or drop corral from TOOLS)" ;;
    bwrap|bwrap-cg) command -v bwrap >/dev/null || die "bwrap not installed" ;;
    crun|runc)
      command -v $t >/dev/null || die "$t not installed"
      for w in $(seq 0 $((TP_WORKERS - 1))); do
        "$PY" "$HELPER" bundle "$WORK/bundle-$t-w$w" "$ROOTFS" "/$CGBASE/$t-w$w" "$MEM_BYTES" "$PIDS" "$MAP_UID" >/dev/null
      done
      CMD[$t]=$(bundle_cmd $t 0) ;;
  esac
  PRESENT+=("$t")
done
REF=${REF:-}
if [ -z "$REF" ]; then for t in corral bwrap-cg; do case " $TOOLS " in *" $t "*) REF=$t; break ;; esac; done; fi
[ -n "$REF" ] || REF=${PRESENT[0]}

# ------------------------------------------------------------------- smoke test: one run each
for t in "${PRESENT[@]}"; do
  # shellcheck disable=SC2086
  rc=0; err=$(in_ns "$t" ${CMD[$t]} 2>&1 </dev/null) || rc=$?
  [ $rc = 0 ] || die "$t does not run (exit $rc): ${CMD[$t]}${err:+: $err}"
done
say "tools: ${PRESENT[*]} (ratios vs $REF); cgroups: $CGDESC"

# ------------------------------------------------------------------- measure
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for t in "${PRESENT[@]}"; do
  say "$t: latency ($WARMUP warmup + $RUNS runs)"
  in_ns "$t" hyperfine -N --style basic --warmup "$WARMUP" --runs "$RUNS" \
    --export-json "$OUT/latency-$t.json" --command-name "$t" "${CMD[$t]}" >/dev/null \
    || die "hyperfine failed for $t (a run failed or hyperfine could not start it): ${CMD[$t]}"

  say "$t: throughput ($TP_WORKERS workers, ${TP_SECONDS} s)"
  jcmds=()
  for w in $(seq 0 $((TP_WORKERS - 1))); do
    case $t in crun|runc) c=$(bundle_cmd $t $w) ;; *) c=${CMD[$t]} ;; esac
    jcmds+=("$("$PY" -c 'import json,sys; print(json.dumps(sys.argv[1].split()))' "$c")")
  done
  in_ns "$t" "$PY" "$HELPER" throughput "$TP_SECONDS" "${jcmds[@]}" > "$OUT/throughput-$t.json" \
    || die "throughput loop failed for $t"

  say "$t: peak RSS ($RSS_RUNS runs)"
  for _ in $(seq "$RSS_RUNS"); do
    # shellcheck disable=SC2086
    in_ns "$t" /usr/bin/time -f %M -o "$OUT/rss.tmp" ${CMD[$t]} </dev/null >/dev/null \
      || die "$t failed under /usr/bin/time"
    tail -1 "$OUT/rss.tmp" >> "$OUT/rss-$t.txt"
  done
  rm -f "$OUT/rss.tmp"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ------------------------------------------------------------------- report
TRIAL=
[ "$RUNS" -ge 100 ] && [ "$WARMUP" -ge 5 ] && awk -v s="$TP_SECONDS" 'BEGIN{exit !(s >= 10)}' || TRIAL="RUNS=$RUNS WARMUP=$WARMUP TP_SECONDS=$TP_SECONDS"
for t in $ALL_TOOLS; do case " ${PRESENT[*]} " in *" $t "*) ;; *) TRIAL="${TRIAL:+$TRIAL, }without $t" ;; esac; done
RESULTS_MD=${RESULTS_MD:-$([ -z "$TRIAL" ] && echo "$HERE/RESULTS.md" || echo "$OUT/RESULTS-trial.md")}
# The report replaces only the cold_start section of RESULTS_MD (bench/results_md.py); the trial
# file is this script's alone, so it starts afresh.
[ "$RESULTS_MD" != "$OUT/RESULTS-trial.md" ] || rm -f "$RESULTS_MD"
corral_version=
[ ! -x "$CORRAL" ] || corral_version=$(corral_version_of "$CORRAL" "$REPO")
# key=value pairs -> bench/out/meta.json (read by the report)
meta=(
  "date=$(date -u '+%Y-%m-%d %H:%M UTC')" "elapsed_s=$(( $(date +%s) - T_START ))"
  "tools=${PRESENT[*]}" "ref=$REF" "trial=$TRIAL" "runs=$RUNS" "warmup=$WARMUP"
  "tp_seconds=$TP_SECONDS" "tp_workers=$TP_WORKERS" "rss_runs=$RSS_RUNS"
  "versions.corral=${corral_version:-not measured}"
  "versions.bubblewrap=$(ver bwrap --version)" "versions.crun=$(ver crun --version)"
  "versions.runc=$(ver runc --version)" "versions.hyperfine=$(ver hyperfine --version)"
)
for t in "${PRESENT[@]}"; do meta+=("commands.$t=${CMD[$t]}" "what.$t=${WHAT[$t]}"); done
case " ${PRESENT[*]} " in *" crun "*) [ -z "$HYBRID" ] ||
  meta+=("notes.crun=crun 1.8.1 refuses hybrid cgroup hosts, so its measurements ran in a private mount namespace where a throwaway tmpfs covers /sys/fs/cgroup/unified (crun then sees plain v1; not part of the timed command).") ;; esac
case " ${PRESENT[*]} " in *" bwrap-cg "*)
  meta+=("notes.bwrap=bubblewrap has neither a cgroup nor a default seccomp filter: bwrap-cg gets its memory+pids cgroup from cgwrap (mkdir, limits, vfork, join, exec bwrap, wait, rmdir; compare the cgwrap and true rows for its own cost) and runs without seccomp.") ;; esac
mapfile -t -O ${#meta[@]} meta < <(machine_meta)
write_meta "$OUT/meta.json" "elapsed_s runs warmup tp_workers rss_runs" "tp_seconds" "tools" "${meta[@]}"
"$PY" "$HELPER" report "$OUT" "$RESULTS_MD"
say "report: $RESULTS_MD${TRIAL:+ (trial: $TRIAL)}"
