#!/usr/bin/env bash
# `make demo`: migrate, seed, then run web, worker, notifier, beat and the emulated trays' node agents
# under one process manager (honcho). PostgreSQL and Redis are the ones DATABASE_URL and
# REDIS_URL name, or private ones (PostgreSQL's data kept in var/pg between runs) that
# testbed/devservices.py starts first and stops last. Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
mkdir -p var/log
if [ -z "${PORTAL_DEMO_SERVICES:-}" ]; then
  export PORTAL_DEMO_SERVICES=1
  exec "$VENV/bin/python" -m testbed.devservices --pg-data "$PWD/var/pg" -- bash "$0" "$@"
fi

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
# The emulated trays' management IPs are loopback addresses, which a real tray never has:
# allowed here even with DEBUG off (domains/inventory/identity.py).
export PORTAL_TRAY_ALLOWED_NETS=${PORTAL_TRAY_ALLOWED_NETS:-127.0.0.0/8}
export PORTAL_URL="http://127.0.0.1:${PORT}"

"$VENV/bin/python" manage.py migrate --no-input -v0
# With DEBUG off pages name their stylesheets by the hashed names collectstatic records.
case "$(echo "$DEBUG" | tr '[:upper:]' '[:lower:]' | xargs)" in
  1|true|yes|on) ;;
  *) "$VENV/bin/python" manage.py collectstatic --no-input -v0 ;;
esac
"$VENV/bin/python" manage.py seed_demo ${SEED_ARGS:-}
# One emulated node agent per seeded tray (each its own root under var/agents/ and loopback IP).
"$VENV/bin/python" -m testbed.fleetspec --out var/agents/fleet.json

# Whether the web server answers an HTTP request (whatever its status: it is up).
answers() {
  local line=""
  { exec 3<>"/dev/tcp/127.0.0.1/${PORT}"; } 2>/dev/null || return 1
  printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
  IFS= read -r -t 5 line <&3 || true
  exec 3<&-
  [[ $line == HTTP/* ]]
}

# honcho runs in the background so that the address is printed once the web server answers,
# not seconds before. Ctrl-C reaches honcho as well (one process group) and it stops
# everything; this script waits for that, so devservices stops PostgreSQL and Redis last.
"$VENV/bin/honcho" -f Procfile start &
honcho=$!
trap 'kill -TERM "$honcho" 2>/dev/null' TERM
trap ':' INT
for _ in $(seq 240); do  # two minutes at most; and not once honcho has given up
  if answers; then
    cat <<MSG

  Domain Portal demo → ${PORTAL_URL}/
  (logins above, password "demo"; API docs at ${PORTAL_URL}/api/v1/docs/)
  Logs also under var/log/. Ctrl-C stops everything.

MSG
    break
  fi
  kill -0 "$honcho" 2>/dev/null || break
  sleep 0.5
done
status=0
wait "$honcho" || status=$?
while kill -0 "$honcho" 2>/dev/null; do  # a trapped Ctrl-C ended the wait before honcho did
  wait "$honcho" || status=$?
done
exit "$status"
