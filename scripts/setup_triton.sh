#!/usr/bin/env bash
# Triton Inference Server beside vLLM. PyPI's `tritonserver` wheels are bindings without a server (cp312,
# glibc 2.39); the `nvidia-pytriton` wheel ships a real `tritonserver` binary, its Python backend and their
# libraries, so that is what we install (for the binary only: --no-deps).
#
# The Triton environment is a thin venv layered on the engine environment (a .pth adds the engine's
# site-packages after its own), so vLLM and every engine package are the very same files the bare vLLM
# baseline runs. It differs in one package: numpy<2, because the Python backend stub of Triton 2.51 crashes
# deserializing BYTES tensors under numpy 2. The Triton stack's baseline runs from this environment too.
# Python starts in the stub with the C locale whatever LANG says, so a .pth sets a UTF-8 one (vLLM and
# transformers read their files with the default encoding).
# The client environment gets `tritonclient[http]` (readiness and model metadata).
# The same environment serves a user's copy of NVIDIA's vLLM backend (TRITON_VLLM_MODEL): the copy must suit this
# vLLM (vllm_backend's main of January 2026 imports vllm.inputs.data and build_1_2_5_buckets from
# vllm.v1.metrics.loggers, which vLLM 0.32 keeps in vllm.inputs.llm and vllm.v1.metrics.buckets).
#
# Every package comes from a lock, each file checked against its hashes: locks/triton.txt (numpy and
# nvidia-pytriton, compiled and installed with --no-deps) into the Triton environment, locks/triton-client.txt
# (resolved within locks/client.txt's pins) into the client environment. Edit locks/triton.in or
# locks/triton-client.in and run `make lock` to change them.
#
# A layer's setup script (make setup-triton): ENGINE_VENV and CLIENT_VENV are the engine and client environments;
# TRITON_VENV may override where it installs; PYTRITON_VERSION and TRITONCLIENT_VERSION, when set, must be the
# locks' versions.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
tv=${TRITON_VENV:-.venv-triton}; ev=${ENGINE_VENV:-.venv-engine}; cv=${CLIENT_VENV:-.venv}
lock=$LOCKS_DIR/triton.txt; clock=$LOCKS_DIR/triton-client.txt
pytriton=$(lock_pin "$lock" nvidia-pytriton); tclient=$(lock_pin "$clock" tritonclient)
numpy=$(lock_pin "$lock" numpy)
# same_as_lock VAR PINNED LOCK: a version override that is not the lock's is refused, naming what to change
same_as_lock() {
  if [ -n "${!1:-}" ] && [ "${!1}" != "$2" ]; then
    echo "setup-triton: $1=${!1}, but locks/$3.txt pins $2: set it in locks/$3.in and run \`make lock\`" >&2
    exit 1
  fi
}
same_as_lock PYTRITON_VERSION "$pytriton" triton
same_as_lock TRITONCLIENT_VERSION "$tclient" triton-client

glibc=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
if [ "$(printf '%s\n' 2.35 "$glibc" | sort -V | head -1)" != 2.35 ]; then
  echo "setup-triton: nvidia-pytriton $pytriton needs glibc >= 2.35; this host has $glibc" >&2
  exit 1
fi
ver=$(pyver "$PY")
say "triton: $tv from $PY ($ver) layered on $ev, numpy==$numpy and nvidia-pytriton==$pytriton (tritonserver 2.51 and its Python backend stub for $ver) from locks/triton.txt, tritonclient[http]==$tclient in $cv from locks/triton-client.txt"
if dry; then
  run "$PY" -m venv "$tv"
  pip_locked "$tv/bin/python" "$lock" -q --no-deps
  pip_locked "$cv/bin/python" "$clock" -q
  exit 0
fi
[ -x "$ev/bin/python" ] || { echo "setup-triton: the engine environment $ev is missing: run make setup" >&2; exit 1; }
[ "$(pyver "$ev/bin/python")" = "$ver" ] || { echo "setup-triton: the engine environment $ev runs Python $(pyver "$ev/bin/python"), PY=$PY is $ver: the Triton environment layers on it, so use the same Python" >&2; exit 1; }

"$PY" -m venv "$tv"
site_of() { "$1/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }
engine_site=$(site_of "$ev")
triton_site=$(site_of "$tv")
echo "import site; site.addsitedir('$engine_site')" > "$triton_site/layerbench-engine.pth"
cat > "$triton_site/layerbench-utf8.pth" <<'PTH'
import locale; locale.setlocale(locale.LC_CTYPE, 'C.UTF-8') if locale.getpreferredencoding(False).lower() not in ('utf-8', 'utf8') else None
PTH
# pip sees the engine's numpy 2 through the .pth and leaves it alone ("outside environment")
pip_locked "$tv/bin/python" "$lock" -q --disable-pip-version-check --no-deps

# the backend directory tritonserver loads: the Python backend with the stub for this Python
tt="$triton_site/pytriton/tritonserver"
stub="$tt/python_backend_stubs/$ver/triton_python_backend_stub"
[ -x "$stub" ] || { echo "setup-triton: nvidia-pytriton $pytriton ships Python backend stubs for $(ls "$tt/python_backend_stubs" | tr '\n' ' ')but not for Python $ver: set PY= to one of those" >&2; exit 1; }
mkdir -p "$tv/backends/python"
ln -sf "$tt/backends/python/libtriton_python.so" "$tt/backends/python/triton_python_backend_utils.py" \
  "$stub" "$tv/backends/python/"

pip_locked "$cv/bin/python" "$clock" -q --disable-pip-version-check

"$tv/bin/python" -c "import numpy, vllm; print('numpy', numpy.__version__, 'vllm', vllm.__version__)"
# tritonserver has no --version: it logs its version in the table of options it prints at start, and exits at once,
# before it opens a port, when the model repository does not exist (the flags: `tritonserver --help` of the binary
# nvidia-pytriton 0.7.0 ships)
LD_LIBRARY_PATH="$triton_site/nvidia_pytriton.libs" "$tt/bin/tritonserver" --model-repository="$tv/no-model-repository" \
  --http-address=127.0.0.1 --allow-grpc=false --allow-metrics=false 2>&1 \
  | awk '$2 == "server_version" {print "tritonserver", $4; exit}' || true
