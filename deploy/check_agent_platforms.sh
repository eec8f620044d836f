#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Proves that the agent image's dependencies (deploy/agent_requirements.py: the agent's part
# of requirements/main.txt) install on the trays' platforms from the lock alone: every pin
# has a binary wheel for CPython 3.11 on linux aarch64 (Grace) and x86_64 whose hash is in
# the lock, and none of them is Django. Needs the package index (CI).
#
#   deploy/check_agent_platforms.sh [aarch64 x86_64]
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PY:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" deploy/agent_requirements.py requirements/main.txt > "$work/agent.txt"
if grep -qiE '^(django|celery|channels)[=-]' "$work/agent.txt"; then
  echo "the agent's dependencies hold a portal package:" >&2
  grep -iE '^(django|celery|channels)[=-]' "$work/agent.txt" >&2
  exit 1
fi
archs=("$@")
if [ ${#archs[@]} -eq 0 ]; then archs=(aarch64 x86_64); fi
for a in "${archs[@]}"; do
  "$py" -m pip download --quiet --require-hashes --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp \
    --platform "manylinux2014_$a" --platform "manylinux_2_17_$a" --platform "manylinux_2_28_$a" \
    -r "$work/agent.txt" -d "$work/$a"
  echo "linux/$a: $(ls "$work/$a" | wc -l) wheels for $(grep -c '==' "$work/agent.txt") pins"
done
