#!/bin/bash
# in-guest-root-suite.sh RESULTS_DIR BINARY... - runs INSIDE the cgroup v2 QEMU guest, started by
# run-root-suite-in-vm.sh (not meant to be run on the host). Proves the guest really has a
# unified cgroup2 hierarchy, then runs each gtest binary in turn and prints one summary line per
# binary. Exit: 0 all passed, 1 any failed, 2 /sys/fs/cgroup is not cgroup2.
set -u
RESULTS=$1; shift
CG=/sys/fs/cgroup
export CORRAL_EXPECT_CGROUP_VERSION=${CORRAL_EXPECT_CGROUP_VERSION:-2}

fstype=$(stat -f -c %T "$CG" 2>&1)
echo "cgv2-guest: kernel $(uname -r); $CG is $fstype"
if [ "$fstype" != cgroup2fs ]; then
  echo "cgv2-guest: FAILED: $CG is not cgroup2 (stat -f says '$fstype'); refusing to run" >&2
  exit 2
fi
echo "cgv2-guest: controllers: $(cat $CG/cgroup.controllers); root subtree_control: $(cat $CG/cgroup.subtree_control)"
echo "cgv2-guest: CORRAL_EXPECT_CGROUP_VERSION=$CORRAL_EXPECT_CGROUP_VERSION, uid $(id -u), $(nproc) cpu"

# The guest's root is overlayfs (host / over 9p + tmpfs), and overlayfs cannot be the upper layer
# of another overlay (mount fails with EINVAL), unlike the ext4/xfs of a real host. Give the
# directories where corral and its tests keep writable layers and state a real local fs: ext4 on
# a sparse file (image layers are idmapped binds, which tmpfs supports only from Linux 6.3 and
# Debian 12's kernel is 6.1), or tmpfs where that cannot be made.
for d in /var/tmp /var/lib/corral; do
  mkdir -p "$d" || { echo "cgv2-guest: FAILED: cannot make $d" >&2; exit 1; }
  img=/run/cgv2-$(basename "$d").ext4
  if truncate -s 8G "$img" && mkfs.ext4 -q -F -E lazy_itable_init=1,lazy_journal_init=1 "$img" 2>/dev/null &&
     mount -o loop,nosuid,nodev "$img" "$d"; then
    chmod 1777 "$d"; fs=ext4
  else
    rm -f "$img"
    mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$d" \
      || { echo "cgv2-guest: FAILED: cannot mount a tmpfs on $d" >&2; exit 1; }
    fs=tmpfs
  fi
  echo "cgv2-guest: $fs on $d"
done
[ ! -d /var/lib/corral ] || chmod 755 /var/lib/corral

now() { read -r up _ < /proc/uptime; echo "$up"; }
# sum of one numeric attribute over the <testsuite> elements of a gtest XML file
xml_sum() { grep -o "<testsuite [^>]* $2=\"[0-9]*\"" "$1" 2>/dev/null \
            | sed -n "s/.* $2=\"\([0-9]*\)\"/\1/p" | awk '{s+=$1} END{print s+0}'; }

SUMMARY=() failed=0
for bin in "$@"; do
  name=$(basename "$bin")
  xml=$RESULTS/$name.xml log=$RESULTS/$name.log
  echo
  echo "cgv2-guest: ===== $name ====="
  args=(--gtest_output="xml:$xml")
  [ -z "${CORRAL_CGV2_FILTER:-}" ] || args+=(--gtest_filter="$CORRAL_CGV2_FILTER")
  t0=$(now)
  # gtest's own output (skips print their reasons) goes to the log and, through tee, to us
  timeout -k 10 "${CORRAL_CGV2_BIN_TIMEOUT:-300}" "$bin" "${args[@]}" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  el=$(awk -v a="$t0" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}')
  if [ -s "$xml" ]; then
    n=$(xml_sum "$xml" tests) nf=$(xml_sum "$xml" failures) ns=$(xml_sum "$xml" skipped)
    counts="$n tests, $nf failed, $ns skipped"
  else
    counts="no XML written"
  fi
  case $rc in
    0) st=PASS ;;
    124|137) st=FAIL
             counts="$counts; timed out after ${CORRAL_CGV2_BIN_TIMEOUT:-300} s in $(grep -o '^\[ RUN      \] .*' "$log" | tail -1 | cut -c14-)" ;;
    *) st=FAIL; [ $rc -le 128 ] || counts="$counts; killed by signal $((rc - 128))" ;;
  esac
  [ $st = PASS ] || failed=$((failed + 1))
  SUMMARY+=("$(printf '%-4s %-36s rc=%-3s %6s s  (%s)' "$st" "$name" "$rc" "$el" "$counts")")
done
sync

echo
echo "cgv2-guest: ===== summary (cgroup v2, kernel $(uname -r)) ====="
printf 'cgv2-guest: %s\n' "${SUMMARY[@]}"
echo "cgv2-guest: $(( $# - failed ))/$# binaries passed"
[ $failed = 0 ]
