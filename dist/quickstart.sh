#!/usr/bin/env bash
# Installs what corral needs, builds it, and runs a first sandbox: a memory-capped Python that
# tries to take 4x its limit and is OOM-killed, reported from the kernel's own counters.
set -euo pipefail
cd "$(dirname "$0")/.."
dist/install-deps.sh
dist/build.sh
corral=build/tools/corral

echo
echo "+ corral run -- sh -c 'id; hostname; ls /'"
$corral run -- sh -c 'id; hostname; ls /'
echo
echo "+ corral run --memory 64M --outcome-json - -- python3 -c 'bytearray(256<<20)'"
set +e
$corral run --memory 64M --outcome-json - -- python3 -c 'bytearray(256<<20)'
echo "exit code: $?"
