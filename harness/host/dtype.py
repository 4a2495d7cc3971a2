"""The dtype this host computes the GPU-like engine in (`engine.dtype: fastest`): the tiny model's decode step
(two layers at batch 64: norms, attention, MLP, the LM head and sampling) is timed in bfloat16 and float32 with the
engine environment's own torch, and bfloat16 is kept only where it is no slower than float32 by more than
DTYPE_SLACK and the CPU has the instructions vLLM's CPU kernels compute bfloat16 with (avx512_bf16 or amx_bf16). On
a CPU without them the layer study's bfloat16 profile ran its step 41-132% longer than configured at c=16-64;
float32 held it."""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Callable
from pathlib import Path

from harness.profile.schema import LoadProfile
from harness.schemas import DtypeChoice

DTYPE_SLACK = 1.2
BF16_FLAGS = ("avx512_bf16", "amx_bf16")

_STEP_BENCH = """
import time, torch
torch.manual_seed(0)
H, I, V, B, T = 256, 512, 1024, 64, 128
def step(p, dt):
    h = p["emb"][p["x"]]
    for _ in range(2):
        a = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        q = (a @ p["q"]).view(B, 4, 1, 64)
        att = torch.nn.functional.scaled_dot_product_attention(q, p["kv"], p["kv"])
        h = h + att.reshape(B, H) @ p["o"]
        a = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        h = h + (torch.nn.functional.silu(a @ p["g"]) * (a @ p["u"])) @ p["d"]
    return torch.multinomial(torch.softmax((h @ p["head"]).float(), -1), 1)
for dt in (torch.bfloat16, torch.float32):
    p = {"emb": torch.randn(V, H), "q": torch.randn(H, H), "o": torch.randn(H, H), "g": torch.randn(H, I),
         "u": torch.randn(H, I), "d": torch.randn(I, H), "head": torch.randn(H, V), "kv": torch.randn(B, 4, T, 64)}
    p = {k: v.to(dt) for k, v in p.items()}
    p["x"] = torch.randint(0, V, (B,))
    for _ in range(5):
        step(p, dt)
    t = time.perf_counter()
    for _ in range(40):
        step(p, dt)
    print(str(dt).removeprefix("torch."), (time.perf_counter() - t) / 40 * 1e3)
"""


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    return {f for line in text.splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split()}


@functools.cache
def _step_times(python: str) -> tuple[tuple[str, float], ...]:
    """One step of the tiny model in each dtype, timed once per process and interpreter (about 3 s on the 2-core
    CPU host: a torch import and 2 x 45 steps); what it printed before any failure, () where it cannot run."""
    times: list[tuple[str, float]] = []
    try:
        out = subprocess.run([python, "-c", _STEP_BENCH], capture_output=True, text=True, timeout=120)
        for line in out.stdout.splitlines():
            name, _, ms = line.partition(" ")
            times.append((name, float(ms)))
    except (OSError, subprocess.SubprocessError, ValueError):
        pass  # what was read before the failure
    return tuple(times)


def fastest_dtype(python: Path, flags: set[str] | None = None) -> DtypeChoice:
    """Times both dtypes with `python`'s torch (the engine environment); float32 where that cannot run."""
    flags = cpu_flags() if flags is None else flags
    bf16_cpu = any(f in flags for f in BF16_FLAGS)
    times = dict(_step_times(str(python)))
    keep_bf16 = bf16_cpu and "bfloat16" in times and "float32" in times \
        and times["bfloat16"] <= DTYPE_SLACK * times["float32"]
    return DtypeChoice(dtype="bfloat16" if keep_bf16 else "float32", step_ms=times, cpu_bf16=bf16_cpu)


def resolved_dtype(profile: LoadProfile, python: Callable[[], Path]) -> LoadProfile:
    """`engine.dtype: fastest` measured on this host and recorded in `dtype_measured`; both sides of a compare,
    and the GPU-like engine's calibration, get the dtype it chose.
    `python()`: the engine environment's interpreter, asked only when timing."""
    engine = profile.engine
    if engine.dtype != "fastest" or engine.model != "gpu-like":
        return profile
    choice = fastest_dtype(python())
    return profile.model_copy(update={"engine": engine.model_copy(update={
        "dtype": choice.dtype, "dtype_measured": choice.text()})})
