#!/usr/bin/env bash
# Installs what corral needs, builds it with warnings as errors, and runs the whole test suite:
# unit, root (real namespaces and cgroups on this host), and the root suites again over cgroup
# v2 in a QEMU guest. Exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
dist/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build} dist/build.sh -DCORRAL_WERROR=ON
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j"$(nproc)" "$@"
