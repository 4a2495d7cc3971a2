#!/usr/bin/env bash
# The client's virtual environment: layerbench itself (the load harness, reports, the k8s and docker targets)
# and its test tools. It never holds vLLM, Ray or Triton. Usage: setup_client.sh VENV
# Every package comes from locks/client.txt (pyproject.toml's dependencies and dev extra, pip and setuptools), each
# file checked against the lock's hashes; layerbench itself is then installed from this checkout with no
# dependencies and no build isolation, so its build uses the lock's setuptools. `make lock` writes the lock again.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
venv=$1; lock=$LOCKS_DIR/client.txt; root=$(cd "$(dirname "$0")/.." && pwd)
say "client: $venv from $PY ($(pyver "$PY")): locks/client.txt (layerbench's dependencies with the dev extra), then layerbench"
run "$PY" -m venv "$venv"
pip_locked "$venv/bin/python" "$lock" -q
run "$venv/bin/pip" install -q --no-deps --no-build-isolation -e "$root"
# a dependency pyproject.toml names but the lock lacks: the lock is older than pyproject.toml
if ! dry && ! out=$("$venv/bin/pip" check 2>&1); then
  printf '%s\n' "$out" >&2
  echo "setup: locks/client.txt lacks what pyproject.toml requires: run \`make lock\`" >&2
  exit 1
fi
