"""`make gpu-check`: what layerbench reads on a real NVIDIA host, before any vLLM is installed, in one table that
exits non-zero on any mismatch.

- The driver from each source on its own (NVML, /proc/driver/nvidia/version, nvidia-smi's banner and its GPU
  list): the sources must agree on the driver's version and its CUDA version.
- The vLLM build setup would choose for that driver, with its pip arguments (harness/host/engine_build.py).
- The NVML sampler for --seconds (20 by default) with no load: it must read every GPU at every tick, with memory
  and power (a GPU that answers NOT_SUPPORTED for utilization is named).
- `make doctor`'s GPU and driver lines: ok, or a MIG note.
- With --client-python (the client environment's Python): the load client's events per second per core against
  the reference engine, with 1, 2, 4 and 8 client processes.

The first four need only the standard library and nvidia-ml-py (`pynvml`), so they run on a bare GPU host."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness.errors import LayerbenchError
from harness.host import driver
from harness.host.engine_build import for_host
from harness.host.gpus import probe

PROJECT = Path(__file__).resolve().parents[2]
CLIENT_PROCS = (1, 2, 4, 8)
Row = tuple[str, str, str]  # (check, what was read, ok | MISMATCH | note)


def driver_rows() -> list[Row]:
    nv_d, nv_c, nv_note = driver.read_nvml()
    try:
        proc_d = driver.parse_proc(driver.PROC_VERSION.read_text())
        proc_note = f"driver {proc_d}"
    except OSError as e:
        proc_d, proc_note = None, f"unreadable ({e.strerror or e})"
    smi_d, smi_c, smi_note = driver.read_smi_banner()
    rows: list[Row] = [("NVML", nv_note.removeprefix("NVML: "), "ok" if nv_d and nv_c else "MISMATCH"),
                       ("/proc driver", proc_note, "ok" if proc_d else "note"),
                       ("nvidia-smi banner", smi_note.removeprefix("nvidia-smi: "), "ok" if smi_d and smi_c else
                        "MISMATCH")]
    drivers, cudas = {d for d in (nv_d, proc_d, smi_d) if d}, {c for c in (nv_c, smi_c) if c}
    rows.append(("sources agree", f"driver {', '.join(sorted(drivers)) or 'none'}; CUDA "
                 f"{', '.join(sorted(cudas)) or 'none'}", "ok" if len(drivers) == 1 and len(cudas) == 1 else
                 "MISMATCH"))
    host, why = probe()
    if host is None or not host.gpus:
        rows.append(("GPUs", why if host is None else (host.problem or "none listed"), "MISMATCH"))
    else:
        mig = [g.index for g in host.gpus if g.mig_enabled]
        rows.append(("GPUs", f"{len(host.gpus)} × {host.gpus[0].name}" + (f"; MIG on GPU {mig}" if mig else ""),
                     "note" if mig else "ok"))
    try:
        build = for_host()
        rows.append(("build", f"{build.text()}: pip install {' '.join(build.pip_args)}", "ok"))
    except LayerbenchError as e:
        rows.append(("build", str(e), "MISMATCH"))
    return rows


def sampler_rows(seconds: float) -> list[Row]:
    """NVML read every 0.5 s for `seconds`, with the calls the telemetry sampler makes."""
    try:
        import pynvml as nvml
    except ImportError:
        return [("NVML sampler", "pynvml (nvidia-ml-py) is not importable: pip install nvidia-ml-py", "MISMATCH")]
    try:
        nvml.nvmlInit()
    except Exception as e:
        return [("NVML sampler", f"nvmlInit failed: {e}", "MISMATCH")]
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        got: dict[str, list[int]] = {"util": [0] * len(handles), "mem": [0] * len(handles),
                                     "power": [0] * len(handles)}
        ticks, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            ticks += 1
            for k, h in enumerate(handles):
                for key, call in (("util", lambda h=h: nvml.nvmlDeviceGetUtilizationRates(h).gpu),
                                  ("mem", lambda h=h: nvml.nvmlDeviceGetMemoryInfo(h).used),
                                  ("power", lambda h=h: nvml.nvmlDeviceGetPowerUsage(h))):
                    try:
                        call()
                        got[key][k] += 1
                    except Exception:
                        pass
            time.sleep(0.5)
    finally:
        nvml.nvmlShutdown()
    missing = [f"GPU {k} {key}" for key, counts in got.items() for k, n in enumerate(counts) if n < ticks]
    status = "ok" if not [m for m in missing if "util" not in m] else "MISMATCH"
    return [("NVML sampler", f"{ticks} ticks × {len(handles)} GPU(s) in {seconds:g} s; "
             + (f"missing: {', '.join(missing)}" if missing else "every reading at every tick"),
             status if handles else "MISMATCH")]


def doctor_rows() -> list[Row]:
    out = subprocess.run([sys.executable, "-m", "harness.host.doctor"], cwd=PROJECT, capture_output=True, text=True,
                         timeout=300)
    rows: list[Row] = []
    for line in out.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[1] in ("GPUs", "driver", "MIG", "visible"):
            rows.append((f"doctor {parts[1]}", parts[2], "ok" if parts[0] in ("ok", "note") else "MISMATCH"))
    return rows or [("doctor", f"printed no GPU or driver line (exit {out.returncode})", "MISMATCH")]


def client_rows(python: str) -> list[Row]:
    out = subprocess.run([python, "-m", "harness.bench.gpu_check", "--client-only"], cwd=PROJECT, capture_output=True,
                         text=True, timeout=600)
    try:
        got = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [("client", f"did not run: {(out.stderr.strip().splitlines() or ['no output'])[-1]}", "MISMATCH")]
    return [(f"client, {p} process(es)", f"{v['events_per_s_per_core']:,.0f} events/s per core, "
             f"{v['events_per_s']:,.0f} events/s", "ok") for p, v in got.items()]


def client_figures() -> dict[str, dict[str, float]]:
    """Events per second, and per client core, at c=64 against the reference engine, in 1-8 processes."""
    import tempfile

    from harness.bench.clients import sim_stack
    from harness.bench.scale import ENGINE_PROCESSES, ITL_MS, run_procs

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        with sim_stack(Path(tmp), ttft_ms=5.0, itl_ms=ITL_MS, processes=ENGINE_PROCESSES) as sim:
            for procs in CLIENT_PROCS:
                cpu, events, window, _ = run_procs(sim.endpoint().base_url, procs, 768, Path(tmp))
                out[str(procs)] = {"events_per_s": events / window, "events_per_s_per_core": events / cpu}
    return out


def table(rows: list[Row]) -> str:
    w = max(len(r[0]) for r in rows)
    return "\n".join(f"  {s:<9} {c:<{w}}  {t}" for c, t, s in rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m harness.bench.gpu_check", description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0, help="how long the NVML sampler runs (default 20)")
    p.add_argument("--client-python", help="the client environment's Python: adds the client's events/s per core")
    p.add_argument("--client-only", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.client_only:
        print(json.dumps(client_figures()))
        return 0
    print(f"gpu-check on {os.uname().nodename}, {os.cpu_count()} cores", flush=True)
    rows = driver_rows() + sampler_rows(a.seconds) + doctor_rows()
    if a.client_python:
        rows += client_rows(a.client_python)
    print(table(rows))
    bad = [r for r in rows if r[2] == "MISMATCH"]
    print(f"gpu-check: {len(bad)} mismatch(es)" if bad else "gpu-check: every part read as expected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
