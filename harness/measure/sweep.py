"""Drive one ready deployment through a profile: an unmeasured warmup sweep over every level (compiled
engines), then every level (x repeats), scraping its metric endpoints by the profile's policy, sampling
where every process ran, and writing requests, scrapes and the growing summary to the run folder as it goes."""

from __future__ import annotations

import os
import time

from rich.progress import (
    Progress,
)

from harness.analysis.calibrate import levels_held, more_waves
from harness.analysis.server_metrics import summarise
from harness.analysis.stats import level_stats
from harness.errors import LayerbenchError
from harness.load import eventloop
from harness.load.client import RequestRecord
from harness.load.gpu_telemetry import GpuSampler, telemetry_note
from harness.load.levels import Driver
from harness.load.prompts import PromptGenerator
from harness.load.protocols import CLIENTS
from harness.load.runner import LevelRun
from harness.load.scraper import Scraper
from harness.load.spread import client_for
from harness.load.topology import CoreSampler, engine_binding
from harness.load.workers import WorkerSpec
from harness.measure.profiled import profile_levels
from harness.measure.run import Run, Windows
from harness.measure.split import Split
from harness.results import RunWriter
from harness.schemas import (
    Dist,
    LevelSummary,
    RunSummary,
    level_text,
)
from stacks.base import MODEL_DIR, Stack


def measure(stack: Stack, run: Run, summary: RunSummary, at: Windows | None = None) -> RunSummary:
    """Every level of the run's profile (x its repeats) on the ready deployment, into `summary`. at: where the
    windows go (harness.measure.run.Windows: levels measured before, a load pod's shard, a later pair's numbering,
    a GPU-like engine's calibration from its warmup sweep, harness.analysis.calibrate)."""
    profile, writer, at = run.profile, run.writer, at or Windows()
    sweep = SweepRun(stack, run, summary, at)
    reps = range(at.first_repeat, at.first_repeat + run.n_repeats())
    writer.write_meta(phase=f"{summary.label}: starting the metric scraper and core sampler")
    try:
        with sweep.scraper, sweep.sampler, sweep.gpus, sweep.split, run.out.bars() as progress:
            sweep.start(progress, [(rep, c) for rep in reps for c in profile.levels() if (rep, c) not in at.skip])
            if summary.warmup_sweep:  # a compiled engine meets every batch shape before anything is measured
                sweep.warmup_sweep()
            for rep in reps:
                for c in sweep.levels:
                    if (rep, c) not in at.skip:
                        sweep.level(rep, c, len(reps), at.first_repeat)
            if at.profiled(summary):  # after every judged window: each level once more, every process sampled
                profile_levels(sweep)
    except KeyboardInterrupt:  # wherever it lands: the summary says where the sweep stopped
        summary.stopped = f"interrupted by Ctrl-C / SIGTERM at {sweep.where}"
        save(writer, summary)
        raise
    sweep.finish()
    return summary


def whose_tokenizer(stack: Stack) -> str:
    """Whose tokenizer.json the stack's model_path holds: the served model's where the stack serves from there or
    was pointed at the served model's files (an endpoint's --opt tokenizer), else the generated tiny model's."""
    if stack.loads_model or stack.settings.model_path != MODEL_DIR:
        return "the served model's"
    if stack.kind == "endpoint":
        return "the tiny model's, not the server's own unless it serves the tiny model: --opt tokenizer=DIR names it"
    return "the tiny model's"


