#!/usr/bin/env bash
# LiteLLM's proxy in an environment of its own, .venv-litellm: it only proxies HTTP, so it needs none of the
# engine's packages, and its pins (fastapi, openai, pydantic, uvicorn) are not the engine environment's to
# change. Every package comes from locks/litellm.txt, each file checked against the lock's hashes: litellm[proxy]
# 1.108.7, the newest release whose companion packages (litellm-enterprise, litellm-proxy-extras) the package
# index has, and not one of the two malicious releases published with a stolen token in March 2026, 1.82.7 and
# 1.82.8 (PYSEC-2026-2, github.com/pypa/advisory-database vulns/litellm/PYSEC-2026-2.yaml; BerriAI/litellm#24518).
# prometheus-client is not in the [proxy] extra but its /metrics needs it. Edit locks/litellm.in and run
# `make lock` to change them.
# A layer's setup script (make setup-litellm): LITELLM_VENV may override where.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
venv=${LITELLM_VENV:-.venv-litellm}; lock=$LOCKS_DIR/litellm.txt
version=$(lock_pin "$lock" litellm)
if [ -n "${LITELLM_VERSION:-}" ] && [ "$LITELLM_VERSION" != "$version" ]; then
  echo "setup-litellm: LITELLM_VERSION=$LITELLM_VERSION, but locks/litellm.txt pins $version: set it in locks/litellm.in and run \`make lock\`" >&2
  exit 1
fi
say "litellm: $venv from $PY ($(pyver "$PY")) with litellm[proxy]==$version and prometheus-client (locks/litellm.txt)"
run "$PY" -m venv "$venv"
pip_locked "$venv/bin/python" "$lock" -q
if ! dry; then
  "$venv/bin/litellm" --version >/dev/null 2>&1 || "$venv/bin/python" -c "import litellm" \
    || { echo "setup-litellm: litellm does not start from $venv" >&2; exit 1; }
  say "litellm: $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("litellm"))') in $venv"
fi
