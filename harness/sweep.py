"""Drive one ready deployment through a profile: an unmeasured warmup sweep over every level (compiled
engines), then every level (x repeats), scraping its metric endpoints by the profile's policy, sampling
where every process ran, and writing requests, scrapes and the growing summary to the run folder as it goes."""

from __future__ import annotations

import asyncio
import os
import time

from pydantic import BaseModel
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from harness.barrier import Shard
from harness.calibrate import Calibration, levels_held
from harness.client import RequestRecord
from harness.errors import LayerbenchError
from harness.gpu_telemetry import GpuSampler, GpuWindow, telemetry_note
from harness.openloop import run_rate_level, warm_open, warmup_requests
from harness.profile import LoadProfile
from harness.prompts import PromptGenerator
from harness.protocols import CLIENTS
from harness.results import RunWriter
from harness.runner import ClientHealth, run_level, warm
from harness.scraper import Scraper
from harness.server_metrics import ServerLevelMetrics, summarise
from harness.stats import Dist, LevelStats, level_stats, level_text
from harness.topology import CoreSampler, ProcessCores, engine_binding
from stacks.base import AppliedConfig, Stack


class LevelSummary(BaseModel):
    stats: LevelStats
    client: ClientHealth
    process_cpu_s: dict[str, float]
    window_s: float
    server: ServerLevelMetrics
    incomplete: str | None = None  # why the level stopped before its end; its figures cover what was sent
    invocation: int = 0  # 0: the first `compare`, n: the n-th `--resume` of it
    sent: int | None = None  # requests the load loop started; each one is a line in requests.jsonl
    part_of: float | None = None  # one load pod's part of the side's level (stacks/k8s load_parallelism)
    gpu: list[GpuWindow] = []  # NVML (and DCGM) per GPU of the deployment over the window; [] without GPUs
    pair: int = 0  # a compare's deployment pair that measured it (0: the first)


class RunSummary(BaseModel):
    run_id: str
    label: str  # "baseline" / "stack" in a compare, the stack name otherwise
    stack: str
    engine_version: str
    applied: AppliedConfig
    profile: str
    status: str = "running"
    levels: list[LevelSummary] = []
    scrapes: int = 0
    scrape_gaps: int = 0
    scrape_gap_reasons: dict[str, int] = {}  # "http 500", "timeout", "connection", "unparsable" -> count
    stopped: str | None = None  # where and why the sweep ended early (died, unreachable, interrupted)
    exposed_ports: list[str] = []  # listening sockets of the deployment beyond loopback
    scrape_policy: str = "interval"
    scrape_ms: Dist = Dist()  # how long the metric endpoints took to answer
    warmup_sweep: bool = False
    # levels by their key (LevelStats.level): concurrencies, or offered rates (req/s) in an open loop
    client_saturated_levels: list[int | float] = []
    client_starved_levels: list[int | float] = []
    not_steady_levels: list[int | float] = []
    off_schedule_levels: list[float] = []  # open loop: the client could not keep to the schedule (stats.off_schedule)
    cores: dict[str, ProcessCores] = {}  # process label -> allowed cores and where its threads ran
    engine_binding: list[str] = []  # the engine's thread binding, from its startup log
    sampler_cpu_pct: float | None = None  # the core sampler's own CPU, % of one core
    layer_notes: dict[str, str] = {}  # the stack's own per-level figures (LevelSummary.server.layer): what each is
    gpu_telemetry: str | None = None  # how the GPU figures were read (None: a host without GPUs)
    devices: list[int] = []  # the GPUs the deployment was given; [] on a host without GPUs
    calibration: Calibration | None = None  # gpu-like: the levels this host held the emulated step at

    @property
    def open_loop(self) -> bool:
        return any(lv.stats.rate is not None for lv in self.levels)

    def add(self, lv: LevelSummary) -> None:
        """Append a measured level and note its troubles by level (concurrency, or rate in an open loop)."""
        self.levels.append(lv)
        c = lv.stats.level
        for flag, where in ((lv.client.saturated, self.client_saturated_levels),
                            (lv.client.starved, self.client_starved_levels),
                            (lv.stats.steady.steady is False, self.not_steady_levels),
                            (lv.stats.off_schedule is not None, self.off_schedule_levels)):
            if flag and c not in where:
                where.append(c)


