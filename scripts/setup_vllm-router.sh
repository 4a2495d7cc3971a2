#!/usr/bin/env bash
# vLLM's router (vllm-router, a Rust load balancer in a manylinux wheel, run by a thin Python launcher) in an
# environment of its own, .venv-vllm-router: it needs none of the engine's packages. vllm-router 0.1.17: the
# newest release on the package index.
# A layer's setup script (make setup-vllm-router): VLLM_ROUTER_VENV and VLLM_ROUTER_VERSION may override them.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
venv=${VLLM_ROUTER_VENV:-.venv-vllm-router}; version=${VLLM_ROUTER_VERSION:-0.1.17}
say "vllm-router: $venv from $PY ($(pyver "$PY")) with vllm-router==$version"
run "$PY" -m venv "$venv"
run "$venv/bin/pip" install -q --upgrade pip
run "$venv/bin/pip" install -q "vllm-router==$version"
if ! dry; then
  "$venv/bin/vllm-router" --help >/dev/null || { echo "setup-vllm-router: vllm-router does not start from $venv" >&2; exit 1; }
  say "vllm-router: $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-router"))') in $venv"
fi
