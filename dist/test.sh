#!/usr/bin/env bash
# Installs what corral needs, builds it with warnings as errors, and runs the whole test suite:
# unit, root (real namespaces and cgroups on this host), e2e, the QEMU guests (the root suites
# again over cgroup v2; the Debian package under systemd), then the unit tests once more under
# AddressSanitizer and UndefinedBehaviorSanitizer, built by Clang. Exits non-zero when any test
# fails.
#
# With arguments, they go to one ctest over the main build (e.g. `dist/test.sh -L unit`) and the
# sanitizer stage runs after it as before. Without, the stages are scheduled to fit a 2-core
# machine: what waits on the network or the disk (the guest's Debian tree, the image tests'
# Debian image) runs while corral compiles, and while the host's tests run (mostly waiting on
# daemons, sockets and timers), the guests' tests run beside them at a lower priority (nice 5),
# and the previous release (nice 10) and the sanitizer build (nice 19) use what CPU is left. Each
# stage's time is printed at the end.
# CORRAL_SKIP_SANITIZERS=1 leaves the sanitizer stage out.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
build_dir=${BUILD_DIR:-build}
logs=$build_dir/test-artifacts/stages

t_start=$(date +%s)
stage_names=()
stage_secs=()
stage_done() {  # NAME START: records how long the stage NAME took since START (date +%s)
  stage_names+=("$1"); stage_secs+=($(( $(date +%s) - $2 )))
  echo "== stage $1: ${stage_secs[-1]} s"
}
report() {
  echo "== stage times (CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores)"
  for i in "${!stage_names[@]}"; do printf '   %-28s %5d s\n' "${stage_names[$i]}" "${stage_secs[$i]}"; done
  printf '   %-28s %5d s\n' total $(( $(date +%s) - t_start ))
}
trap report EXIT

