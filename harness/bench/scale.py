"""Scale section: what the client can do when one process is not enough.

- Processes: layerbench's client with 1 and 2 processes (profile `client_procs`) at c=64 against a reference
  engine that itself serves from several processes (SO_REUSEPORT), so the engine is not the limit. CPU per event
  is all client processes' CPU over the events, by the difference of two run sizes (fixed costs cancel), and the
  event rate each run streamed. On a host with two cores free for the client the second process should nearly
  double the rate; on the 2-core CPU host, where client and engine share both cores, it can only show that the
  split costs no more per event.
- Accuracy in 2 processes: the first-event delivery (client arrival minus the engine's own send, one clock)
  of the split client minus the floor's, against a one-process engine whose log holds every request.
- Pacing: open-loop levels at 500, 1,000 and 2,000 req/s (Poisson): each request's scheduling delay (its due time
  to its task starting) at p50 and p99, and the achieved against the scheduled rate.

Each figure is the median over rounds with its range."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from harness.bench.accuracy import delivery
from harness.bench.clients import RUNNERS, TTFT_MS, ClientRun, own_cpu_s, reset, rotated, sim_stack, stats
from harness.bench.figures import Figure, Invalid, Spread, Verdict, at_least, at_most, positive, ratio
from harness.bench.render import markdown_table, spread
from harness.bench.section import Context, SectionResult
from harness.errors import LayerbenchError
from harness.load import eventloop
from harness.load.client import RequestRecord, StreamClient
from harness.load.levels import Driver
from harness.load.openloop import RatePlan, run_rate_level
from harness.load.prompts import PromptGenerator
from harness.load.runner import Sender
from harness.load.workers import WorkerSpec
from harness.measure.split import Split
from harness.profile.schema import LoadProfile
from harness.results import new_run_id

ITL_MS, TOKENS, CONCURRENCY = 5.0, 64, 64
SIZES = (128, 768)
PROCS = (1, 2)
OTHERS = ("floor", "vllm bench serve")  # in the same rounds, against the same engine
RATES = (500.0, 1000.0, 2000.0)
PACING_S = 2.0
ROUNDS = 3
ENGINE_PROCESSES = max(2, min(8, (os.cpu_count() or 2) // 2))


def _usage(split: Split) -> tuple[float, int]:
    """(CPU seconds, wake-ups) of every client process: this one and the split's workers. A wake-up is a voluntary
    context switch of the process's main thread, where its event loop runs: the loop slept in epoll and an event
    woke it."""
    cpu, wakes = own_cpu_s(), psutil.Process().num_ctx_switches().voluntary
    for pid in split.pool.pids if split.pool else []:
        try:
            p = psutil.Process(pid)
            t = p.cpu_times()
            cpu += t.user + t.system
            wakes += p.num_ctx_switches().voluntary
        except psutil.Error:
            pass
    return cpu, wakes


def run_procs(url: str, procs: int, n: int, tmp: Path) -> tuple[float, int, float, int]:
    """(client CPU seconds of every process, events, window seconds, wake-ups) of one closed-loop level in
    `procs`."""
    cpu, wakes, run = _level_in(url, procs, n, tmp)
    return cpu, sum(len(r["event_ms"]) for r in run.records), run.window_s, wakes


def _level_in(url: str, procs: int, n: int, tmp: Path, on_open=None):
    """One closed-loop level of layerbench's client split over `procs` processes: (their CPU seconds, their
    wake-ups, the run)."""
    profile = LoadProfile(name="bench-scale", concurrency=[CONCURRENCY], requests=n, requests_per_concurrency=0,
                          output_tokens=TOKENS, input_tokens=32, warmup_waves=1, client_procs=procs, ignore_eos=True)
    run_id = new_run_id("bench")
    driver = Driver(StreamClient(url, "tiny", max_tokens=TOKENS, ignore_eos=True, timeout_s=120),
                    PromptGenerator(run_id, "bench", 32), profile, run_id)
    spec = WorkerSpec(url, "tiny", "openai", profile.model_dump(mode="json"), run_id, run_id, "bench", None, str(tmp))
    with Split(spec, procs, driver, None) as split:
        split.begin(CONCURRENCY, 0)  # the workers are up and imported once they meet here
        cpu0, wakes0 = _usage(split)

        def opened() -> None:
            if on_open is not None:
                on_open()  # before any process's window opens (the engine's statistics reset)
            split.open()

        run = eventloop.run(driver.measure(CONCURRENCY, 0, lambda r: None, lambda r: None, None, opened))
        run = split.end(run, lambda d: None, opened=True)
        cpu1, wakes1 = _usage(split)
    bad = [r for r in run.records if not r["ok"]]
    if bad or run.sent != len(run.records):
        raise LayerbenchError(f"scale: {len(bad)} failed, {run.sent} sent against {len(run.records)} recorded")
    return cpu1 - cpu0, wakes1 - wakes0, run


def measure_accuracy(ctx: Context, rounds: int) -> dict[str, list[float]]:
    """Per round, the first-event delivery's p50 and p99 (client arrival minus the engine's send) of layerbench in
    2 processes minus the floor's, against a one-process engine whose log holds every send."""
    out: dict[str, list[float]] = {"p50_ms": [], "p99_ms": []}
    task = ctx.progress.add_task("scale: TTFT accuracy in 2 processes", total=rounds * 2)
    n = 12 * CONCURRENCY
    with sim_stack(ctx.tmp, ttft_ms=TTFT_MS, itl_ms=10.0) as sim:
        url = sim.endpoint().base_url
        for k in range(rounds):
            runs = {}
            for name in rotated(("floor", "2"), k):
                if name == "floor":
                    runs[name] = RUNNERS["floor"](url, CONCURRENCY, n, TOKENS)
                else:
                    _, _, run = _level_in(url, 2, n, ctx.tmp, on_open=lambda: reset(url))
                    ok = [r for r in run.records if r["ok"]]
                    runs[name] = ClientRun("layerbench, 2 processes", CONCURRENCY, [r["ttft_ms"] for r in ok], [], [],
                                           0, run.window_s, stats(url), 0.0,
                                           [r["t_start_ns"] + r["ttft_ms"] * 1e6 for r in ok])
                ctx.progress.advance(task)
            for p in (50, 99):
                lb, fl = delivery(runs["2"], p), delivery(runs["floor"], p)
                out[f"p{p}_ms"].append(lb - fl if lb is not None and fl is not None else float("nan"))
    return out


