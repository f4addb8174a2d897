#!/usr/bin/env bash
# bench/fleet.sh BUILD_DIR [SECONDS]: what one PostgreSQL sustains for a fleet's store calls
# (bench/fleet_store_bench.cc), with 1, 4 and 16 simulated nodes, beside SQLite's one node, on a
# PostgreSQL 15 of its own (tests/fixtures/postgres.py, durable: fsync on, on this machine's
# disk). Prints one JSON report per run and the CPU model; the figures go to docs/FLEET.md.
set -euo pipefail
build=${1:?usage: bench/fleet.sh BUILD_DIR [SECONDS]}
seconds=${2:-10}
here=$(cd "$(dirname "$0")" && pwd)
bench="$build/bench/fleet_store_bench"
[ -x "$bench" ] || { echo "fleet.sh: $bench is not built" >&2; exit 1; }
dir=$(mktemp -d /tmp/corral-bench-pg-XXXXXX)
rmdir "$dir"
python3 -c "
import sys; sys.path.insert(0, '$here/../tests/fixtures')
import postgres
pg = postgres.Postgres('$dir', fsync=True)
pg.start_detached()
" >/dev/null
trap 'python3 "$here/../tests/fixtures/postgres.py" stop "$dir" >/dev/null 2>&1 || true' EXIT
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cpus"
sqlite=$(mktemp -d /tmp/corral-bench-sqlite-XXXXXX)
"$bench" --sqlite "$sqlite/store.db" --seconds "$seconds"
rm -rf "$sqlite"
for nodes in 1 4 16; do
  db="fleet_$nodes"
  psql -X -q -h "$dir" -U corral -d postgres -c "CREATE DATABASE $db" >/dev/null
  "$bench" --url "postgresql://corral@/$db?host=$dir" --nodes "$nodes" --seconds "$seconds"
done