def measure(stack: Stack, profile: LoadProfile, writer: RunWriter, summary: RunSummary,
            console: Console, repeats: int | None = None, skip: frozenset[tuple[int, float]] = frozenset(),
            invocation: int = 0, shard: Shard | None = None, first_repeat: int = 0, pair: int = 0,
            calibrate: bool = False) -> RunSummary:
    """skip: (repeat, level) pairs already measured by an earlier invocation (`compare --resume`); a level is
    its concurrency, or its rate in an open-loop profile (LevelStats.level). shard: this process's part of a
    side's load (one of several load pods); each record names the level it is part of. first_repeat, pair: a
    compare's later deployment of this side numbers its windows after the earlier ones'. calibrate: a GPU-like
    engine's first deployment finds the levels this host holds the emulated step at (harness.calibrate) from its
    warmup sweep, and measures only those."""
    ep = stack.endpoint()
    tok = stack.settings.model_path / "tokenizer.json"
    part = shard.part if shard else (lambda n: n)
    gen = PromptGenerator(writer.run_id, f"{summary.label}:{stack.kind}" + (f":pod{shard.index}" if shard else ""),
                          profile.input_tokens, tok if tok.exists() else None)
    current = [0.0]  # the level being measured (its whole, where this process sends a part of it)
    client = CLIENTS[ep.protocol](ep.base_url, ep.model, api=profile.api, max_tokens=profile.output_tokens,
                                  ignore_eos=profile.ignore_eos, timeout_s=profile.request_timeout_s)
    first_waves: dict[int, list[RequestRecord]] = {}  # calibrate: each level's warmup wave

    def on_record(rec: RequestRecord) -> None:
        if calibrate and rec.phase == "warmup-sweep":
            first_waves.setdefault(rec.level, []).append(rec)
        d = rec.to_json()
        d["label"], d["invocation"] = summary.label, invocation
        if shard is not None:
            d["part_of"], d["pod"] = current[0], shard.index
        writer.request(d)

    levels = profile.levels()
    open_loop = profile.open_loop
    seed = profile.seed if profile.seed is not None else writer.run_id  # both sides of a compare: the same arrivals
    if shard is not None:  # each pod a Poisson stream of rate/N with a seed of its own: together, the level's
        seed = f"{seed}:pod{shard.index}"
    n_repeats = repeats or profile.repeats
    scraper = Scraper(stack.metric_endpoints(), profile.scrape_interval_s, writer.dir / "scrapes.jsonl",
                      tags={"label": summary.label}, policy=profile.scrape)
    summary.scrape_policy, summary.warmup_sweep = profile.scrape, profile.warms_every_level()
    labels: dict[int, str] = {os.getpid(): "load client"}
    sampler = CoreSampler([os.getpid()], writer.dir / f"cores-{summary.label}.raw.json")
    gpus = GpuSampler(stack.settings.devices, writer.dir / f"gpu-{summary.label}.jsonl")
    summary.gpu_telemetry, summary.devices = telemetry_note(stack.settings.devices), list(stack.settings.devices)
    window = [0.0]  # when the current level's measured window opened (monotonic s)
    scrape_ms: list[float] = []
    before = (summary.scrapes, summary.scrape_gaps, dict(summary.scrape_gap_reasons))  # earlier invocations

    def count_scrapes() -> None:
        summary.scrapes, summary.scrape_gaps = before[0] + scraper.count, before[1] + scraper.gaps
        summary.scrape_gap_reasons = {k: before[2].get(k, 0) + scraper.gap_reasons.get(k, 0)
                                      for k in {*before[2], *scraper.gap_reasons}}

    writer.write_meta(phase=f"{summary.label}: starting the metric scraper and core sampler")
    where = "the start"
    try:
        with scraper, sampler, gpus, Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[errors]}"),
            console=console,
        ) as progress:
            # the whole side in one bar, with its ETA and the requests failed so far: a run going wrong shows early
            reps = range(first_repeat, first_repeat + n_repeats)
            planned = [(rep, c) for rep in reps for c in levels if (rep, c) not in skip]
            total = sum(profile.requests_for(c) for _, c in planned)
            overall = progress.add_task(f"{summary.label} {stack.kind} overall", errors="", total=total)
            failed, finished = [0], [0]
            if scraper.pid:
                labels[scraper.pid] = "scraper"
            if gpus.pid:
                labels[gpus.pid] = "GPU sampler"
            dead = stack.dead if stack.cheap_liveness else None
            if summary.warmup_sweep:  # a compiled engine meets every batch shape before anything is measured
                writer.write_meta(phase=f"{summary.label}: warmup sweep")
                task = progress.add_task(f"{summary.label} {stack.kind} warmup sweep", total=len(levels), errors="")
                for c in levels:
                    where = f"the warmup sweep, {level_text(c, open_loop)}"
                    waves = max(1, profile.warmup_waves)
                    current[0] = c
                    if shard is not None:
                        shard.sync(f"warmup {c}")
                    if open_loop:
                        n_warm = part(warmup_requests(c, waves, profile.requests_for(c)))
                        why = asyncio.run(warm_open(client, gen, c / (shard.count if shard else 1), n_warm,
                                                    profile.arrival, seed, on_record, dead))
                    else:
                        why = asyncio.run(warm(client, gen, part(int(c)), waves, on_record, dead))
                    if why:
                        summary.stopped = f"warmup sweep at {level_text(c, open_loop)}: {why}"
                        _save(writer, summary)
                        raise LayerbenchError(f"{summary.label} {stack.kind} stopped during the warmup sweep: {why}")
                    progress.advance(task)
                if calibrate and profile.engine.step is not None:
                    summary.calibration = levels_held(profile.engine.step, first_waves)
                    levels = [c for c in levels if c in summary.calibration.kept]
                    if not levels:
                        _save(writer, summary)
                        raise LayerbenchError(f"this host cannot emulate the GPU-like step at any level: "
                                              f"{summary.calibration.text()}")
                    total = sum(profile.requests_for(c) for rep in reps for c in levels if (rep, c) not in skip)
                    progress.update(overall, total=total)
            for rep in reps:
                for c in levels:
                    if (rep, c) in skip:
                        continue
                    n = part(profile.requests_for(c))
                    where = level_text(c, open_loop) + (f" pair {pair + 1}" if pair else "") + (
                        f" rep {rep - first_repeat + 1}/{n_repeats}" if n_repeats > 1 else "")
                    current[0] = c
                    if shard is not None:
                        shard.sync(f"level {rep} {c}")
                    writer.write_meta(phase=f"{summary.label}: {where}")
                    task = progress.add_task(f"{summary.label} {stack.kind} {where}", total=n, errors="")
                    done = [0]

                    def advance(rec: RequestRecord, t=task, done=done, n=n) -> None:
                        # a level may outrun its request count (min_duration_s): grow the bar instead of overflowing
                        done[0] += 1
                        progress.update(t, completed=done[0], total=max(done[0], n))
                        if not rec.ok:
                            failed[0] += 1
                        finished[0] += 1
                        progress.update(overall, completed=finished[0], total=max(total, finished[0]),
                                        errors=f"[red]{failed[0]} failed[/]" if failed[0] else "0 failed")

                    scraper.level = c

                    def opened(c=c) -> None:
                        scraper.mark(c, "start")
                        window[0] = time.monotonic()

                    if open_loop:
                        run = asyncio.run(run_rate_level(
                            client, gen, c / (shard.count if shard else 1), n, arrival=profile.arrival, seed=seed,
                            repeat=rep,
                            warmup_waves=profile.warmup_waves, on_record=on_record, on_progress=advance,
                            process_cpu=stack.process_cpu, on_measure_start=opened, dead=dead,
                        ))
                    else:
                        run = asyncio.run(run_level(
                            client, gen, part(int(c)), n, repeat=rep, warmup_waves=profile.warmup_waves,
                            min_duration_s=profile.min_duration_s, on_record=on_record,
                            on_progress=advance, process_cpu=stack.process_cpu,
                            on_measure_start=opened, dead=dead,
                        ))
                    closed = time.monotonic()
                    if not run.aborted:
                        scraper.mark(c, "end")
                    scraper.level = None
                    labels.update({pid: label for pid, (label, _) in stack.process_cpu().items()})
                    level_scrapes = [s for s in scraper.new_scrapes() if s["level"] == c]
                    scrape_ms += [s["dur_ms"] for s in level_scrapes if s.get("dur_ms") is not None]
                    progress.update(task, total=len(run.records), completed=len(run.records))
                    gone = stack.dead()
                    # dead after a level whose requests failed to reach it (or, behind a layer that outlives
                    # its engine, were answered with errors): it died during the level, faster than the watch
                    # looks (0.25 s); a level whose every request succeeded was whole
                    cut = gone and any(r["error"] in ("connect", "disconnect", "server_error")
                                       or str(r["error"]).startswith("http_5") for r in run.records)
                    incomplete = run.aborted or (f"deployment died: {gone}" if cut else None)
                    if run.records:
                        records = [RequestRecord.from_json(r) for r in run.records]
                        if open_loop:
                            stats = level_stats(records, 0, profile.slo, repeat=rep, rate=c)
                        else:
                            stats = level_stats(records, c, profile.slo, repeat=rep)
                        server = summarise(level_scrapes, stack.metric_aliases(), stack.layer_metrics())
                        summary.add(LevelSummary(stats=stats, client=run.client, process_cpu_s=run.process_cpu_s,
                                                 window_s=run.window_s, server=server, incomplete=incomplete,
                                                 invocation=invocation, sent=run.sent,
                                                 gpu=gpus.window(window[0], closed),
                                                 part_of=c if shard is not None else None, pair=pair))
                    count_scrapes()
                    summary.scrape_ms = Dist.of(scrape_ms)
                    why = run.aborted or gone
                    if why:
                        summary.stopped = f"{where}: {why}"
                    _save(writer, summary)
                    if why:  # measured so far is on disk; stop and say so
                        raise LayerbenchError(f"{summary.label} {stack.kind} stopped at {where}: {why}")
    except KeyboardInterrupt:  # wherever it lands: the summary says where the sweep stopped
        summary.stopped = f"interrupted by Ctrl-C / SIGTERM at {where}"
        _save(writer, summary)
        raise
    summary.cores, summary.sampler_cpu_pct = sampler.result(labels), sampler.self_cpu_pct()
    sampler.out_path.unlink(missing_ok=True)
    for path in stack.log_locations().values():
        if path.exists() and (found := engine_binding(path.read_text(errors="replace"))):
            summary.engine_binding = found
            break
    scraper.new_scrapes()
    count_scrapes()
    _save(writer, summary)  # with where every process ran: a resumed compare reads this back
    return summary


def summary_file(label: str, stack: str) -> str:
    """A compare's sides are `summary-baseline.json` and `summary-stack.json`; a single run's `summary.json`."""
    return f"summary-{label}.json" if label != stack else "summary.json"


def _save(writer: RunWriter, summary: RunSummary) -> None:
    writer.write_json(summary_file(summary.label, summary.stack), summary.model_dump())
