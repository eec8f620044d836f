#!/usr/bin/env bash
# The dependency lock: requirements/dev.txt (everything `make install` puts in .venv) and
# requirements/main.txt (what the image needs), resolved by uv from pyproject.toml with a
# hash for every file, for Python 3.11 and up on any platform.
#
#   make lock          keep every pin that still satisfies pyproject.toml; add, drop or
#                      move only what pyproject.toml's changes require
#   make lock-upgrade  move every pin to the newest version pyproject.toml allows
#   make lock-check    fail when the lock files are not what `make lock` would write
#                      (CI runs it: pyproject.toml and the lock must agree)
set -euo pipefail
cd "$(dirname "$0")/.."
uv=$(realpath "${UV:-.venv/bin/uv}")
mode=${1:-}
repo=$PWD
if [ "$mode" = --check ]; then
  # Resolve again in a scratch copy (the same relative paths, so the same file comes out
  # when nothing changed); the committed pins are the preferences, as for `make lock`.
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  mkdir "$scratch/requirements"
  cp pyproject.toml "$scratch/"
  cp requirements/build.in requirements/dev.txt requirements/main.txt "$scratch/requirements/"
  cd "$scratch"
fi
out=requirements
compile=(pip compile --quiet --universal --python-version 3.11 --generate-hashes
  --custom-compile-command "make lock")
if [ "$mode" = --upgrade ]; then compile+=(--upgrade); fi
# dev holds everything; main is resolved within dev's pins, so the two never disagree.
"$uv" "${compile[@]}" pyproject.toml requirements/build.in --extra dev -o "$out/dev.txt"
"$uv" "${compile[@]}" pyproject.toml requirements/build.in -c "$out/dev.txt" -o "$out/main.txt"
if [ "$mode" = --check ]; then
  for lock in dev main; do
    if ! diff -u "$repo/requirements/$lock.txt" "requirements/$lock.txt"; then
      echo "requirements/$lock.txt does not match pyproject.toml: run 'make lock'" >&2
      exit 1
    fi
  done
  echo "requirements/*.txt match pyproject.toml"
fi
