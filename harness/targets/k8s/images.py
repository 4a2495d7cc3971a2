"""The images the docker and k8s targets run, which vLLM each one carries and which CUDA that vLLM was built for:
a compare's baseline is bare vLLM of the very version its stack's image bundles, so the layer's cost is not mixed
with an engine upgrade, and a GPU whose driver cannot run an image's CUDA is refused before the image is pulled
(harness.targets.k8s.driver_check).

What is known before anything runs is in BUNDLED and IMAGE_CUDA (each fact with where it was read; the defaults
were checked on 2026-12-02); preflight measures every image anyway, with one short Job (or `docker run`) per image
that imports vLLM and prints its version, and refuses a set whose versions differ before any engine is started."""

from __future__ import annotations

import re

from harness.host.engine_build import VLLM_VERSION

VLLM_IMAGE = "vllm/vllm-openai"
# Checked 2026-12-02. Ray publishes ray-llm for Python 3.12 on CUDA 13.0 only ("ray-llm stays py3.12-only ...
# py3.12 / cu13.0.0-cudnn", ray-project/ray#64498; the cu13.0.0-cudnn images came with ray-project/ray#61497), and
# its image tags are <version>-py<3.12 without the dot>-<cu + CUDA's major and minor> (ci/ray_ci/docker_container.py
# in ray-project/ray: cu13.0.0 -> cu130). Ray 2.60.0 is on PyPI (2026-11); 2.58.0-py312-cu130 is in public use.
DEFAULT_RAY_IMAGE = "rayproject/ray-llm:2.60.0-py312-cu130"
# Checked 2026-12-02: listed in triton-inference-server/server docs/introduction/compatibility.md (vllm-python-py3
# table: 25.12, vLLM 0.11.1+9114fd76.nv25.12.cu131, CUDA 13.1.0.036) and NVIDIA's release notes
# (https://docs.nvidia.com/deeplearning/triton-inference-server/release-notes/rel-25-12.html).
DEFAULT_TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:25.12-vllm-python-py3"
# Checked 2026-12-02: kserve 0.21.0 is on PyPI (2026-09); a v* tag publishes kserve/huggingfaceserver:<tag>-gpu from
# python/huggingface_server.Dockerfile (kserve/kserve .github/workflows/huggingface-docker-publish.yml).
DEFAULT_KSERVE_HF_IMAGE = "kserve/huggingfaceserver:v0.21.0-gpu"
LOAD_IMAGE_PLACEHOLDER = "localhost/layerbench:unset"  # no public image: users build it from this checkout

# image -> (the vLLM inside it, where that was read)
BUNDLED = {
    DEFAULT_RAY_IMAGE: ("0.29.0", "Ray 2.60.0's `llm` extra pins vllm[audio]==0.29.0 (the ray 2.60.0 wheel's "
                                  "METADATA on PyPI)"),
    DEFAULT_KSERVE_HF_IMAGE: ("0.24.0", "KServe 0.21.0's `llm` extra pins vllm==0.24.0 (the kserve 0.21.0 wheel's "
                                        "METADATA on PyPI; python/huggingface_server.Dockerfile installs "
                                        "vllm==${VLLM_VERSION}, 0.24.0)"),
    DEFAULT_TRITON_IMAGE: ("0.11.1", "NVIDIA's build 0.11.1+9114fd76.nv25.12.cu131 (triton-inference-server/server "
                                     "docs/introduction/compatibility.md, vllm-python-py3 table)"),
}
# image -> (the CUDA its vLLM and torch were built for, where that was read); the driver floor follows from it
IMAGE_CUDA = {
    DEFAULT_RAY_IMAGE: ("13.0", "the tag's cu130: Ray's cu13.0.0-cudnn platform and its rayllm_py312_cu130 lock "
                                "(ray-project/ray#61497, #64498)"),
    DEFAULT_KSERVE_HF_IMAGE: ("13.0", "vllm==0.24.0 from PyPI, whose default wheel is CUDA 13.0 (vllm-project/vllm"
                                      "#47628); the image's own CUDA is 13.3 (python/huggingface_server.Dockerfile)"),
    DEFAULT_TRITON_IMAGE: ("13.1", "vLLM 0.11.1+...cu131 on CUDA 13.1.0.036 (triton-inference-server/server "
                                   "docs/introduction/compatibility.md)"),
}
# vllm/vllm-openai:v<version> is CUDA 13.0 from vLLM 0.20.0 on and v<version>-cu129 is CUDA 12.9 (vllm-project/vllm
# .buildkite/scripts/publish-release-images.sh: "CUDA (default: 13.0)"; vllm-project/vllm#42738: "After v0.20.0,
# default wheel/docker ... is cu130"); before 0.20.0 the default image was a CUDA 12 build (vllm-project/router#154:
# "The vLLM 0.20.0 release has switched to CUDA 13 for the default wheels").
VLLM_CUDA13_FROM = (0, 20, 0)
PROBE_MARKER = "LAYERBENCH_VLLM"  # the line a version probe prints: LAYERBENCH_VLLM <version>
VERSION_PROBE = ["python3", "-c", f"import vllm; print('{PROBE_MARKER}', vllm.__version__)"]
_PROBE_LINE = re.compile(rf"^{PROBE_MARKER} (\S+)\s*$", re.M)
_VLLM_TAG = re.compile(r"v?(\d+)\.(\d+)\.(\d+)(\S*)")


def vllm_image(version: str) -> str:
    return f"{VLLM_IMAGE}:v{release(version)}"


def release(version: str) -> str:
    """A version without its local part: NVIDIA's vLLM builds say 0.11.1+9114fd76.nv25.12.cu131 for release 0.11.1
    (PEP 440's `+local`), and the official image and the version checks go by the release."""
    return version.split("+", 1)[0]


def known_vllm(image: str) -> str | None:
    """The vLLM an image carries, where it is known before it runs: an official vLLM image's tag, or BUNDLED."""
    repo, _, tag = image.rpartition(":")
    if repo == VLLM_IMAGE and (m := re.fullmatch(r"v?(\d+\.\d+\.\d+\S*)", tag)):
        return m.group(1)
    return BUNDLED.get(image, (None, ""))[0]


def image_cuda(image: str) -> tuple[str, str] | None:
    """(the CUDA an engine image's vLLM was built for, where that was read), None where it is not known."""
    if image in IMAGE_CUDA:
        return IMAGE_CUDA[image]
    repo, _, tag = image.rpartition(":")
    if repo != VLLM_IMAGE or not (m := _VLLM_TAG.fullmatch(tag)):
        return None
    if "cu129" in m.group(4):
        return "12.9", f"the tag of {image} (-cu129: CUDA 12.9)"
    if tuple(int(x) for x in m.group(1, 2, 3)) >= VLLM_CUDA13_FROM:
        return "13.0", f"the tag of {image} (vLLM >= 0.20.0 images are CUDA 13.0)"
    return "12", f"the tag of {image} (vLLM < 0.20.0 images are CUDA 12 builds)"


def probe_version(log: str) -> str | None:
    """The version a probe printed, or None (the image has no vLLM, or the probe did not run)."""
    found = _PROBE_LINE.findall(log)
    return found[-1] if found else None


def default_engine_version() -> str:
    """The engine version bare vLLM runs when nothing else decides it: the local engine environment's."""
    return VLLM_VERSION
