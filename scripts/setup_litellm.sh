#!/usr/bin/env bash
# LiteLLM's proxy in an environment of its own, .venv-litellm: it only proxies HTTP, so it needs none of the
# engine's packages, and its pins (fastapi, openai, pydantic, uvicorn) are not the engine environment's to
# change. litellm[proxy] 1.108.7: the newest release whose companion packages (litellm-proxy-extras,
# litellm-enterprise) the package index has complete; 1.107.0 was a compromised release and is yanked.
# prometheus-client is not in the [proxy] extra but its /metrics needs it.
# A layer's setup script (make setup-litellm): LITELLM_VENV and LITELLM_VERSION may override where and what.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
venv=${LITELLM_VENV:-.venv-litellm}; version=${LITELLM_VERSION:-1.108.7}
say "litellm: $venv from $PY ($(pyver "$PY")) with litellm[proxy]==$version and prometheus-client"
run "$PY" -m venv "$venv"
run "$venv/bin/pip" install -q --upgrade pip
run "$venv/bin/pip" install -q "litellm[proxy]==$version" prometheus-client
if ! dry; then
  "$venv/bin/litellm" --version >/dev/null 2>&1 || "$venv/bin/python" -c "import litellm" \
    || { echo "setup-litellm: litellm does not start from $venv" >&2; exit 1; }
  say "litellm: $("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("litellm"))') in $venv"
fi