mkdir -p "$logs"
if [ $# -gt 0 ]; then
  t=$(date +%s); dist/install-deps.sh; stage_done install-deps "$t"
else
  # What the build needs first; the rest (the tests' packages and npm modules, ~40 more) while
  # corral compiles, below.
  t=$(date +%s); dist/install-deps.sh build; stage_done install-build-deps "$t"
fi

main_build() {  # main_build ON|OFF: with the unit test programs or without
  # The build type's optimization (-O2, as shipped) with line tables only (-g1): full debug info
  # was a fifth of the compile and most of the link on a 2-core Xeon, and a test failure's
  # backtrace needs only functions and lines. The package strips them either way. A unity build
  # (eight .cc files a unit, as the sanitizer tree): the Beast, Asio and JSON templates are parsed
  # and instantiated once a unit, not once a file. Each file on its own is still compiled by the
  # README's build (and by dist/build.sh without these flags).
  BUILD_DIR=$build_dir dist/build.sh -DCORRAL_WERROR=ON "-DCORRAL_UNIT_TESTS=$1" \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
}
sanitizer_build() {
  # Only what the unit label runs (no root tests, benchmarks, fixtures or web page), with line
  # tables but no variable info (-g1): the sanitizers' reports still name functions and lines.
  # A unity build (8 sources a unit): the headers (Boost, nlohmann) are parsed once per batch.
  # corral's libraries shared: each of the ~200 test programs linking them statically, with the
  # sanitizers' instrumentation, made the tree 16 GB (a CI machine's disk ran out); shared, 1.7 GB.
  # Compiled by Clang (Debian's clang-16, its sanitizer runtimes in libclang-rt-16-dev): in
  # 12 min of CPU where GCC took 18 on a 2-core Xeon (GCC's coroutines are slow to compile), and
  # a second compiler's warnings over the code that GCC builds everywhere else.
  CC=clang-16 CXX=clang++-16 \
  BUILD_DIR=$build_dir-asan BUILD_TARGET=unit_tests dist/build.sh -DCORRAL_WERROR=ON -DCORRAL_SANITIZE=ON \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG=-g1 -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 -DBUILD_SHARED_LIBS=ON
}
sanitizer_tests() {
  ctest --test-dir "$build_dir-asan" --output-on-failure -j"$(nproc)" -L unit
}
skip_sanitizers() { [ "${CORRAL_SKIP_SANITIZERS:-0}" = 1 ]; }

if [ $# -gt 0 ]; then
  t=$(date +%s); main_build ON; stage_done build "$t"
  t=$(date +%s); ctest --test-dir "$build_dir" --output-on-failure -j"$(nproc)" "$@"; stage_done ctest "$t"
  if ! skip_sanitizers; then
    t=$(date +%s); sanitizer_build; stage_done sanitizer-build "$t"
    t=$(date +%s); sanitizer_tests; stage_done sanitizer-tests "$t"
  fi
  exit 0
fi

# While corral compiles, what waits on the network and the disk: the rest of the packages, then
# the package test's clean Debian tree (debootstrap) and the image tests' Debian image
# (mmdebstrap twice, then umoci, at a lower priority). The tree's and the image's own failures
# are their tests' to report (package_install; the image tests wait on the image's lock, or make
# it themselves): here they are only started early.
prepare_beside_build() {
  local rc=0
  dist/install-deps.sh rest > "$logs/install-deps-rest.log" 2>&1 || rc=$?
  echo "$rc" > "$logs/install-deps-rest.rc"
  [ "$rc" -eq 0 ] || return 0
  tests/package/guest-tree.sh base > "$logs/guest-tree.log" 2>&1 &
  local tree_pid=$!
  nice -n 10 tests/fixtures/make_image.sh debian-python-node > "$logs/debian-image.log" 2>&1 &
  local image_pid=$!
  wait "$tree_pid" || echo "== the guest tree was not made in advance (package_install says why): $(tail -1 "$logs/guest-tree.log")"
  wait "$image_pid" || echo "== the Debian image was not made in advance (the image tests say why): $(tail -1 "$logs/debian-image.log")"
}
rm -f "$logs/install-deps-rest.rc"
prepare_beside_build > "$logs/prepare.out" 2>&1 &
prepare_pid=$!

# The unit tests run once, in the sanitizer tree (Clang, ASan and UBSan): compiled in this tree
# too, they were a third of its compile (~460 s of CPU on a 2-core Xeon) for the same tests run
# twice. The root, e2e and guest tests below exercise this tree's build (GCC, -O2) as shipped.
# Without the sanitizer stage, this tree has them.
if skip_sanitizers; then unit_programs=ON; else unit_programs=OFF; fi
t=$(date +%s); main_build "$unit_programs"; stage_done build "$t"
t=$(date +%s); wait "$prepare_pid" || true; stage_done "prepared beside build (wait)" "$t"
cat "$logs/prepare.out"
if [ "$(cat "$logs/install-deps-rest.rc" 2>/dev/null)" != 0 ]; then
  tail -40 "$logs/install-deps-rest.log"
  echo "== failed: dist/install-deps.sh rest (its log: $logs/install-deps-rest.log)"
  exit 1
fi

# A job beside the host's tests: `beside NAME NICE CMD...` runs CMD in the background at that
# priority, its output in $logs/NAME.out, its status and end time in $logs/NAME.rc and .end.
beside() {
  local name=$1 nice=$2
  shift 2
  (
    renice -n "$nice" -p "$BASHPID" > /dev/null
    rc=0
    "$@" > "$logs/$name.out" 2>&1 || rc=$?
    echo "$rc" > "$logs/$name.rc"
    date +%s > "$logs/$name.end"
  ) &
}
# Waits for the job NAME that began at START, records its time, and returns its status.
joined() {
  local name=$1 start=$2
  wait "$3" || true
  stage_names+=("$name"); stage_secs+=($(( $(cat "$logs/$name.end") - start )))
  echo "== stage $name: ${stage_secs[-1]} s (beside the host's tests)"
  return "$(cat "$logs/$name.rc")"
}
background() {
  # The previous release first (e2e test_upgrade and package_install wait for it on its lock),
  # then, at the lowest priority, the sanitizer build.
  tests/upgrade/build-previous.sh "$src" || true
  renice -n 19 -p "$BASHPID" > /dev/null
  skip_sanitizers || sanitizer_build
}
rm -f "$logs"/*.rc "$logs"/*.end
t_bg=$(date +%s)
beside previous-and-sanitizer-build 10 background
bg_pid=$!
# The guests (label `guest`: their own kernel, so they share nothing with the host's tests).
t_guest=$(date +%s)
beside guest-tests 5 ctest --test-dir "$build_dir" --output-on-failure -L guest -O "$logs/ctest-guest.log"
guest_pid=$!

t=$(date +%s)
host_rc=0
ctest --test-dir "$build_dir" --output-on-failure -j"$(nproc)" -LE guest -O "$logs/ctest-host.log" || host_rc=$?
stage_done "host tests" "$t"

guest_rc=0
joined guest-tests "$t_guest" "$guest_pid" || guest_rc=$?
cat "$logs/guest-tests.out"
bg_rc=0
joined previous-and-sanitizer-build "$t_bg" "$bg_pid" || bg_rc=$?
if [ "$bg_rc" -ne 0 ]; then tail -60 "$logs/previous-and-sanitizer-build.out"; fi

if [ "$host_rc" -ne 0 ] || [ "$guest_rc" -ne 0 ] || [ "$bg_rc" -ne 0 ]; then
  echo "== failed: host tests rc $host_rc, guest tests rc $guest_rc, sanitizer build rc $bg_rc"
  exit 1
fi
if ! skip_sanitizers; then
  t=$(date +%s); sanitizer_tests; stage_done sanitizer-tests "$t"
fi
