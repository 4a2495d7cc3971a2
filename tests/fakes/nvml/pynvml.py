"""A stand-in for `pynvml` (nvidia-ml-py) on a host without a GPU: the functions layerbench's GPU telemetry and
VRAM check call, with the real ones' names, units and errors, whose readings follow a script.

Put this folder first on sys.path (a spawned sampler process inherits it) and name a JSON script in
FAKE_NVML_SCRIPT:
    {"t0": <time.time() the timeline starts at>,
     "gpus": [{"name": "NVIDIA H100 80GB HBM3", "total_mib": 81559}, ...],
     "timeline": [{"after_s": 0, "gpu": 0, "used_mib": 500, "util": 0, "power_w": 70, "sm_mhz": 1980,
                   "processes": [{"pid": 123, "used_mib": 400}]}, ...]}
A GPU's reading at time t is its last timeline entry with after_s <= t - t0. Without FAKE_NVML_SCRIPT, nvmlInit
fails as it does where the NVIDIA driver's library is missing."""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

NVML_CLOCK_SM = 1
NVML_SUCCESS = 0


class NVMLError(Exception):
    def __init__(self, value: int, text: str):
        super().__init__(text)
        self.value = value


class NVMLError_LibraryNotFound(NVMLError):  # pynvml's own name
    def __init__(self) -> None:
        super().__init__(12, "NVML Shared Library Not Found")


class NVMLError_Uninitialized(NVMLError):  # pynvml's own name
    def __init__(self) -> None:
        super().__init__(1, "Uninitialized")


class NVMLError_InvalidArgument(NVMLError):  # pynvml's own name
    def __init__(self) -> None:
        super().__init__(2, "Invalid Argument")


_script: dict | None = None


def _load() -> dict:
    path = os.environ.get("FAKE_NVML_SCRIPT")
    if not path:
        raise NVMLError_LibraryNotFound()
    with open(path) as f:
        return json.load(f)


def _need() -> dict:
    if _script is None:
        raise NVMLError_Uninitialized()
    return _script


def nvmlInit() -> None:
    global _script
    _script = _load()


def nvmlShutdown() -> None:
    _need()


def nvmlSystemGetDriverVersion() -> str:
    return _need().get("driver", "570.133.20")


def nvmlSystemGetCudaDriverVersion() -> int:
    return int(_need().get("cuda", 12080))


def nvmlSystemGetCudaDriverVersion_v2() -> int:  # the same answer under the name harness/host/driver.py asks first
    return nvmlSystemGetCudaDriverVersion()


def nvmlDeviceGetCount() -> int:
    return len(_need()["gpus"])


def nvmlDeviceGetHandleByIndex(index: int) -> SimpleNamespace:
    if not 0 <= index < nvmlDeviceGetCount():
        raise NVMLError_InvalidArgument()
    return SimpleNamespace(index=index)


def _now(handle) -> dict:
    script = _need()
    elapsed = time.time() - script.get("t0", 0.0)
    state: dict = {"used_mib": 0, "util": 0, "power_w": 0, "sm_mhz": 0, "processes": []}
    for entry in script.get("timeline", []):
        if entry.get("gpu", 0) == handle.index and entry.get("after_s", 0) <= elapsed:
            state.update({k: v for k, v in entry.items() if k not in ("gpu", "after_s")})
    return state


def nvmlDeviceGetName(handle) -> str:
    return _need()["gpus"][handle.index]["name"]


def nvmlDeviceGetUUID(handle) -> str:
    return f"GPU-fake-{handle.index:04d}"


def nvmlDeviceGetMemoryInfo(handle) -> SimpleNamespace:
    total = _need()["gpus"][handle.index]["total_mib"] * 2**20
    used = int(_now(handle)["used_mib"] * 2**20)
    return SimpleNamespace(total=total, used=used, free=total - used)


def nvmlDeviceGetUtilizationRates(handle) -> SimpleNamespace:
    return SimpleNamespace(gpu=int(_now(handle)["util"]), memory=0)


def nvmlDeviceGetPowerUsage(handle) -> int:
    return int(_now(handle)["power_w"] * 1000)  # milliwatts, as NVML reports it


def nvmlDeviceGetClockInfo(handle, clock: int) -> int:
    if clock != NVML_CLOCK_SM:
        raise NVMLError_InvalidArgument()
    return int(_now(handle)["sm_mhz"])


def nvmlDeviceGetComputeRunningProcesses(handle) -> list[SimpleNamespace]:
    return [SimpleNamespace(pid=p["pid"], usedGpuMemory=int(p["used_mib"] * 2**20))
            for p in _now(handle)["processes"]]