def _runner(name: str, url: str, n: int, tmp: Path) -> tuple[float, int, float, int | None]:
    if name in OTHERS:
        run = RUNNERS[name](url, CONCURRENCY, n, TOKENS)
        return run.cpu_s, run.events, run.wall_s, None
    return run_procs(url, int(name), n, tmp)


def measure_procs(ctx: Context, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per client (1 and 2 layerbench processes, the floor, `vllm bench serve`), in rotated order each round."""
    names = tuple(str(p) for p in PROCS) + OTHERS
    out = {name: {"us_per_event": [], "events_per_s": [], "events_per_wake": [], "us_per_wake": []}
           for name in names}
    task = ctx.progress.add_task("scale: client processes", total=rounds * len(names) * len(SIZES))
    with sim_stack(ctx.tmp, ttft_ms=TTFT_MS, itl_ms=ITL_MS, processes=ENGINE_PROCESSES) as sim:
        url = sim.endpoint().base_url
        for k in range(rounds):
            for name in rotated(names, k):
                try:
                    got = {n: _runner(name, url, n, ctx.tmp) for n in SIZES}
                except LayerbenchError:  # `vllm bench serve` without the engine environment
                    got = {n: (0.0, 0, 0.0, None) for n in SIZES}
                ctx.progress.advance(task, len(SIZES))
                (c1, e1, _, w1), (c2, e2, t2, w2) = got[SIZES[0]], got[SIZES[1]]
                out[name]["us_per_event"].append((c2 - c1) / (e2 - e1) * 1e6 if e2 > e1 else float("nan"))
                out[name]["events_per_s"].append(e2 / t2 if t2 else float("nan"))
                if w1 is not None and w2 is not None and w2 > w1:
                    out[name]["events_per_wake"].append((e2 - e1) / (w2 - w1))
                    out[name]["us_per_wake"].append((c2 - c1) / (w2 - w1) * 1e6)
    return out


def measure_pacing(ctx: Context, rounds: int) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {f"{r:g}": {"p50_ms": [], "p99_ms": [], "achieved": []} for r in RATES}
    task = ctx.progress.add_task("scale: open-loop pacing", total=rounds * len(RATES))
    with sim_stack(ctx.tmp, ttft_ms=2.0, itl_ms=1.0) as sim:
        url = sim.endpoint().base_url
        client = StreamClient(url, "tiny", max_tokens=2, ignore_eos=True, timeout_s=60)
        for k in range(rounds):
            for rate in RATES:
                n = int(rate * PACING_S)
                sender = Sender(client, PromptGenerator(new_run_id("pace"), "pace", 16))
                run = eventloop.run(run_rate_level(sender, RatePlan(rate, n, repeat=k, seed=k)))
                recs = [RequestRecord.from_json(r) for r in run.records]
                delays = sorted(r.dispatch_delay_ms for r in recs)
                span = (max(r.t_task_ns for r in recs) - min(r.t_due_ns for r in recs)) / 1e9
                due = (max(r.t_due_ns for r in recs) - min(r.t_due_ns for r in recs)) / 1e9
                out[f"{rate:g}"]["p50_ms"].append(delays[len(delays) // 2])
                out[f"{rate:g}"]["p99_ms"].append(delays[min(len(delays) - 1, int(0.99 * len(delays)))])
                out[f"{rate:g}"]["achieved"].append((due / span) if span > 0 else float("nan"))
                ctx.progress.advance(task)
    return out


def section(ctx: Context) -> SectionResult:
    procs = measure_procs(ctx, ROUNDS)
    accuracy = measure_accuracy(ctx, ROUNDS)
    pacing = measure_pacing(ctx, ROUNDS)
    excess = {p: Spread.of(v) for p, v in accuracy.items()}
    cost: dict[str, Figure] = {p: positive(v["us_per_event"], "CPU per event", "fixed costs did not cancel")
                               for p, v in procs.items()}
    rate: dict[str, Figure] = {p: positive(v["events_per_s"], "events/s", "no events") for p, v in procs.items()}
    verdicts: list[Verdict] = [at_most("client CPU per event, 1 process (µs)", cost["1"], 50.0, " µs"),
                               at_most("CPU per event, 2 processes over 1 (this host: ≤ 1.10×)",
                                       ratio(cost["2"], cost["1"]), 1.10, "×"),
                               at_most("open-loop scheduling delay p99 at 1,000 req/s",
                                       Spread.of(pacing["1000"]["p99_ms"]), 1.0),
                               at_most("TTFT (first-event delivery) p50 excess over the floor, 2 processes",
                                       excess["p50_ms"], 0.5),
                               at_most("TTFT (first-event delivery) p99 excess over the floor, 2 processes",
                                       excess["p99_ms"], 2.0),
                               at_least("events/s per core, 1 process against `vllm bench serve`",
                                        ratio(cost["vllm bench serve"], cost["1"]), 1.5)]
    md = [f"## Scale: client processes and open-loop pacing (c={CONCURRENCY}, {ITL_MS:.0f} ms per token; "
          f"the reference engine in {ENGINE_PROCESSES} processes)", "",
          f"{ROUNDS} rounds. CPU per event counts every client process, by the difference of {SIZES[0]} and "
          f"{SIZES[1]} requests; events/s is the {SIZES[1]}-request window's. *Median (min…max over rounds).*", "",
          markdown_table(["client", "CPU µs per event", "events/s", "events per wake-up", "CPU µs per wake-up"],
                         [[f"layerbench, {p} process(es)" if p not in OTHERS else p, _cell(cost[p], "{:.1f}"),
                           _cell(rate[p], "{:,.0f}"), _wakes(v["events_per_wake"], "{:.2f}"),
                           _wakes(v["us_per_wake"], "{:.1f}")] for p, v in procs.items()]), "",
          "A wake-up is a voluntary context switch of a client process's event-loop thread: it slept in epoll "
          "until a read was ready. CPU per event is CPU per wake-up over events per wake-up: split across "
          "processes, each wakes for its own share of the streams, so fewer events share a wake-up's fixed cost "
          "(the syscalls and, on a virtual machine whose cores the deployment shares, a cold cache after the "
          "deployment ran), and a wake-up costs more where more processes contend for the same cores.",
          "",
          f"TTFT accuracy in 2 processes at c={CONCURRENCY} ({12 * CONCURRENCY} requests, a one-process engine "
          "whose log holds every send): first-event delivery (client arrival minus the engine's send) minus the "
          f"floor's in the same round: p50 {spread(excess['p50_ms'], '{:+.2f} ms'.format, 'median')}, p99 "
          f"{spread(excess['p99_ms'], '{:+.2f} ms'.format, 'median')}.", "",
          f"Open loop, Poisson arrivals, {PACING_S:g} s of schedule per level: scheduling delay (due → the request's "
          "task began) and achieved / scheduled rate.", "",
          markdown_table(["offered req/s", "delay p50 (ms)", "delay p99 (ms)", "achieved / scheduled"],
                         [[r, spread(Spread.of(v["p50_ms"]), "{:.3f}".format, "median"),
                           spread(Spread.of(v["p99_ms"]), "{:.3f}".format, "median"),
                           spread(Spread.of(v["achieved"]), "{:.3f}".format, "median")] for r, v in pacing.items()]),
          ""]
    return SectionResult("scale", md, {"processes": procs, "accuracy_2_processes": accuracy, "pacing": pacing,
                                       "engine_processes": ENGINE_PROCESSES},
                         verdicts)


def _wakes(values: list[float], fmt: str) -> str:
    return spread(Spread.of(values), fmt.format, "median") if values else "—"


def _cell(fig: Figure, fmt: str) -> str:
    return f"invalid: {fig.reason}" if isinstance(fig, Invalid) else spread(fig, fmt.format, "median")