class SweepRun:
    """One side's sweep in progress: what it sends with, what watches it, and what it has written so far."""

    def __init__(self, stack: Stack, run: Run, summary: RunSummary, at: Windows):
        profile, writer, shard = run.profile, run.writer, at.shard
        self.stack, self.profile, self.writer, self.summary = stack, profile, writer, summary
        self.invocation, self.shard, self.pair, self.calibrate = run.invocation, shard, at.pair, at.calibrate
        ep = stack.endpoint()
        tok = stack.settings.model_path / "tokenizer.json"
        key = f"pod{shard.index}" if shard else ""  # never the side: both send the same requests
        gen = PromptGenerator.for_profile(writer.run_id, key, profile, tok if tok.exists() else None)
        client = client_for(CLIENTS, (ep.base_url, ep.model, ep.protocol), (ep.spread, ep.spread_by), api=profile.api,
                            ignore_eos=profile.ignore_eos, timeout_s=profile.request_timeout_s)
        client.keep_text = profile.sessions is not None
        client.keep_headers = tuple(stack.layer_headers())
        seed = profile.seed if profile.seed is not None else writer.run_id  # both sides: the same arrivals
        if shard is not None:  # each pod a Poisson stream of rate/N with a seed of its own: together, the level's
            seed = f"{seed}:pod{shard.index}"
        self.driver = Driver(client, gen, profile, seed, shard, stack.dead if stack.cheap_liveness else None)
        self.split = Split(WorkerSpec(ep.base_url, ep.model, ep.protocol, profile.model_dump(mode="json"), str(seed),
                                      writer.run_id, key, str(tok) if tok.exists() else None, str(writer.dir),
                                      client.keep_headers, tuple(ep.spread), ep.spread_by),
                           profile.client_procs if shard is None else 1, self.driver, writer)
        self.levels = profile.levels()
        self.scraper = Scraper(stack.metric_endpoints(), profile.scrape_interval_s, writer.dir / "scrapes.jsonl",
                               tags={"label": summary.label}, policy=profile.scrape)
        self.sampler = CoreSampler([os.getpid()], writer.dir / f"cores-{summary.label}.raw.json")
        self.gpus = GpuSampler(stack.settings.devices, writer.dir / f"gpu-{summary.label}.jsonl")
        summary.scrape_policy, summary.warmup_sweep = profile.scrape, profile.warms_every_level()
        summary.shared_prefix = any(x is not None for x in (profile.prefix, profile.sessions, profile.trace))  # meant
        summary.gpu_telemetry, summary.devices = telemetry_note(stack.settings.devices), list(stack.settings.devices)
        summary.tokenizer = gen.counted_with(whose_tokenizer(stack))
        self.labels: dict[int, str] = {os.getpid(): "load client"}
        self.waves: dict[int, list[RequestRecord]] = {}  # calibrate: each level's calibration waves
        self.current = 0.0  # the level being measured (its whole, where this process sends a part of it)
        self.where = "the start"
        self.scrape_ms: list[float] = []
        self.before = (summary.scrapes, summary.scrape_gaps, dict(summary.scrape_gap_reasons))  # earlier invocations
        self.failed = self.finished = 0
        self.attempt = 0  # an interleaved compare's window measured again: its records say which try they are

    def on_record(self, rec: RequestRecord) -> None:
        if self.calibrate and rec.phase == "warmup-sweep":
            self.waves.setdefault(rec.level, []).append(rec)
        d = self._tagged(rec.to_json())
        if self.split.n > 1:
            d["worker"] = 0
        if self.shard is not None:
            d["part_of"], d["pod"] = self.current, self.shard.index
        self.writer.request(d)

    def on_worker_record(self, d: dict) -> None:
        """A record another client process measured and wrote to its own file, into the run's requests.jsonl."""
        self.writer.request(self._tagged(d))

    def _tagged(self, d: dict) -> dict:
        """A record as requests.jsonl keeps it: which side, invocation and (interleaved) try measured it."""
        d["label"], d["invocation"] = self.summary.label, self.invocation
        if self.attempt:
            d["attempt"] = self.attempt
        return d

    def start(self, progress: Progress, planned: list[tuple[int, float]]) -> None:
        """The whole side in one bar, with its ETA and the requests failed so far: a run going wrong shows early."""
        self.progress, self.planned = progress, planned
        self.total = sum(self.profile.requests_for(c) for _, c in planned)
        self.overall = progress.add_task(f"{self.summary.label} {self.stack.kind} overall", errors="", total=self.total)
        if self.scraper.pid:
            self.labels[self.scraper.pid] = "scraper"
        if self.gpus.pid:
            self.labels[self.gpus.pid] = "GPU sampler"

    def warmup_sweep(self) -> None:
        s = self.summary
        self.writer.write_meta(phase=f"{s.label}: warmup sweep")
        task = self.progress.add_task(f"{s.label} {self.stack.kind} warmup sweep", total=len(self.levels), errors="")
        for c in self.levels:
            self.where, self.current = f"the warmup sweep, {level_text(c, self.profile.open_loop)}", c
            if self.shard is not None:
                self.shard.sync(f"warmup {c}")
            why = eventloop.run(self.driver.warm(c, self.on_record))
            if self._calibrating():  # the level's first wave met its batch shapes (a compiled engine compiles
                # them there, and a c=1 request read a 43 ms stall and tokens bunched after it): not the step
                self.waves.pop(c, None)
                waves, t0 = 0, time.monotonic()
                while not why and more_waves(self.profile.engine.step, int(c), self.waves.get(c, []), waves,
                                             time.monotonic() - t0):
                    why, waves = eventloop.run(self.driver.warm(c, self.on_record)), waves + 1
            if why:
                s.stopped = f"warmup sweep at {level_text(c, self.profile.open_loop)}: {why}"
                save(self.writer, s)
                raise LayerbenchError(f"{s.label} {self.stack.kind} stopped during the warmup sweep: {why}")
            self.progress.advance(task)
        # the calibration reads each closed-loop level's wave as c sequences decoding at once; an open-loop level
        # (a rate, a trace's replay) holds no fixed batch, and its windows' step check says what the host held
        # (harness.analysis.emulation). A GPU-like compare of a rate or a trace stopped here with a level of 2.59
        if self._calibrating():
            self._calibrated()

    def _calibrating(self) -> bool:
        return self.calibrate and self.profile.engine.step is not None and not self.profile.open_loop

    def _calibrated(self) -> None:
        """Only the levels whose emulated step this host held in the warmup sweep are measured."""
        assert self.profile.engine.step is not None
        cal = self.summary.calibration = levels_held(self.profile.engine.step, self.waves)
        self.levels = [c for c in self.levels if c in cal.kept]
        if not self.levels:
            save(self.writer, self.summary)
            raise LayerbenchError(f"this host cannot emulate the GPU-like step at any level: {cal.text()}")
        self.total = sum(self.profile.requests_for(c) for _, c in self.planned if c in self.levels)
        self.progress.update(self.overall, total=self.total)

    def level(self, rep: int, c: float, n_repeats: int, first_repeat: int) -> None:
        """One measured window, its figures added to the summary and written at once."""
        s, progress, n = self.summary, self.progress, self.driver.requests(c)
        self.where = level_text(c, self.profile.open_loop) + (f" pair {self.pair + 1}" if self.pair else "") + (
            f" rep {rep - first_repeat + 1}/{n_repeats}" if n_repeats > 1 else "")
        self.current = c
        if self.shard is not None:
            self.shard.sync(f"level {rep} {c}")
        self.writer.write_meta(phase=f"{s.label}: {self.where}")
        split = self.split.begin(c, rep)
        task = progress.add_task(f"{s.label} {self.stack.kind} {self.where}", total=n, errors="")
        done, window = [0], [0.0]

        def advance(rec: RequestRecord) -> None:
            # a level may outrun its request count (min_duration_s): grow the bar instead of overflowing
            done[0] += 1
            progress.update(task, completed=done[0], total=max(done[0], n))
            self.failed += not rec.ok
            self.finished += 1
            progress.update(self.overall, completed=self.finished, total=max(self.total, self.finished),
                            errors=f"[red]{self.failed} failed[/]" if self.failed else "0 failed")

        def opened() -> None:
            self.scraper.mark(c, "start")
            window[0] = time.monotonic()
            split.open()  # every client process opens its window now

        self.scraper.level = c
        run = eventloop.run(self.driver.measure(c, rep, self.on_record, advance, self.stack.process_cpu, opened))
        run = split.end(run, self.on_worker_record, opened=window[0] > 0)
        closed = time.monotonic()
        if not run.aborted:
            self.scraper.mark(c, "end")
        self.scraper.level = None
        progress.update(task, total=len(run.records), completed=len(run.records))
        self._record(rep, c, run, window[0], closed)

    def _record(self, rep: int, c: float, run: LevelRun, opened: float, closed: float) -> None:
        s, stack = self.summary, self.stack
        self.labels.update({pid: label for pid, (label, _) in stack.process_cpu().items()})
        level_scrapes = [x for x in self.scraper.new_scrapes() if x["level"] == c]
        self.scrape_ms += [x["dur_ms"] for x in level_scrapes if x.get("dur_ms") is not None]
        gone = stack.dead()
        # dead after a level whose requests failed to reach it (or, behind a layer that outlives its engine, were
        # answered with errors): it died during the level, faster than the watch looks (0.25 s); a level whose
        # every request succeeded was whole
        cut = gone and any(r["error"] in ("connect", "disconnect", "server_error")
                           or str(r["error"]).startswith("http_5") for r in run.records)
        if run.records:
            records = [RequestRecord.from_json(r) for r in run.records]
            stats = level_stats(records, 0, self.profile.slo, repeat=rep, rate=c) if self.profile.open_loop \
                else level_stats(records, int(c), self.profile.slo, repeat=rep)
            s.add(LevelSummary(stats=stats, client=run.client, process_cpu_s=run.process_cpu_s, window_s=run.window_s,
                               server=summarise(level_scrapes, stack.metric_aliases(), stack.layer_metrics(),
                                                run.window_s),
                               incomplete=run.aborted or (f"deployment died: {gone}" if cut else None),
                               invocation=self.invocation, sent=run.sent, gpu=self.gpus.window(opened, closed),
                               part_of=c if self.shard is not None else None, pair=self.pair,
                               workers=self.split.healths, layer_headers=header_dists(run.records)))
        self.count_scrapes()
        why = run.aborted or gone
        if why:
            s.stopped = f"{self.where}: {why}"
        save(self.writer, s)
        if why:  # measured so far is on disk; stop and say so
            raise LayerbenchError(f"{s.label} {stack.kind} stopped at {self.where}: {why}")

    def save(self) -> None:
        save(self.writer, self.summary)

    def count_scrapes(self) -> None:
        s, sc, (n, gaps, reasons) = self.summary, self.scraper, self.before
        s.scrapes, s.scrape_gaps = n + sc.count, gaps + sc.gaps
        s.scrape_gap_reasons = {k: reasons.get(k, 0) + sc.gap_reasons.get(k, 0) for k in {*reasons, *sc.gap_reasons}}
        s.scrape_ms = Dist.of(self.scrape_ms)

    def finish(self) -> None:
        """Where every process ran and the engine's thread binding: a resumed compare reads this back."""
        s = self.summary
        s.cores, s.sampler_cpu_pct = self.sampler.result(self.labels), self.sampler.self_cpu_pct()
        self.sampler.out_path.unlink(missing_ok=True)
        if s.gpu_telemetry and not s.gpu_telemetry.startswith("no GPU telemetry") and (dcgm := self.gpus.dcgm()):
            s.gpu_telemetry = f"{s.gpu_telemetry}; {dcgm}"
        for path in self.stack.log_locations().values():
            if path.exists() and (found := engine_binding(path.read_text(errors="replace"))):
                s.engine_binding = found
                break
        self.scraper.new_scrapes()
        self.count_scrapes()
        save(self.writer, s)


def header_dists(records: list[dict]) -> dict[str, Dist]:
    """Each kept response header's numbers over the level's successful requests (a value that is not a number,
    such as LiteLLM's "None" where it had no figure yet, is left out)."""
    values: dict[str, list[float]] = {}
    for r in records:
        if r.get("ok"):
            for k, v in (r.get("headers") or {}).items():
                try:
                    values.setdefault(k, []).append(float(v))
                except ValueError:
                    continue
    return {k: Dist.of(xs) for k, xs in values.items() if xs}


def summary_file(label: str, stack: str) -> str:
    """A compare's sides are `summary-baseline.json` and `summary-stack.json`; a single run's `summary.json`."""
    return f"summary-{label}.json" if label != stack else "summary.json"


def save(writer: RunWriter, summary: RunSummary) -> None:
    writer.write_json(summary_file(summary.label, summary.stack), summary.model_dump())
