"""The host's NVIDIA GPUs as `nvidia-smi` lists them, the driver and CUDA version as the driver reports them
(NVML, then /proc, then nvidia-smi's banner: harness/host/driver.py), and which GPUs a deployment may use.

Standard library only: `make doctor` and `make setup DRY_RUN=1` run this module with the system Python before
any environment exists. The GPU list comes from nvidia-smi's query, which every driver install ships, without
its `driver_version` field (deprecated from driver 610, whose banner renamed it "KMD Version"); the telemetry
sampler reads NVML (harness/load/gpu_telemetry.py).

A host with an NVIDIA driver whose GPUs or CUDA version cannot be read is never taken for a CPU host: it gets a
GpuHost whose `problem` names what was tried, and setup, the plan and doctor stop on it.

Device indices are nvidia-smi's, which follow the PCI bus. CUDA numbers devices fastest-first unless
CUDA_DEVICE_ORDER=PCI_BUS_ID, so every deployment gets that setting with its CUDA_VISIBLE_DEVICES: the index a
user names in `GPUS=` is the device the engine opens."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field

from harness.errors import LayerbenchError
from harness.host.driver import parse_banner
from harness.host.driver import read as read_driver

# mig.mode.current: "Enabled", "Disabled", or "[N/A]" on GPUs without MIG (recorded in Syllo/nvtop#470 and
# kubernetes-sigs/dra-driver-nvidia-gpu#852); a driver that does not know the field gets the query without it
QUERY = "index,name,uuid,memory.total,mig.mode.current"


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str
    memory_mib: int
    mig: str = ""  # nvidia-smi's mig.mode.current: Enabled | Disabled | [N/A] | "" (not asked)

    @property
    def mig_enabled(self) -> bool:
        return self.mig.strip().lower() == "enabled"


@dataclass(frozen=True)
class GpuHost:
    """What the driver reports: every GPU it sees (nvidia-smi ignores CUDA_VISIBLE_DEVICES), the driver and the
    highest CUDA version that driver runs, and CUDA_VISIBLE_DEVICES as this process inherited it."""

    gpus: tuple[Gpu, ...]
    driver: str
    cuda: str | None
    cuda_visible_devices: str | None = None
    notes: tuple[str, ...] = field(default=())
    driver_source: str = ""  # NVML | /proc/driver/nvidia/version | nvidia-smi
    cuda_source: str = ""
    problem: str | None = None  # the driver is there but its GPUs or CUDA version could not be read: why

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
    """`nvidia-smi --query-gpu=index,name,uuid,memory.total[,mig.mode.current] --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        try:
            memory = int(float(parts[3]))
        except ValueError:
            memory = 0  # "[N/A]" on some virtual GPUs
        gpus.append(Gpu(index=int(parts[0]), name=parts[1], uuid=parts[2], memory_mib=memory,
                        mig=parts[4] if len(parts) > 4 else ""))
    return gpus


def parse_cuda_version(table: str) -> str | None:
    """The CUDA version of nvidia-smi's plain table, "CUDA Version: 12.8" or, from driver 610, "CUDA UMD Version:
    13.3": the highest CUDA the driver runs."""
    return parse_banner(table)[1]


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None


def _first_line(out: subprocess.CompletedProcess | None) -> str:
    if out is None:
        return "did not answer"
    return ((out.stderr or out.stdout).strip().splitlines() or [f"exit {out.returncode}"])[0]


def list_gpus(exe: str, timeout: float) -> tuple[list[Gpu], str | None]:
    """(GPUs, None) or ([], nvidia-smi's complaint). Asks for the MIG mode, and again without it where a driver
    does not know that field."""
    for query in (QUERY, QUERY.removesuffix(",mig.mode.current")):
        out = _run([exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"], timeout)
        if out is not None and out.returncode == 0:
            return parse_query(out.stdout), None
        if "mig.mode.current" not in _first_line(out):
            break
    return [], _first_line(out)


def probe(timeout: float = 15.0) -> tuple[GpuHost | None, str]:
    """(the host's GPUs, how they were found), or (None, why this is a host without an NVIDIA driver), or a
    GpuHost whose `problem` says why a host with a driver cannot be used as it is. Never raises."""
    info = read_driver()
    exe = shutil.which("nvidia-smi")
    tried = "; ".join(info.tried)
    if exe is None and info.driver is None:
        return None, f"no NVIDIA driver on this host ({tried})"
    env_cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpus, why = list_gpus(exe, timeout) if exe else ([], "nvidia-smi is not on PATH")
    if not gpus and info.driver is None:
        # nvidia-smi is installed but neither it, NVML nor /proc finds a driver: not loaded, so no GPU to use
        return None, f"nvidia-smi failed: {why}" if why else "nvidia-smi lists no GPU"
    problem = None
    if not gpus:
        problem = (f"NVIDIA driver {info.driver} is loaded ({info.source}) but its GPUs cannot be listed: {why}. "
                   "Check `nvidia-smi` by hand (a driver/library version mismatch needs a reboot or a reinstall)")
    elif info.cuda is None:
        problem = (f"this host has {len(gpus)} NVIDIA GPU(s) but the CUDA version its driver runs could not be "
                   f"read (tried {tried}). Check `nvidia-smi` by hand, or install nvidia-ml-py where layerbench "
                   "runs so that NVML can be asked")
    host = GpuHost(gpus=tuple(gpus), driver=info.driver or "unknown", cuda=info.cuda, cuda_visible_devices=env_cvd,
                   notes=(), driver_source=info.source, cuda_source=info.cuda_source, problem=problem)
    return host, (f"nvidia-smi: {len(gpus)} GPU(s); driver {info.driver} ({info.source}), "
                  f"CUDA {info.cuda} ({info.cuda_source})" if problem is None else problem)


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


def devices_for(host: GpuHost | None, gpus: list[int] | None, tensor_parallel_size: int,
                replicas: int = 1) -> list[int]:
    """The GPU indices one deployment may use: `gpus` as named (GPUS= or the profile's engine.gpus), else the
    first `replicas` × `tensor_parallel_size` visible ones (replica i takes the i-th run of tensor_parallel_size of
    them); [] on a host without GPUs. LayerbenchError naming what to change when the request cannot be met."""
    need = tensor_parallel_size * replicas
    what = (f"engine.tensor_parallel_size {tensor_parallel_size}" if replicas == 1 else
            f"engine.replicas {replicas} × tensor_parallel_size {tensor_parallel_size} ({need} GPUs)")
    if host is None:
        if gpus:
            raise LayerbenchError(f"GPUS={','.join(map(str, gpus))} names GPUs, but this host has none "
                                  f"({no_gpu_reason() or 'nvidia-smi lists none'}): remove GPUS / engine.gpus")
        if tensor_parallel_size > 1:
            raise LayerbenchError(f"engine.tensor_parallel_size {tensor_parallel_size} needs that many GPUs, and "
                                  "this host has none: set tensor_parallel_size 1")
        return []  # N engines on a host without GPUs share its CPU (the GPU-like engine: its step sleeps)
    if host.problem:
        raise LayerbenchError(host.problem)
    known = [g.index for g in host.gpus]
    if gpus:
        unknown = [g for g in gpus if g not in known]
        if unknown:
            raise LayerbenchError(f"GPUS names GPU {', '.join(map(str, unknown))}, which does not exist: this host "
                                  f"has GPUs {span(known)} (nvidia-smi -L)")
        if len(set(gpus)) != len(gpus):
            raise LayerbenchError(f"GPUS={','.join(map(str, gpus))} names a GPU twice")
        if len(gpus) != need:
            fix = f"set tensor_parallel_size {len(gpus)}" if replicas == 1 else "or change replicas"
            raise LayerbenchError(f"GPUS names {len(gpus)} GPU(s) ({','.join(map(str, gpus))}) but {what} needs "
                                  f"{need}: name {need}, {fix}")
        return refuse_mig(host, list(gpus))
    visible = host.visible()
    if need > len(visible):
        where = (f"CUDA_VISIBLE_DEVICES={host.cuda_visible_devices} leaves {len(visible)}"
                 if host.cuda_visible_devices is not None else f"this host has {len(visible)}")
        lower = "lower tensor_parallel_size" if replicas == 1 else "lower replicas or tensor_parallel_size"
        raise LayerbenchError(f"{what} is more GPUs than are visible ({where}): {lower} or free more GPUs")
    return refuse_mig(host, visible[:need])


def replica_devices(devices: list[int], replicas: int) -> list[list[int]]:
    """Each replica's GPUs: the i-th equal run of `devices` ([] for each on a host without GPUs)."""
    if not devices:
        return [[] for _ in range(replicas)]
    per = len(devices) // replicas
    return [devices[i * per:(i + 1) * per] for i in range(replicas)]


def refuse_mig(host: GpuHost, devices: list[int]) -> list[int]:
    """`devices`, or LayerbenchError where one is in MIG mode: CUDA_VISIBLE_DEVICES=<index> then selects none of
    its slices (CUDA names MIG slices by MIG-<uuid>), and NVML reports no utilization for it, so layerbench would
    measure nothing it can stand behind. Not supported yet: the message says how to free the GPU."""
    mig = [i for i in devices if (g := host.by_index(i)) is not None and g.mig_enabled]
    if mig:
        others = [g.index for g in host.gpus if not g.mig_enabled and g.index not in devices]
        raise LayerbenchError(
            f"GPU {span(mig)} is in MIG mode (nvidia-smi --query-gpu=mig.mode.current says Enabled): layerbench "
            f"does not place engines on MIG slices yet. Disable MIG on it (sudo nvidia-smi -i {mig[0]} -mig 0, "
            "then reset the GPU)" + (f", or name a whole GPU with GPUS= ({span(others)})" if others else ""))
    return devices


def device_env(devices: list[int]) -> dict[str, str]:
    """What a deployment's processes get: the devices it may use, numbered as nvidia-smi numbers them."""
    if not devices:
        return {}
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, devices)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def span(indices: list[int]) -> str:
    if indices and indices == list(range(indices[0], indices[-1] + 1)) and len(indices) > 2:
        return f"{indices[0]}-{indices[-1]}"
    return ", ".join(map(str, indices))
