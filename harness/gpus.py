"""The host's NVIDIA GPUs as `nvidia-smi` reports them, and which of them a deployment may use.

Standard library only: `make doctor` and `make setup DRY_RUN=1` run this module with the system Python before
any environment exists. nvidia-smi is the source (not NVML) because it is what a user checks by hand and what
every driver install ships; the telemetry sampler reads NVML (harness/load/gpu_telemetry.py).

Device indices are nvidia-smi's, which follow the PCI bus. CUDA numbers devices fastest-first unless
CUDA_DEVICE_ORDER=PCI_BUS_ID, so every deployment gets that setting with its CUDA_VISIBLE_DEVICES: the index a
user names in `GPUS=` is the device the engine opens."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field

from harness.errors import LayerbenchError

QUERY = "index,name,uuid,memory.total,driver_version"
_CUDA_RE = re.compile(r"CUDA Version:\s*([0-9]+\.[0-9]+)")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str
    memory_mib: int


@dataclass(frozen=True)
class GpuHost:
    """What the driver reports: every GPU it sees (nvidia-smi ignores CUDA_VISIBLE_DEVICES), the driver and the
    highest CUDA version that driver runs, and CUDA_VISIBLE_DEVICES as this process inherited it."""

    gpus: tuple[Gpu, ...]
    driver: str
    cuda: str | None
    cuda_visible_devices: str | None = None
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict:
        d = asdict(self)
        d["gpus"] = [asdict(g) for g in self.gpus]
        d["count"] = len(self.gpus)
        d["model"] = ", ".join(sorted({g.name for g in self.gpus}))
        d["notes"] = list(self.notes)
        return d

    def visible(self) -> list[int]:
        """Indices CUDA would show this process: CUDA_VISIBLE_DEVICES (indices or UUIDs) when set, else all."""
        if self.cuda_visible_devices is None:
            return [g.index for g in self.gpus]
        out = []
        for part in (p.strip() for p in self.cuda_visible_devices.split(",")):
            if not part:
                continue
            match = [g.index for g in self.gpus if part == str(g.index) or (part.startswith("GPU-")
                                                                             and g.uuid.startswith(part))]
            if not match:  # CUDA stops at the first entry it cannot match
                break
            out += match
        return out

    def by_index(self, index: int) -> Gpu | None:
        return next((g for g in self.gpus if g.index == index), None)


def parse_query(text: str) -> list[Gpu]:
    """`nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        try:
            memory = int(float(parts[3]))
        except ValueError:
            memory = 0  # "[N/A]" on some virtual GPUs
        gpus.append(Gpu(index=int(parts[0]), name=parts[1], uuid=parts[2], memory_mib=memory))
    return gpus


def parse_cuda_version(table: str) -> str | None:
    """The "CUDA Version: 12.8" of nvidia-smi's plain table: the highest CUDA the driver runs."""
    m = _CUDA_RE.search(table)
    return m.group(1) if m else None


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None


def probe(timeout: float = 15.0) -> tuple[GpuHost | None, str]:
    """(the host's GPUs, how they were found) or (None, why there are none usable). Never raises."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "nvidia-smi is not on PATH: no NVIDIA driver on this host"
    out = _run([exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"], timeout)
    if out is None or out.returncode != 0:
        why = (out.stderr or out.stdout).strip().splitlines()[:1] if out else ["did not answer"]
        return None, f"nvidia-smi failed: {why[0] if why else 'exit ' + str(out.returncode if out else '?')}"
    gpus = parse_query(out.stdout)
    if not gpus:
        return None, "nvidia-smi lists no GPU"
    driver = out.stdout.splitlines()[0].split(",")[-1].strip()
    table = _run([exe], timeout)
    cuda = parse_cuda_version(table.stdout) if table and table.returncode == 0 else None
    notes = () if cuda else ("nvidia-smi's table names no CUDA version",)
    host = GpuHost(gpus=tuple(gpus), driver=driver, cuda=cuda,
                   cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"), notes=notes)
    return host, f"nvidia-smi: {len(gpus)} GPU(s)"


_cached: tuple[GpuHost | None, str] | None = None


def host_gpus() -> GpuHost | None:
    """This host's GPUs, asked once per process (a deployment's settings and its report must agree)."""
    global _cached
    if _cached is None:
        _cached = probe()
    return _cached[0]


def no_gpu_reason() -> str:
    host_gpus()
    return _cached[1] if _cached else ""


def reset_cache() -> None:
    """Forget the answer (tests put a fake nvidia-smi on PATH)."""
    global _cached
    _cached = None


def devices_for(host: GpuHost | None, gpus: list[int] | None, tensor_parallel_size: int) -> list[int]:
    """The GPU indices one deployment may use: `gpus` as named (GPUS= or the profile's engine.gpus), else the
    first `tensor_parallel_size` visible ones; [] on a host without GPUs. LayerbenchError naming what to change
    when the request cannot be met."""
    if host is None:
        if gpus:
            raise LayerbenchError(f"GPUS={','.join(map(str, gpus))} names GPUs, but this host has none "
                                  f"({no_gpu_reason() or 'nvidia-smi lists none'}): remove GPUS / engine.gpus")
        if tensor_parallel_size > 1:
            raise LayerbenchError(f"engine.tensor_parallel_size {tensor_parallel_size} needs that many GPUs, and "
                                  "this host has none: set tensor_parallel_size 1")
        return []
    known = [g.index for g in host.gpus]
    if gpus:
        unknown = [g for g in gpus if g not in known]
        if unknown:
            raise LayerbenchError(f"GPUS names GPU {', '.join(map(str, unknown))}, which does not exist: this host "
                                  f"has GPUs {span(known)} (nvidia-smi -L)")
        if len(set(gpus)) != len(gpus):
            raise LayerbenchError(f"GPUS={','.join(map(str, gpus))} names a GPU twice")
        if len(gpus) != tensor_parallel_size:
            raise LayerbenchError(f"GPUS names {len(gpus)} GPU(s) ({','.join(map(str, gpus))}) but "
                                  f"engine.tensor_parallel_size is {tensor_parallel_size}: name "
                                  f"{tensor_parallel_size}, or set tensor_parallel_size {len(gpus)}")
        return list(gpus)
    visible = host.visible()
    if tensor_parallel_size > len(visible):
        where = (f"CUDA_VISIBLE_DEVICES={host.cuda_visible_devices} leaves {len(visible)}"
                 if host.cuda_visible_devices is not None else f"this host has {len(visible)}")
        raise LayerbenchError(f"engine.tensor_parallel_size {tensor_parallel_size} is more GPUs than are visible "
                              f"({where}): lower tensor_parallel_size or free more GPUs")
    return visible[:tensor_parallel_size]


def device_env(devices: list[int]) -> dict[str, str]:
    """What a deployment's processes get: the devices it may use, numbered as nvidia-smi numbers them."""
    if not devices:
        return {}
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def span(indices: list[int]) -> str:
    if indices and indices == list(range(indices[0], indices[-1] + 1)) and len(indices) > 2:
        return f"{indices[0]}-{indices[-1]}"
    return ", ".join(map(str, indices))
