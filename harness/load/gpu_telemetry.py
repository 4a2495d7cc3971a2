"""GPU telemetry from NVML (`nvidia-ml-py`), read by a sampler process of its own, like the core sampler: never
inside the client or the deployment. Every SAMPLE_S it appends one line per GPU (utilisation, memory used,
power, SM clock) to a JSONL file as it measures; a level's window is summarised from the lines between its
start and end. Where DCGM's `dcgmi` is on PATH, its profiling counters (SM and Tensor Core activity) are read
beside NVML's. The report claims them only when samples arrived: `dcgmi dmon` prints nothing useful without a
running nv-hostengine, or while dcgm-exporter holds the profiling counters, and then the report says so with
dmon's own message.

`VramGuard` is the check the layer study made by hand with nvidia-smi between deployments: before the next
deployment starts, the GPUs' memory must be back at its level from before the first one; a process still
holding it fails the compare, named."""

from __future__ import annotations

import json
import multiprocessing as mp
import shutil
import subprocess
import threading
import time
from pathlib import Path
from types import ModuleType

from harness.childproc import StopFlag, child_signals, start_child, stop_child
from harness.errors import LayerbenchError
from harness.schemas import GpuWindow

SAMPLE_S = 0.5
DCGM_FIELDS = {"1002": "sm_active", "1004": "tensor_active"}  # DCGM_FI_PROF_SM_ACTIVE, _PIPE_TENSOR_ACTIVE
RELEASE_TIMEOUT_S = 120.0  # vLLM frees its memory when its worker exits; a GPU can take seconds to show it
RELEASE_MARGIN_MIB = 512.0


def load_nvml() -> tuple[ModuleType | None, str]:
    """(the initialised pynvml module, "") or (None, why NVML cannot be read here). Never raises."""
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...: no GPU to read
        return None, f"NVML unavailable: {e}"
    return pynvml, ""


def _sample(nvml: ModuleType, index: int, handle) -> dict:
    def read(f, *a):
        try:
            return f(handle, *a)
        except Exception:  # a field this GPU does not report (power on some virtual GPUs)
            return None

    util = read(nvml.nvmlDeviceGetUtilizationRates)
    mem = read(nvml.nvmlDeviceGetMemoryInfo)
    power = read(nvml.nvmlDeviceGetPowerUsage)
    return {"t": time.monotonic(), "i": index, "util": getattr(util, "gpu", None),
            "mem_mib": mem.used / 2**20 if mem is not None else None,
            "power_w": power / 1000 if power is not None else None,
            "sm_mhz": read(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM)}


