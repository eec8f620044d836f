#!/usr/bin/env bash
# `make demo`: migrate, seed, make sure Redis answers, then run web, worker, beat and the
# emulated trays' node agents under one process manager (honcho). Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
mkdir -p var/log

export DEBUG=${DEBUG:-1}
export PORTAL_VAR_DIR="$PWD/var"
export PORT=${PORT:-8000}
# The well-known demo join token works only with DEBUG on (like the demo logins); with DEBUG
# off and no token given, the demo's agents get a fresh random one.
if [ -z "${PORTAL_AGENT_JOIN_TOKEN:-}" ]; then
  case "$(echo "$DEBUG" | tr '[:upper:]' '[:lower:]' | xargs)" in
    1|true|yes|on) PORTAL_AGENT_JOIN_TOKEN=dpj_demo-join-token ;;
    *) PORTAL_AGENT_JOIN_TOKEN="dpj_$("$VENV/bin/python" -c 'import secrets; print(secrets.token_urlsafe(24))')" ;;
  esac
fi
export PORTAL_AGENT_JOIN_TOKEN
export PORTAL_URL="http://127.0.0.1:${PORT}"

# --- Redis: use the one on REDIS_URL if it answers, otherwise run a private one -----------
redis_ping() { "$VENV/bin/python" - "$1" <<'PY'
import sys, redis
try:
    redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1).ping()
except Exception:
    sys.exit(1)
PY
}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
if ! redis_ping "$REDIS_URL"; then
  if ! command -v redis-server >/dev/null; then
    echo "Installing Debian's redis-server…"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server
  fi
  export REDIS_URL=redis://127.0.0.1:6390/0
  if ! redis_ping "$REDIS_URL"; then
    redis-server --daemonize yes --bind 127.0.0.1 --port 6390 --save "" --appendonly no \
      --dir "$PWD/var" --logfile "$PWD/var/log/redis.log" --pidfile "$PWD/var/redis.pid"
    for _ in $(seq 50); do redis_ping "$REDIS_URL" && break; sleep 0.1; done
    # The private Redis is the demo's own: Ctrl-C stops it with everything else.
    trap 'kill "$(cat "$PWD/var/redis.pid" 2>/dev/null)" 2>/dev/null || true' EXIT
  fi
  echo "Using private Redis at $REDIS_URL"
fi

"$VENV/bin/python" manage.py migrate --no-input -v0
"$VENV/bin/python" manage.py seed_demo ${SEED_ARGS:-}
# One emulated node agent per seeded tray (each its own root under var/agents/ and loopback IP).
"$VENV/bin/python" manage.py agent_fleet_spec --out var/agents/fleet.json

cat <<MSG

  Domain Portal demo → ${PORTAL_URL}/
  (logins above, password "demo"; API docs at ${PORTAL_URL}/api/v1/docs/)
  Logs also under var/log/. Ctrl-C stops everything.

MSG
"$VENV/bin/honcho" -f Procfile start  # not exec: the EXIT trap must run afterwards
