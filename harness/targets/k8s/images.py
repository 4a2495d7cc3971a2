"""The images the docker and k8s targets run, which vLLM each one carries and which CUDA that vLLM was built for:
a compare's baseline is bare vLLM of the very version its stack's image bundles, so the layer's cost is not mixed
with an engine upgrade, and a GPU whose driver cannot run an image's CUDA is refused before the image is pulled
(harness.targets.k8s.driver_check).

What is known before anything runs is in BUNDLED and IMAGE_CUDA, read from baselines/versions/<stack>.yaml (each
fact with where it was read and when it was checked); preflight measures every image anyway, with one short Job
(or `docker run`) per image that imports vLLM and prints its version, and refuses a set whose versions differ
before any engine is started."""

from __future__ import annotations

import re

from harness.host.engine_build import VLLM_VERSION
from harness.schemas.baselines import stack_images

VLLM_IMAGE = "vllm/vllm-openai"
# The stacks' own engine images, each with the vLLM and CUDA it carries and where that was read: the `image` of
# baselines/versions/<stack>.yaml (harness.schemas.baselines), the one place these facts are kept.
_STACK_IMAGES = stack_images()
DEFAULT_RAY_IMAGE = _STACK_IMAGES["ray"].name
DEFAULT_TRITON_IMAGE = _STACK_IMAGES["triton"].name
DEFAULT_KSERVE_HF_IMAGE = _STACK_IMAGES["kserve"].name  # KServe's Hugging Face runtime (mode inprocess)
LOAD_IMAGE_PLACEHOLDER = "localhost/layerbench:unset"  # no public image: users build it from this checkout

# image -> (the vLLM inside it, where that was read)
BUNDLED = {i.name: (i.vllm, i.vllm_source) for i in _STACK_IMAGES.values()}
# image -> (the CUDA its vLLM and torch were built for, where that was read); the driver floor follows from it
IMAGE_CUDA = {i.name: (i.cuda, i.cuda_source) for i in _STACK_IMAGES.values()}
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