def _dcgm_reader(exe: str, devices: list[int], out, lock: threading.Lock, stop: StopFlag) -> subprocess.Popen:
    """`dcgmi dmon` streaming SM and Tensor Core activity; a thread turns its rows into lines of `out`, and when
    dmon ends before the sampler does, one line {"dcgm_exit": rc, "why": what dmon said}."""
    proc = subprocess.Popen([exe, "dmon", "-e", ",".join(DCGM_FIELDS), "-i", ",".join(map(str, devices)), "-d",
                             str(int(SAMPLE_S * 1000))], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def pump() -> None:
        assert proc.stdout is not None
        other: list[str] = []
        for row in proc.stdout:
            parsed = parse_dmon_row(row)
            if parsed is not None and not stop.is_set():
                with lock:
                    out.write(json.dumps({"t": time.monotonic(), **parsed}) + "\n")
                    out.flush()
            elif parsed is None and row.strip() and not row.lstrip().startswith(("#", "ID", "GPU")):
                other.append(row.strip())
        rc = proc.wait()
        if not stop.is_set():
            with lock:
                out.write(json.dumps({"t": time.monotonic(), "dcgm_exit": rc, "why": " ".join(other)[:300]}) + "\n")
                out.flush()

    threading.Thread(target=pump, daemon=True).start()
    return proc


def parse_dmon_row(row: str) -> dict | None:
    """`GPU 0    0.512   0.234` -> {"i": 0, "sm_active": 0.512, "tensor_active": 0.234}; headers and N/A: None."""
    parts = row.split()
    if len(parts) < 2 + len(DCGM_FIELDS) or parts[0] != "GPU" or not parts[1].isdigit():
        return None
    out: dict = {"i": int(parts[1])}
    for name, raw in zip(DCGM_FIELDS.values(), parts[2:2 + len(DCGM_FIELDS)], strict=True):
        try:
            out[name] = float(raw)
        except ValueError:
            out[name] = None
    return out


def _loop(devices: list[int], out_path: str, stop: StopFlag) -> None:
    child_signals(stop)
    nvml, _ = load_nvml()
    if nvml is None:
        return
    handles = {i: nvml.nvmlDeviceGetHandleByIndex(i) for i in devices}
    lock = threading.Lock()
    with open(out_path, "a") as out:
        dcgm = shutil.which("dcgmi")
        reader = _dcgm_reader(dcgm, devices, out, lock, stop) if dcgm else None
        try:
            while not stop.wait(SAMPLE_S):
                lines = [json.dumps(_sample(nvml, i, h)) + "\n" for i, h in handles.items()]
                with lock:
                    out.writelines(lines)
                    out.flush()
        finally:
            if reader is not None:
                reader.terminate()
                reader.wait(timeout=5)
            nvml.nvmlShutdown()


def _mean(xs: list) -> float | None:
    vals = [x for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def _max(xs: list) -> float | None:
    vals = [x for x in xs if x is not None]
    return max(vals) if vals else None


def summarise(lines: list[dict], t0: float, t1: float) -> list[GpuWindow]:
    """Per GPU, the samples taken between t0 and t1 (monotonic seconds); a window shorter than the sampling
    interval that caught none gets the readings within one interval of it."""
    by_gpu: dict[int, list[dict]] = {}
    for pad in (0.0, SAMPLE_S):
        for d in lines:
            if "i" in d and t0 - pad <= d.get("t", -1) <= t1 + pad:  # not dmon's exit line
                by_gpu.setdefault(d["i"], []).append(d)
        if by_gpu:
            break
    out = []
    for i, rows in sorted(by_gpu.items()):
        nv = [r for r in rows if "util" in r]
        col = lambda key, rs=rows: [r.get(key) for r in rs]  # noqa: E731
        out.append(GpuWindow(index=i, samples=len(nv), util_pct_mean=_mean(col("util", nv)),
                             util_pct_max=_max(col("util", nv)), memory_used_mib_max=_max(col("mem_mib", nv)),
                             power_w_mean=_mean(col("power_w", nv)), sm_clock_mhz_mean=_mean(col("sm_mhz", nv)),
                             sm_active_mean=_mean(col("sm_active")), tensor_active_mean=_mean(col("tensor_active"))))
    return out


class GpuSampler:
    """Samples `devices` in a process of its own until stopped; nothing (and no process) without GPUs."""

    def __init__(self, devices: list[int], out_path: Path):
        self.devices, self.out_path = list(devices), out_path
        self._proc = None
        if self.devices:
            ctx = mp.get_context("spawn")
            self._stop = StopFlag(ctx)
            self._proc = ctx.Process(target=_loop, name="layerbench-gpus", daemon=True,
                                     args=(self.devices, str(out_path), self._stop))

    def __enter__(self) -> GpuSampler:
        if self._proc is not None:
            start_child(self._proc)
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            stop_child(self._proc, self._stop, timeout=5)

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def lines(self) -> list[dict]:
        try:
            text = self.out_path.read_text()
        except OSError:
            return []
        out = []
        for line in text.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:  # the line being written as we read
                continue
        return out

    def window(self, t0: float, t1: float) -> list[GpuWindow]:
        return summarise(self.lines(), t0, t1) if self.devices else []

    def dcgm(self) -> str | None:
        """DCGM's part of the telemetry note, once the sampler has stopped; None without GPUs."""
        return dcgm_note(self.lines(), shutil.which("dcgmi") is not None) if self.devices else None


def telemetry_note(devices: list[int]) -> str | None:
    """What the report says about its GPU figures; None on a host without GPUs."""
    if not devices:
        return None
    nvml, why = load_nvml()
    if nvml is None:
        return f"no GPU telemetry: {why}"
    nvml.nvmlShutdown()
    return f"NVML every {SAMPLE_S:g} s on GPU {', '.join(map(str, devices))}"


def dcgm_note(lines: list[dict], dcgmi_found: bool) -> str:
    """What the report says of DCGM's counters, from what the sampler wrote: claimed only when samples arrived."""
    if not dcgmi_found:
        return "DCGM profiling counters (SM and Tensor Core activity): not available (dcgmi not found on this host)"
    samples = sum(1 for ln in lines if ln.get("sm_active") is not None or ln.get("tensor_active") is not None)
    if samples:
        return f"DCGM profiling counters (SM and Tensor Core activity) from dcgmi: {samples} samples"
    ended = next((ln for ln in lines if "dcgm_exit" in ln), None)
    said = (f"dcgmi dmon exited {ended['dcgm_exit']}" + (f": {ended['why']}" if ended.get("why") else "")
            if ended else "dcgmi dmon printed no sample")
    return (f"DCGM profiling counters: none arrived ({said}); dcgmi needs a running nv-hostengine, and no other "
            "profiler (dcgm-exporter, Nsight) holding the counters")


class VramGuard:
    """GPU memory in use before the first deployment, and the wait for it to come back after each one."""

    def __init__(self, devices: list[int]):
        self.devices = list(devices)
        self.before: dict[int, float] = {}
        self.nvml, _ = load_nvml() if self.devices else (None, "")
        if self.nvml is not None:
            self.before = self._used()

    def _used(self) -> dict[int, float]:
        assert self.nvml is not None
        return {i: self.nvml.nvmlDeviceGetMemoryInfo(self.nvml.nvmlDeviceGetHandleByIndex(i)).used / 2**20
                for i in self.devices}

    def _margin(self, i: int) -> float:
        assert self.nvml is not None
        total = self.nvml.nvmlDeviceGetMemoryInfo(self.nvml.nvmlDeviceGetHandleByIndex(i)).total / 2**20
        return max(RELEASE_MARGIN_MIB, 0.02 * total)

    def wait_released(self, what: str, timeout: float | None = None, poll_s: float = 0.5) -> float | None:
        """Seconds until every device's memory was back within the margin of its level before the first
        deployment (None without NVML); LayerbenchError naming the processes still holding it."""
        if self.nvml is None:
            return None
        timeout = RELEASE_TIMEOUT_S if timeout is None else timeout
        t0 = time.monotonic()
        while True:
            used = self._used()
            held = {i: u for i, u in used.items() if u > self.before[i] + self._margin(i)}
            if not held:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise LayerbenchError(self._holders(what, held, timeout))
            time.sleep(poll_s)  # poll interval; the condition is the memory reading above

    def _holders(self, what: str, held: dict[int, float], timeout: float) -> str:
        import psutil

        assert self.nvml is not None
        parts = []
        for i, used in held.items():
            procs = []
            try:
                running = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.nvml.nvmlDeviceGetHandleByIndex(i))
            except Exception:
                running = []
            for p in running:
                try:
                    name = " ".join(psutil.Process(p.pid).cmdline())[:80] or "?"
                except psutil.Error:
                    name = "not visible from here"
                mib = f"{p.usedGpuMemory / 2**20:,.0f} MiB" if p.usedGpuMemory else "? MiB"
                procs.append(f"pid {p.pid} ({name}) holds {mib}")
            parts.append(f"GPU {i}: {used:,.0f} MiB in use against {self.before[i]:,.0f} MiB before the first "
                         f"deployment" + (f"; {', '.join(procs)}" if procs else "; no process listed by NVML"))
        return (f"GPU memory was not returned {timeout:.0f} s after {what} was torn down, so the next deployment "
                "would not get the same GPU: " + "; ".join(parts) + ". Stop that process, then resume the compare")
