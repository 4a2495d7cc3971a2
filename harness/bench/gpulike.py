"""Calibration of the GPU-like engine (engine.model: gpu-like): does real vLLM with the sleeping model step keep
the configured step, and does its worker's CPU fall as a worker waiting on its GPU would?

Bare vLLM is deployed twice with the `gpu-like` profile's engine settings: once with the GPU-like model, once with
the tiny model it wraps (computed on this host's CPU). Each serves LEVELS, one window each, scraped at the window's
edges only. Measured step: the engine's mean inter-token latency over the window; configured: the profile's step
for the window's own mix (harness/analysis/emulation.py). The client's step: each request's median gap between
tokens, averaged, against the step for c decoding sequences, as a compare's calibration judges a level
(harness/analysis/calibrate.py). CPU: the worker's and EngineCore's cores during the window."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from rich.progress import Progress, TaskID

from harness.analysis.calibrate import request_medians
from harness.analysis.emulation import ENGINE_CORE, TOLERANCE, WORKER, configured_ms
from harness.analysis.server_metrics import summarise
from harness.bench.figures import Verdict
from harness.bench.section import Context, SectionResult
from harness.host.dtype import resolved_dtype
from harness.load import eventloop
from harness.load.client import StreamClient
from harness.load.prompts import PromptGenerator
from harness.load.runner import Hooks, LevelPlan, Sender, run_level
from harness.load.scraper import Scraper
from harness.profile.loading import load_profile
from harness.profile.schema import EngineSettings, LoadProfile
from harness.reporting.format import fmt, markdown_table
from harness.results import new_run_id
from stacks.base import ENGINE_VENV, DeploySettings, Stack
from stacks.base.engine_env import engine_python

LEVELS = (1, 16, 64)
CHECKED = (1, 16)  # the levels the step must be kept at (within TOLERANCE)
NEAR_IDLE_CORES = 0.25  # the GPU-like worker at c=1 must use less than this (the tiny model's worker: ~1 core)


def _window(stack: Stack, profile: LoadProfile, client: StreamClient, gen: PromptGenerator, c: int, tmp: Path) -> dict:
    scraper = Scraper(stack.metric_endpoints(), 2.0, tmp / "scrapes.jsonl", policy="boundary")
    with scraper:
        scraper.level = c
        plan = LevelPlan(c, profile.requests_for(c), warmup_waves=1, min_duration_s=profile.min_duration_s)
        hooks = Hooks(process_cpu=stack.process_cpu, on_measure_start=lambda: scraper.mark(c, "start"))
        run = eventloop.run(run_level(Sender(client, gen), plan, hooks))
        scraper.mark(c, "end")
        server = summarise(scraper.new_scrapes())
    cores = {k: v / run.window_s for k, v in run.process_cpu_s.items()} if run.window_s else {}
    step = profile.engine.step
    gaps = request_medians(r["event_ms"] for r in run.records if r["ok"])
    return {
        "concurrency": c, "failed": sum(not r["ok"] for r in run.records),
        "client_ms": float(np.mean(gaps)) if gaps else None, "client_configured_ms": step.ms(c) if step else None,
        "measured_ms": server.engine_itl_ms,
        "configured_ms": configured_ms(step, server) if step else None,
        "tokens_per_step": server.engine_step_tokens / server.engine_steps if server.engine_steps else None,
        "worker_cores": sum(v for k, v in cores.items() if k.endswith(WORKER)),
        "engine_core_cores": sum(v for k, v in cores.items() if k.endswith(ENGINE_CORE)),
        "api_server_cores": sum(v for k, v in cores.items() if "api_server" in k),
        "client_cpu_pct": run.client.cpu_pct}


def _model(engine: EngineSettings, progress: Progress, task: TaskID, tmp: Path) -> list[dict]:
    from stacks.base.engine_model import model_dir
    from stacks.vllm import VllmStack

    profile = load_profile("gpu-like").model_copy(update={"engine": engine})
    out = []
    settings = DeploySettings(engine=engine, model_path=model_dir(engine), log_dir=tmp)
    with VllmStack(settings) as stack:
        stack.deploy()
        stack.wait_ready(600)
        ep = stack.endpoint()
        client = StreamClient(ep.base_url, ep.model, max_tokens=profile.output_tokens, timeout_s=120)
        gen = PromptGenerator(new_run_id("gpulike"), "gpulike", profile.input_tokens,
                              settings.model_path / "tokenizer.json")
        for c in LEVELS:
            progress.update(task, description=f"GPU-like calibration: {engine.model} c={c}")
            out.append({"model": engine.model, **_window(stack, profile, client, gen, c, tmp)})
            progress.advance(task)
    return out


def engines() -> tuple[EngineSettings, EngineSettings]:
    """The `gpu-like` profile's engine and the same with the tiny model, at the dtype this host runs fastest (the
    profile says `dtype: fastest`, which vLLM itself does not take)."""
    gpu_like = resolved_dtype(load_profile("gpu-like"), lambda: engine_python(ENGINE_VENV)).engine
    return gpu_like, gpu_like.model_copy(update={"model": "tiny", "step": None})


def measure(progress: Progress, tmp: Path) -> list[dict]:
    gpu_like, tiny = engines()
    task = progress.add_task("GPU-like calibration: deploying vLLM", total=2 * len(LEVELS))
    return _model(gpu_like, progress, task, tmp) + _model(tiny, progress, task, tmp)


def verdicts(rows: list[dict]) -> list[Verdict]:
    out = []
    for c in CHECKED:
        r = next((x for x in rows if x["model"] == "gpu-like" and x["concurrency"] == c), None)
        ok = None if r is None or not r["measured_ms"] or not r["configured_ms"] else \
            abs(r["measured_ms"] / r["configured_ms"] - 1) <= TOLERANCE
        out.append(Verdict(f"GPU-like step within {TOLERANCE:.0%} of the configured one at c={c}", ok,
                           "no data" if r is None else f"measured {fmt(r['measured_ms'], '{:.2f}')} ms, configured "
                           f"{fmt(r['configured_ms'], '{:.2f}')} ms"))
    r = next((x for x in rows if x["model"] == "gpu-like" and x["concurrency"] == 1), None)
    tiny = next((x for x in rows if x["model"] == "tiny" and x["concurrency"] == 1), None)
    out.append(Verdict(f"GPU-like worker near idle at c=1 (< {NEAR_IDLE_CORES} cores)",
                       None if r is None else r["worker_cores"] < NEAR_IDLE_CORES,
                       "no data" if r is None else f"{r['worker_cores']:.2f} cores" +
                       (f"; the tiny model's worker {tiny['worker_cores']:.2f}" if tiny else "")))
    return out


def _off(measured: float | None, configured: float | None) -> str:
    return fmt(100 * (measured / configured - 1) if measured and configured else None, "{:+.1f}%")


def render(rows: list[dict], wall_s: float) -> list[str]:
    step = load_profile("gpu-like").engine.step
    table = [[r["model"], str(r["concurrency"]), fmt(r["tokens_per_step"]), fmt(r["configured_ms"], "{:.2f}"),
              fmt(r["measured_ms"], "{:.2f}"), _off(r.get("measured_ms"), r.get("configured_ms")),
              fmt(r.get("client_configured_ms"), "{:.2f}"), fmt(r.get("client_ms"), "{:.2f}"),
              _off(r.get("client_ms"), r.get("client_configured_ms")),
              f"{r['worker_cores']:.2f}",
              fmt(r["worker_cores"] * r["measured_ms"] if r["measured_ms"] else None, "{:.2f}"),
              f"{r['engine_core_cores']:.2f}", f"{r['api_server_cores']:.2f}",
              f"{r['client_cpu_pct']:.0f}%", str(r["failed"])] for r in rows]
    return [
        "## The GPU-like engine: configured step against the engine's own",
        "",
        f"Bare vLLM with the `gpu-like` profile's engine settings, once with the GPU-like model (step: "
        f"{step.text() if step else '—'}) and once with the tiny model it wraps, computed on this host. One window "
        f"per level (the profile's sizes), scraped at its edges only. Measured: the engine's mean inter-token "
        "latency; configured: the step for the window's own mix of decoding sequences and prompt tokens. The client's: "
        "each request's median gap between tokens, averaged, against the step for c decoding sequences (what a "
        "compare's calibration holds within 10% or leaves the level out for). Cores: "
        "CPU seconds over the window's wall time; the worker's CPU per step is its cores × the measured step: what the "
        "sleep does not remove, the tiny model's forward and vLLM's own work in the worker (inputs, sampling).",
        "",
        markdown_table(["model", "c", "tokens per step", "configured ms", "measured ms", "off",
                        "client: configured ms", "client: measured ms", "client: off", "worker cores",
                        "worker CPU ms per step", "EngineCore cores", "API server cores", "client CPU", "failed"],
                       table),
        "",
        f"- Section wall time {wall_s:.0f} s.",
    ]


def section(ctx: Context) -> SectionResult:
    t0 = time.monotonic()
    rows = measure(ctx.progress, ctx.tmp)
    return SectionResult("gpulike", render(rows, time.monotonic() - t0), {"rows": rows}, verdicts(rows))
