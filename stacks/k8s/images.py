"""The images the docker and k8s targets run, and which vLLM each one carries: a compare's baseline is bare vLLM
of the very version its stack's image bundles, so the layer's cost is not mixed with an engine upgrade.

What is known before anything runs is in BUNDLED (each fact with where it was read); preflight measures every
image anyway, with one short Job (or `docker run`) per image that imports vLLM and prints its version, and
refuses a set whose versions differ before any engine is started."""

from __future__ import annotations

import re

from harness.engine_build import VLLM_VERSION

VLLM_IMAGE = "vllm/vllm-openai"
DEFAULT_RAY_IMAGE = "rayproject/ray-llm:2.60.0-py311-cu128"
DEFAULT_TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:25.12-vllm-python-py3"
DEFAULT_KSERVE_HF_IMAGE = "kserve/huggingfaceserver:v0.21.0-gpu"
LOAD_IMAGE_PLACEHOLDER = "localhost/layerbench:unset"  # no public image: users build it from this checkout

# image -> (the vLLM inside it, where that was read)
BUNDLED = {
    DEFAULT_RAY_IMAGE: ("0.29.0", "Ray 2.60.0's `llm` extra pins vllm==0.29.0 (ray's package metadata)"),
    DEFAULT_KSERVE_HF_IMAGE: ("0.24.0", "KServe 0.21.0's `llm` extra pins vllm==0.24.0 (kserve's package metadata)"),
}
PROBE_MARKER = "LAYERBENCH_VLLM"  # the line a version probe prints: LAYERBENCH_VLLM <version>
VERSION_PROBE = ["python3", "-c", f"import vllm; print('{PROBE_MARKER}', vllm.__version__)"]
_PROBE_LINE = re.compile(rf"^{PROBE_MARKER} (\S+)\s*$", re.M)


def vllm_image(version: str) -> str:
    return f"{VLLM_IMAGE}:v{version}"


def known_vllm(image: str) -> str | None:
    """The vLLM an image carries, where it is known before it runs: an official vLLM image's tag, or BUNDLED."""
    repo, _, tag = image.rpartition(":")
    if repo == VLLM_IMAGE and (m := re.fullmatch(r"v?(\d+\.\d+\.\d+\S*)", tag)):
        return m.group(1)
    return BUNDLED.get(image, (None, ""))[0]


def probe_version(log: str) -> str | None:
    """The version a probe printed, or None (the image has no vLLM, or the probe did not run)."""
    found = _PROBE_LINE.findall(log)
    return found[-1] if found else None


def default_engine_version() -> str:
    """The engine version bare vLLM runs when nothing else decides it: the local engine environment's."""
    return VLLM_VERSION
