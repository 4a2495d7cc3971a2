"""`make soak`: the reference engine at c=64 for a long time (10 minutes; 60 s in CI) with faults injected on
a schedule: HTTP 500s, 429s, streams cut mid-way, a slow /metrics, /metrics answering 500 or garbage, and one
engine crash and restart. It proves what a long benchmark needs: every request sent is recorded (on disk,
whole), failures are classified, metric gaps are counted by reason, and the client's memory stays flat
(records go to disk as they end; none are kept in memory)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
from pydantic import BaseModel
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from harness.load import eventloop
from harness.load.client import StreamClient
from harness.load.prompts import PromptGenerator
from harness.load.runner import Phase, Sender, drive
from harness.load.scraper import Scraper
from harness.results import RunWriter, new_run_id, read_jsonl
from harness.signals import shielded
from stacks.base import DeploySettings, get_stack

# (start as a share of the duration, what changes); the engine restart starts fresh without faults.
SCHEDULE: list[tuple[float, str, dict]] = [
    (0.10, "HTTP 500 on 5% of requests", {"fail_500": 0.05}),
    (0.20, "HTTP 429 on 5% of requests", {"fail_500": 0.0, "fail_429": 0.05}),
    (0.30, "5% of streams cut mid-way", {"fail_429": 0.0, "cut_stream": 0.05}),
    (0.40, "/metrics answers after 3 s (longer than the scrape timeout)", {"cut_stream": 0.0,
                                                                           "metrics_delay_ms": 3000}),
    (0.50, "/metrics answers HTTP 500 every 2nd time", {"metrics_delay_ms": 0, "metrics_fault": "500",
                                                        "metrics_fault_every": 2}),
    (0.60, "engine killed (SIGKILL to its process group) and restarted", {}),
    (0.70, "/metrics answers garbage every 2nd time", {"metrics_fault": "garbage", "metrics_fault_every": 2}),
    (0.80, "no faults", {"metrics_fault": "none"}),
]
EXPECTED_ERRORS = ("http_500", "http_429", "disconnect")
EXPECTED_GAPS = ("timeout", "http 500", "unparsable")
MEMORY_SAMPLE_S = 5.0
MEMORY_GROWTH_LIMIT_MB = 32.0  # from the first sample after warm-up to the end


class SoakResult(BaseModel):
    run_id: str
    duration_s: float
    concurrency: int
    sent: int
    recorded: int  # records the load loop handed to the writer
    on_disk: int  # whole lines read back from requests.jsonl
    ok: int
    failed_by_class: dict[str, int]
    gaps_by_reason: dict[str, int]
    scrapes: int
    restarts: int
    ok_after_restart: int
    events: list[str]  # the schedule as applied, with times
    memory_mb: list[tuple[float, float]]  # (seconds since start, client RSS MB)
    problems: list[str] = []

    @property
    def passed(self) -> bool:
        return not self.problems


def _schedule(stack, duration_s: float, t0: float, stop: threading.Event, events: list[str],
              restarts: list[float]) -> None:
    """Runs in a thread: fault switches are HTTP calls, the restart blocks for a second or two."""
    for share, what, change in SCHEDULE:
        if stop.wait(max(0.0, t0 + share * duration_s - time.monotonic())):
            return
        at = time.monotonic() - t0
        try:
            if change:
                httpx.post(f"{stack.endpoint().base_url}/sim/faults", json=change, timeout=5).raise_for_status()
            elif not stop.is_set():  # never start an engine after the soak has begun its teardown
                stack.crash_and_restart(timeout=20)
                restarts.append(time.monotonic() - t0)
            events.append(f"{at:.0f} s: {what}")
        except Exception as e:  # noqa: BLE001 (a failed injection is reported, the soak goes on)
            events.append(f"{at:.0f} s: {what} FAILED: {type(e).__name__}: {e}")


@dataclass(frozen=True)
class _Load:
    """What the soak sends, and what it keeps as it goes: each outcome's count, the client's memory over time."""

    client: StreamClient
    gen: PromptGenerator
    c: int
    duration_s: float
    writer: RunWriter
    counts: dict[str, int]
    memory: list[tuple[float, float]]


async def _load(load: _Load, progress: Progress, task) -> tuple:  # noqa: ANN001 (a rich task id)
    client, gen, c, duration_s, writer = load.client, load.gen, load.c, load.duration_s, load.writer
    counts, memory = load.counts, load.memory
    proc = psutil.Process()
    t0 = time.monotonic()

    def on_record(rec) -> None:
        counts[rec.error or "ok"] = counts.get(rec.error or "ok", 0) + 1
        writer.request({**rec.to_json(), "label": "soak", "t_s": round(time.monotonic() - t0, 3)})

    async def sample() -> None:
        while True:
            memory.append((round(time.monotonic() - t0, 1), round(proc.memory_info().rss / 2**20, 1)))
            progress.update(task, completed=min(duration_s, time.monotonic() - t0))
            await asyncio.sleep(MEMORY_SAMPLE_S)

    sampler = asyncio.create_task(sample())
    conns = [client.connection() for _ in range(c)]
    try:
        flow = await drive(Sender(client, gen), Phase(c, 0, "measure", keep=False), 0, duration_s, conns, on_record)
    finally:
        sampler.cancel()
        for conn in conns:
            conn.close()
    memory.append((round(time.monotonic() - t0, 1), round(proc.memory_info().rss / 2**20, 1)))
    return flow.sent, flow.recorded, flow.abort


def run_soak(duration_s: float, concurrency: int, results: Path, out_dir: Path,
             console: Console) -> tuple[SoakResult, Path]:
    run_id = new_run_id("soak")
    writer = RunWriter(run_id, results, meta={"command": "soak", "stack": "sim", "pid": os.getpid(),
                                              "duration_s": duration_s, "concurrency": concurrency})
    settings = DeploySettings(log_dir=writer.dir / "logs", options={"ttft_ms": 50, "itl_ms": 10})
    interval = min(2.0, max(0.5, duration_s / 60))  # >= 6 scrapes in every phase of a short soak
    counts: dict[str, int] = {}
    memory: list[tuple[float, float]] = []
    events: list[str] = []
    restarts: list[float] = []
    status, reason = "failed", None
    try:
        with get_stack("sim")(settings) as stack:
            stack.deploy()
            stack.wait_ready(60)
            ep = stack.endpoint()
            client = StreamClient(ep.base_url, ep.model, max_tokens=32, timeout_s=30)
            gen = PromptGenerator(run_id, "soak", 64)
            stop = threading.Event()
            with Scraper(stack.metric_endpoints(), interval, writer.dir / "scrapes.jsonl", {"label": "soak"},
                         policy="interval") as scraper, Progress(
                    TextColumn("[bold]soak c={task.fields[c]}"), BarColumn(), TimeElapsedColumn(),
                    console=console) as progress:
                task = progress.add_task("soak", total=duration_s, c=concurrency)
                t0 = time.monotonic()
                injector = threading.Thread(target=_schedule, args=(stack, duration_s, t0, stop, events, restarts),
                                            daemon=True)
                injector.start()
                try:
                    load = _Load(client, gen, concurrency, duration_s, writer, counts, memory)
                    sent, recorded, abort = eventloop.run(_load(load, progress, task))
                finally:
                    stop.set()
                    with shielded("stopping the fault injector"):  # it may be restarting the engine
                        injector.join()
                scraper.new_scrapes()
        status = "complete"
    except KeyboardInterrupt:
        status, reason = "interrupted", "interrupted by the user"
        raise
    finally:
        writer.finish(status, reason)
    lines = read_jsonl(writer.dir / "requests.jsonl")
    after = restarts[0] if restarts else float("inf")
    result = SoakResult(
        run_id=run_id, duration_s=duration_s, concurrency=concurrency, sent=sent, recorded=recorded,
        on_disk=len(lines), ok=counts.get("ok", 0), failed_by_class={k: v for k, v in sorted(counts.items())
                                                                      if k != "ok"},
        gaps_by_reason=dict(sorted(scraper.gap_reasons.items())), scrapes=scraper.count, restarts=len(restarts),
        ok_after_restart=sum(1 for r in lines if r["ok"] and r["t_s"] > after), events=events, memory_mb=memory)
    result.problems = _problems(result, abort)
    return result, write_soak_report(result, out_dir)


def _problems(r: SoakResult, abort: str | None) -> list[str]:
    out = []
    if not (r.sent == r.recorded == r.on_disk):
        out.append(f"sent {r.sent}, recorded {r.recorded}, on disk {r.on_disk}: records were lost")
    if abort:
        out.append(f"the load stopped early: {abort}")
    out += [f"injected fault never seen: requests failing with {k}" for k in EXPECTED_ERRORS
            if not r.failed_by_class.get(k)]
    out += [f"injected fault never seen: metric gaps by {k}" for k in EXPECTED_GAPS if not r.gaps_by_reason.get(k)]
    if r.restarts != 1 or not r.ok_after_restart:
        out.append(f"engine restarts {r.restarts}, successful requests after it {r.ok_after_restart}")
    if len(r.memory_mb) >= 3:
        growth = r.memory_mb[-1][1] - r.memory_mb[1][1]
        if growth > MEMORY_GROWTH_LIMIT_MB:
            out.append(f"client memory grew {growth:.0f} MB (> {MEMORY_GROWTH_LIMIT_MB:.0f} MB) after warm-up")
    return out


def write_soak_report(r: SoakResult, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "soak.json").write_text(json.dumps(r.model_dump(), indent=2))
    mem = r.memory_mb
    lines = [f"# layerbench soak {r.run_id}", "",
             f"- reference engine at c={r.concurrency} for {r.duration_s:.0f} s: "
             f"**{'passed' if r.passed else 'FAILED'}**",
             f"- requests sent {r.sent}, recorded {r.recorded}, whole lines on disk {r.on_disk}, "
             f"lost {r.sent - r.on_disk}",
             f"- succeeded {r.ok}; failed by class: " + (", ".join(f"{k} {v}" for k, v in r.failed_by_class.items())
                                                         or "none"),
             f"- metric scrapes {r.scrapes}; gaps by reason: " + (", ".join(
                 f"{k} {v}" for k, v in r.gaps_by_reason.items()) or "none"),
             f"- engine restarts {r.restarts}; successful requests after the restart {r.ok_after_restart}",
             f"- client memory (RSS): start {mem[0][1]:.0f} MB, after warm-up {mem[min(1, len(mem) - 1)][1]:.0f} MB, "
             f"end {mem[-1][1]:.0f} MB, peak {max(m for _, m in mem):.0f} MB" if mem else "- client memory: —",
             "", "## Fault schedule as applied", "", *[f"- {e}" for e in r.events], ""]
    if r.problems:
        lines += ["## Problems", "", *[f"- {p}" for p in r.problems], ""]
    lines += ["## Client memory over time", "", "| s | RSS MB |", "|---|---|",
              *[f"| {t:.0f} | {m:.1f} |" for t, m in mem], ""]
    path = out_dir / "soak.md"
    path.write_text("\n".join(lines))
    return path
