#!/usr/bin/env bash
# The client's virtual environment: layerbench itself (the load harness, reports, the k8s and docker targets)
# and its test tools. It never holds vLLM, Ray or Triton. Usage: setup_client.sh VENV
set -euo pipefail
source "$(dirname "$0")/lib.sh"
venv=$1
say "client: $venv from $PY ($(pyver "$PY")): layerbench and its dependencies (pyproject.toml), with the dev extra"
run "$PY" -m venv "$venv"
run "$venv/bin/pip" install -q --upgrade pip
run "$venv/bin/pip" install -q -e '.[dev]'
