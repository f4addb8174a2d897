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
  # Only what the unit label runs (no root tests, benchmarks, fixtures or web page), with line
  # tables but no variable info (-g1): the sanitizers' reports still name functions and lines.
  BUILD_DIR=$build_dir-asan BUILD_TARGET=unit_tests dist/build.sh -DCORRAL_WERROR=ON -DCORRAL_SANITIZE=ON \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG=-g1 -DCMAKE_CXX_FLAGS_DEBUG=-g1
  ctest --test-dir "$build_dir-asan" --output-on-failure -j"$(nproc)" -L unit
fi
