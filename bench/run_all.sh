#!/usr/bin/env bash
# `make bench`: every benchmark in bench/, each printing its own figures.
# Benchmarks that need a database use BENCH_DATABASE_URL (PostgreSQL) and the real Redis.
set -euo pipefail
cd "$(dirname "$0")/.."
export BENCH_DATABASE_URL=${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/portal_bench}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/8}
PY=.venv/bin/python
for script in ${BENCH_SCRIPTS:-bench/placement.py bench/eta.py bench/formation.py bench/dra.py bench/emulator.py bench/pages.py bench/metrics.py bench/agent_load.py bench/fanout.py bench/soak.py}; do
  if [ -f "$script" ]; then
    echo "=== $script ==="
    "$PY" "$script" "$@"
    echo
  fi
done
