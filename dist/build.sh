#!/usr/bin/env bash
# Configures and builds corral into ./build (or $BUILD_DIR). Extra arguments go to cmake.
# BUILD_TARGET names one target to build instead of all (dist/test.sh: unit_tests).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build_dir" -j"$(nproc)" ${BUILD_TARGET:+--target "$BUILD_TARGET"}
