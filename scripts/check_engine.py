"""The engine environment's first real test on a GPU host: one token generated on the GPU with the tiny model
(scripts/make_model.py), so a broken CUDA build fails at setup, named, rather than an hour into a compare.
On a host without a GPU there is nothing to check here: the first compare starts the same engine on the CPU.

Runs in the engine environment. Usage: python scripts/check_engine.py MODEL_DIR"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

# What vLLM, PyTorch or CUDA say when the build does not fit the host, and what that means for the user.
CAUSES = (
    ("driver version is insufficient", "the NVIDIA driver is older than the CUDA this vLLM build was made for: "
     "rerun `make doctor`, upgrade the driver, or rebuild the engine environment for this driver"),
    ("no kernel image is available", "this GPU's compute capability is not in the build (vLLM needs 7.5 or newer)"),
    ("out of memory", "the GPU's memory is taken: another process holds it (nvidia-smi lists it)"),
    ("libcuda.so", "the driver's libcuda is not visible to this process (a container without GPU access?)"),
    ("no cuda gpus are available", "no GPU is visible: check CUDA_VISIBLE_DEVICES"),
    ("failed to infer device type", "vLLM found no usable accelerator: the CPU build is installed, or CUDA is not "
     "visible"),
    ("undefined symbol", "vLLM and PyTorch do not match: remove .venv-engine and .stamps/engine, then make setup"),
)


def cause(text: str) -> str:
    low = text.lower()
    return next((why for needle, why in CAUSES if needle in low), "see vLLM's message above")


def has_gpu() -> bool:
    exe = shutil.which("nvidia-smi")
    return bool(exe) and subprocess.run([exe, "-L"], capture_output=True, timeout=30).returncode == 0


def main() -> int:
    model = sys.argv[1]
    if not has_gpu():
        print("engine check: no NVIDIA GPU on this host; the first compare starts the engine on the CPU")
        return 0
    t0 = time.monotonic()
    try:
        from vllm.platforms import current_platform  # vllm/platforms/interface.py: Platform.device_type, is_cuda()

        if not current_platform.is_cuda():
            # the CPU build on a GPU host would "generate on the GPU" here on the CPU and pass
            print(f"engine check FAILED: this host has NVIDIA GPUs but the engine environment's vLLM runs on "
                  f"'{current_platform.device_type}': rm -rf .venv-engine .stamps/engine && make setup",
                  file=sys.stderr)
            return 1
        from vllm import LLM, SamplingParams

        llm = LLM(model=model, max_model_len=256, max_num_seqs=1, gpu_memory_utilization=0.2, enforce_eager=True)
        out = llm.generate(["engine check"], SamplingParams(max_tokens=1, ignore_eos=True))
        tokens = len(out[0].outputs[0].token_ids)
    except Exception as e:  # any failure is the check's answer: name the likely cause
        text = f"{type(e).__name__}: {e}"
        print(f"engine check FAILED on the GPU: {cause(text)}\n  vLLM said: {text.splitlines()[0][:300]}",
              file=sys.stderr)
        return 1
    if tokens != 1:
        print(f"engine check FAILED: asked for 1 token, got {tokens}", file=sys.stderr)
        return 1
    print(f"engine check: one token generated on the GPU (CUDA_VISIBLE_DEVICES="
          f"{os.environ.get('CUDA_VISIBLE_DEVICES', 'all')}) in {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
