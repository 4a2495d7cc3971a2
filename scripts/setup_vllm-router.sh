#!/usr/bin/env bash
# vLLM's router (vllm-router, a Rust load balancer in a manylinux wheel, run by a thin Python launcher) in an
# environment of its own, .venv-vllm-router: it needs none of the engine's packages. Every package comes from
# locks/vllm-router.txt (vllm-router 0.1.17, the newest release on the package index when it was locked), each file
# checked against the lock's hashes; edit locks/vllm-router.in and run `make lock` to change it.
# A layer's setup script (make setup-vllm-router): VLLM_ROUTER_VENV may override where.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
venv=${VLLM_ROUTER_VENV:-.venv-vllm-router}; lock=$LOCKS_DIR/vllm-router.txt
version=$(lock_pin "$lock" vllm-router)
if [ -n "${VLLM_ROUTER_VERSION:-}" ] && [ "$VLLM_ROUTER_VERSION" != "$version" ]; then
  echo "setup-vllm-router: VLLM_ROUTER_VERSION=$VLLM_ROUTER_VERSION, but locks/vllm-router.txt pins $version: set it in locks/vllm-router.in and run \`make lock\`" >&2
  exit 1
fi
say "vllm-router: $venv from $PY ($(pyver "$PY")) with vllm-router==$version (locks/vllm-router.txt)"
run "$PY" -m venv "$venv"
pip_locked "$venv/bin/python" "$lock" -q
if ! dry; then
  "$venv/bin/vllm-router" --help >/dev/null || { echo "setup-vllm-router: vllm-router does not start from $venv" >&2; exit 1; }
  say "vllm-router: $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("vllm-router"))') in $venv"
fi
