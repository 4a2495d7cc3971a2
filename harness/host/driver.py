"""The NVIDIA driver as it reports itself: its version and the highest CUDA version it runs, read from NVML, then
`/proc/driver/nvidia/version`, and only then nvidia-smi's banner, whose spelling changed with driver 610.

Standard library only (`make doctor` and `make setup` run it with the system Python before any environment
exists): NVML is reached through `pynvml` (nvidia-ml-py) where that is importable, else through the driver's own
`libnvidia-ml.so.1` with ctypes, the calls nvidia-ml-py itself makes.

Sources:
- NVML: `nvmlSystemGetDriverVersion` (a string such as "610.43.02") and `nvmlSystemGetCudaDriverVersion_v2`
  (an int, 1000 * major + 10 * minor: 13030 is CUDA 13.3), NVIDIA's NVML API reference
  (https://docs.nvidia.com/deploy/nvml-api/group__nvmSystemQueries.html) and nvidia-ml-py's `pynvml.py`.
- `/proc/driver/nvidia/version`: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14 ..." for the
  proprietary module and "NVIDIA UNIX Open Kernel Module for x86_64  565.57.01 ..." for the open one (recorded in
  nix-community/nixGL#121 and #186). It names the driver only, not its CUDA version.
- nvidia-smi's banner: "Driver Version: 570.124.06   CUDA Version: 12.8" up to driver 5xx; from 610 "KMD Version:
  610.43.02   CUDA UMD Version: 13.3" (sgl-project/sglang#27487; NVIDIA's nvidia-smi documentation: "deprecated
  Driver Version and CUDA Version in favor of KMD Version and CUDA UMD Version")."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

PROC_VERSION = Path("/proc/driver/nvidia/version")
_BANNER_CUDA = re.compile(r"CUDA(?: UMD)? Version:\s*([0-9]+\.[0-9]+)")
_BANNER_DRIVER = re.compile(r"(?:KMD|Driver) Version:\s*([0-9]+(?:\.[0-9]+)+)")
_PROC_DRIVER = re.compile(r"Kernel Module(?: for \S+)?\s+([0-9]+(?:\.[0-9]+)+)")


@dataclass(frozen=True)
class DriverInfo:
    """What the driver said and where: `driver` ("610.43.02") and `cuda` ("13.3") each None when nothing read it;
    `tried` names every source asked, with its answer."""

    driver: str | None
    cuda: str | None
    source: str  # where the driver version came from: "NVML", "/proc/driver/nvidia/version", "nvidia-smi"
    cuda_source: str  # where the CUDA version came from (or "" when none did)
    tried: tuple[str, ...] = field(default=())

    @property
    def major(self) -> int | None:
        """The driver's branch (610 of "610.43.02")."""
        return branch(self.driver)


def branch(driver: str | None) -> int | None:
    """The branch of a driver version ("570.133.20" -> 570), None when it is not a version: the number NVIDIA's
    compatibility floors are written in (harness.host.engine_build.DRIVER_FLOOR)."""
    m = re.match(r"(\d+)(?:\.|$)", (driver or "").strip())
    return int(m.group(1)) if m else None


def cuda_from_int(value: int) -> str:
    """NVML's CUDA version integer as "major.minor": 12080 -> "12.8", 13030 -> "13.3"."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def parse_banner(table: str) -> tuple[str | None, str | None]:
    """(driver, CUDA) from nvidia-smi's plain table, in either spelling."""
    d, c = _BANNER_DRIVER.search(table), _BANNER_CUDA.search(table)
    return (d.group(1) if d else None), (c.group(1) if c else None)


def parse_proc(text: str) -> str | None:
    m = _PROC_DRIVER.search(text)
    return m.group(1) if m else None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_nvml(nvml: object | None = None) -> tuple[str | None, str | None, str]:
    """(driver, CUDA, what happened) from NVML: `nvml` is a pynvml-like module (tests hand one in); by default
    pynvml when importable, else libnvidia-ml.so.1 through ctypes."""
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]
        except ImportError:
            return _read_nvml_ctypes()
    try:
        nvml.nvmlInit()
    except Exception as e:  # pynvml raises NVMLError subclasses; a missing library is one of them
        return None, None, f"NVML: {e or type(e).__name__}"
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        get_cuda = getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None) or nvml.nvmlSystemGetCudaDriverVersion
        cuda = cuda_from_int(int(get_cuda()))
        return driver, cuda, f"NVML: driver {driver}, CUDA {cuda}"
    except Exception as e:
        return None, None, f"NVML: {e or type(e).__name__}"
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass


def _read_nvml_ctypes() -> tuple[str | None, str | None, str]:
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None, None, "NVML: libnvidia-ml.so.1 not found (no NVIDIA driver's user-mode library)"
    init = getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit
    rc = init()
    if rc != 0:
        return None, None, f"NVML: nvmlInit failed with NVML error {rc}"
    try:
        buf = ctypes.create_string_buffer(96)  # NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE is 80
        if lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) != 0:
            return None, None, "NVML: nvmlSystemGetDriverVersion failed"
        value = ctypes.c_int()
        get_cuda = getattr(lib, "nvmlSystemGetCudaDriverVersion_v2", None) or lib.nvmlSystemGetCudaDriverVersion
        if get_cuda(ctypes.byref(value)) != 0:
            return buf.value.decode(), None, "NVML: nvmlSystemGetCudaDriverVersion failed"
        cuda = cuda_from_int(value.value)
        return buf.value.decode(), cuda, f"NVML: driver {buf.value.decode()}, CUDA {cuda}"
    finally:
        lib.nvmlShutdown()


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None


def read_smi_banner(exe: str | None = None, timeout: float = 15.0) -> tuple[str | None, str | None, str]:
    exe = exe or shutil.which("nvidia-smi")
    if exe is None:
        return None, None, "nvidia-smi: not on PATH"
    out = _run([exe], timeout)
    if out is None or out.returncode != 0:
        why = ((out.stderr or out.stdout).strip().splitlines() or [f"exit {out.returncode}"])[0] if out else \
            "did not answer"
        return None, None, f"nvidia-smi: {why}"
    driver, cuda = parse_banner(out.stdout)
    found = ", ".join(f"{k} {v}" for k, v in (("driver", driver), ("CUDA", cuda)) if v)
    return driver, cuda, f"nvidia-smi: {found or 'its banner names neither the driver nor a CUDA version'}"


def read(nvml: object | None = None, proc: Path = PROC_VERSION, smi: str | None = None) -> DriverInfo:
    """The driver's version and CUDA version, each from the first source that names it (NVML, /proc, nvidia-smi),
    with every source tried until both are known."""
    tried: list[str] = []
    driver = cuda = None
    source = cuda_source = ""
    d, c, note = read_nvml(nvml)
    tried.append(note)
    if d:
        driver, source = d, "NVML"
    if c:
        cuda, cuda_source = c, "NVML"
    if driver is None:
        try:
            d = parse_proc(proc.read_text())
            tried.append(f"{proc}: driver {d}" if d else f"{proc}: no driver version in it")
        except OSError as e:
            d = None
            tried.append(f"{proc}: {e.strerror or e}")
        if d:
            driver, source = d, str(proc)
    if driver is None or cuda is None:
        d, c, note = read_smi_banner(smi)
        tried.append(note)
        if driver is None and d:
            driver, source = d, "nvidia-smi"
        if cuda is None and c:
            cuda, cuda_source = c, "nvidia-smi"
    return DriverInfo(driver, cuda, source, cuda_source, tuple(tried))
