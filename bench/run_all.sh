#!/usr/bin/env bash
# `make bench`: every benchmark in bench/, each printing its own figures.
# Benchmarks that need a database use BENCH_DATABASE_URL (recreated per benchmark), else a
# `portal_bench` database on DATABASE_URL's server, and REDIS_URL; `make bench` starts
# private servers for both when none is named.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DATABASE_URL:?run it through make bench, or set DATABASE_URL}"
export BENCH_DATABASE_URL=${BENCH_DATABASE_URL:-${DATABASE_URL%/*}/portal_bench}
export REDIS_URL=${REDIS_URL:?}
PY=.venv/bin/python
for script in ${BENCH_SCRIPTS:-bench/placement.py bench/eta.py bench/formation.py bench/dra.py bench/failover.py bench/emulator.py bench/pages.py bench/metrics.py bench/agent_load.py bench/fanout.py bench/soak.py}; do
  if [ -f "$script" ]; then
    echo "=== $script ==="
    "$PY" "$script" "$@"
    echo
  fi
done
