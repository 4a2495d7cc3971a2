"""Whether a GPU's NVIDIA driver can run an engine image's CUDA, asked before the image is pulled (an engine image
is 10-20 GB, and a driver too old for it fails only at the engine's first CUDA call): on the k8s target from the
labels GPU feature discovery puts on each GPU node, on the docker target from this host's driver
(harness.host.gpus.host_gpus) and again in commands.sh on the host that runs it.

The driver an image needs follows from its CUDA's major version (CUDA minor-version compatibility: a build for any
13.x runs on a >= 580 driver, any 12.x on >= 525). Data-center GPUs can run newer CUDA on older drivers through
the CUDA forward-compatibility package, which NVIDIA's images carry; `check_driver: false` in the cluster config
skips this check for such nodes."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from harness.errors import LayerbenchError
from harness.host.driver import branch as driver_branch
from harness.host.engine_build import DRIVER_FLOOR
from harness.targets.k8s.images import image_cuda

# where the floors (harness.host.engine_build.DRIVER_FLOOR, shared with setup's build choice) come from, for messages
FLOOR_SOURCE = "CUDA minor-version compatibility, docs.nvidia.com/deploy/cuda-compatibility"
# GPU feature discovery's driver labels (NVIDIA/k8s-device-plugin internal/lm/nvml.go): the current names, then the
# deprecated ones that older GFD releases set (nvidia.com/cuda.driver.major, .minor, .rev)
DRIVER_LABELS = ("nvidia.com/cuda.driver-version.full",
                 ("nvidia.com/cuda.driver-version.major", "nvidia.com/cuda.driver-version.minor",
                  "nvidia.com/cuda.driver-version.revision"),
                 ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev"))
# GFD runs with the NVIDIA GPU Operator (its `gfd` component) or the device plugin's Helm chart (gfd.enabled=true,
# NVIDIA/k8s-device-plugin deployments/helm/nvidia-device-plugin/values.yaml)
GET_LABELS = ("deploy GPU feature discovery, which labels each GPU node with its driver (the NVIDIA GPU Operator "
              "runs it; with the device plugin's Helm chart set gfd.enabled=true)")
SKIP = "or set check_driver: false in the cluster config (a data-center GPU with CUDA forward compatibility)"


def needed_driver(cuda: str) -> int | None:
    """The oldest driver branch that runs a CUDA version ("13.0" -> 580), None for a CUDA not in the table."""
    m = re.match(r"(\d+)", cuda)
    return DRIVER_FLOOR.get(int(m.group(1))) if m else None


def node_driver(labels: dict[str, str]) -> str | None:
    """A node's driver version from its GFD labels, None when GFD has not labelled it."""
    full, *split = DRIVER_LABELS
    if labels.get(full):
        return labels[full]
    for names in split:
        parts = [labels.get(n, "") for n in names]
        if parts[0]:
            return ".".join(p for p in parts if p)
    return None


def too_old(where: str, driver: str, images: Iterable[str]) -> list[str]:
    """One sentence per image whose CUDA `driver` cannot run; images whose CUDA is not known are not judged."""
    branch = driver_branch(driver)
    out = []
    for image in dict.fromkeys(images):
        known = image_cuda(image)
        need = needed_driver(known[0]) if known else None
        if known and need and branch is not None and branch < need:
            out.append(f"{where} has NVIDIA driver {driver}; {image} is built for CUDA {known[0]}, which needs "
                       f"driver >= {need}")
    return out


def check_nodes(nodes: list[dict[str, Any]], images: list[str], warnings: list[str]) -> None:
    """`nodes`: the GPU nodes an engine pod may be scheduled on. Refused when none of them can run every engine
    image; a warning names the ones that cannot (a pod placed there fails at startup) and the ones GFD has not
    labelled (not checked)."""
    if not nodes or not images:
        return
    drivers = {n["metadata"]["name"]: node_driver((n.get("metadata") or {}).get("labels") or {}) for n in nodes}
    unlabelled = sorted(name for name, d in drivers.items() if d is None)
    if len(unlabelled) == len(drivers):
        warnings.append(f"the GPU nodes ({', '.join(unlabelled[:8])}) carry no driver labels, so their drivers "
                        f"were not checked against the engine images' CUDA before pulling them: {GET_LABELS}")
        return
    refused = {name: too_old(f"node {name}", d, images) for name, d in drivers.items() if d is not None}
    bad = {name: why for name, why in refused.items() if why}
    if bad and len(bad) == len(refused) and not unlabelled:
        raise LayerbenchError("no GPU node's driver can run the engine images: " + "; ".join(
            w for why in bad.values() for w in why) + f" ({FLOOR_SOURCE}). Upgrade the nodes' NVIDIA driver, choose "
            f"images built for an older CUDA in the cluster config, {SKIP}")
    if bad:
        warnings.append("; ".join(w for why in bad.values() for w in why) + ": an engine pod scheduled there fails "
                        "at startup (a nodeSelector on nvidia.com/cuda.driver-version.major keeps it off)")
    if unlabelled:
        warnings.append(f"nodes {', '.join(unlabelled[:8])} carry no driver labels and were not checked: {GET_LABELS}")


def check_host(host: Any, images: list[str]) -> None:
    """The docker target on this host: refused when its driver cannot run an engine image (host: a
    harness.host.gpus.GpuHost, or None on a host without GPUs, where commands.sh checks on the GPU host instead)."""
    if host is None or not getattr(host, "driver", None):
        return
    why = too_old("this host", host.driver, images)
    if why:
        raise LayerbenchError("; ".join(why) + f" ({FLOOR_SOURCE}). Upgrade the host's NVIDIA driver, choose images "
                              f"built for an older CUDA in the cluster config, {SKIP}")


def script_check(images: list[str]) -> list[str]:
    """commands.sh's driver check, before any image is pulled: the first GPU's driver branch (nvidia-smi's
    driver_version, the query harness.host.gpus makes) against each engine image's floor; CHECK_DRIVER=0 skips it. A
    host where nvidia-smi does not answer is told so and goes on (the engines' own start says the rest)."""
    floors = {image: (known[0], need) for image in dict.fromkeys(images)
              if (known := image_cuda(image)) and (need := needed_driver(known[0]))}
    if not floors:
        return []
    out = ["", "# --- the NVIDIA driver against each engine image's CUDA, before anything is pulled ---",
           'DRIVER="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1 || true)"',
           'BRANCH="${DRIVER%%.*}"; if [ "${CHECK_DRIVER:-1}" = 0 ]; then DRIVER=skipped; BRANCH=skipped; fi',
           'case "$BRANCH" in skipped) BRANCH="";; ""|*[!0-9]*) BRANCH=""; echo "warning: nvidia-smi did not name" \\',
           '  "the driver (${DRIVER:-no answer}): it was not checked against the images\' CUDA" >&2;; esac']
    for image, (cuda, need) in floors.items():
        out.append(f'if [ -n "$BRANCH" ] && [ "$BRANCH" -lt {need} ]; then echo "this host has NVIDIA driver $DRIVER; '
                   f'{image} is built for CUDA {cuda}, which needs driver >= {need} ({FLOOR_SOURCE}); '
                   'CHECK_DRIVER=0 skips this check" >&2; exit 4; fi')
    return out
