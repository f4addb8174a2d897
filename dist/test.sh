#!/usr/bin/env bash
# Installs what corral needs, builds it with warnings as errors, and runs the whole test suite:
# unit, root (real namespaces and cgroups on this host), and the root suites again over cgroup
# v2 in a QEMU guest. Then the unit tests once more under AddressSanitizer and
# UndefinedBehaviorSanitizer. Exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
dist/install-deps.sh
build_dir=${BUILD_DIR:-build}
BUILD_DIR=$build_dir dist/build.sh -DCORRAL_WERROR=ON
ctest --test-dir "$build_dir" --output-on-failure -j"$(nproc)" "$@"

if [ "${CORRAL_SKIP_SANITIZERS:-0}" != 1 ]; then
  BUILD_DIR=$build_dir-asan dist/build.sh -DCORRAL_WERROR=ON -DCORRAL_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
  ctest --test-dir "$build_dir-asan" --output-on-failure -j"$(nproc)" -L unit
fi
