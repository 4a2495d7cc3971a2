"""`make bench-harness`: layerbench's own error, measured and published (reports/harness/).

Three clients take turns against the same reference engine in the same run: layerbench's client, a
minimal raw-socket floor (harness/bench/floor.py) and `vllm bench serve` from the engine environment.
- accuracy: measured minus true TTFT / ITL / E2E (p50, p99). "True" is what the server actually did, from
  its own log on the same monotonic clock (GET /sim/stats); the configured timing is shown beside it.
- resolution: the known-overhead proxy (+2 ms per request, +0.2 ms per chunk): the overhead layerbench
  reports against the configured and the executed truth (the proxy's own record of what it held).
- capacity: the highest SSE event rate one client process sustains before its TTFT p50 error (over the floor's)
  grows by 1 ms with load.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
from rich.console import Console
from rich.progress import Progress

from harness.bench.floor import floor_level
from harness.client import StreamClient
from harness.errors import LayerbenchError
from harness.output import markdown_table
from harness.prompts import PromptGenerator, new_run_id
from harness.runner import run_level
from stacks.base import ENGINE_VENV, MODEL_DIR, PROJECT_ROOT, DeploySettings
from stacks.sim import SimProxyStack, SimStack

OUT_DIR = Path("reports/harness")
TTFT_MS, ITL_MS, TOKENS = 50.0, 10.0, 64
ACCURACY_LEVELS = (1, 16, 64)
CAPACITY_ITL_MS = 5.0
CAPACITY_LEVELS = (16, 32, 64, 128, 192, 256)
CLIENTS = ("floor", "layerbench", "vllm bench serve")
REPEATS = 2
RESOLUTION_ROUNDS = 3
EXCESS_LIMIT_MS = 1.0  # a client is past capacity once its excess over the floor grows by this much
SATURATED_MS = 5.0  # the floor's error this far above its lowest-level value: the engine, not a client, is full


@dataclass
class ClientRun:
    client: str
    concurrency: int
    ttft: list[float]
    e2e: list[float]
    itl: list[float]
    events: int
    wall_s: float
    server: dict = field(default_factory=dict)

    def pct(self, name: str, p: float) -> float:
        return float(np.percentile(getattr(self, name), p))

    def err(self, name: str, p: int) -> float:
        """measured pXX minus the server's executed pXX (ms)."""
        return self.pct(name, p) - self.server[name][f"p{p}_ms"]

    @property
    def event_rate(self) -> float:
        return self.events / self.wall_s if self.wall_s else 0.0


def _reset(url: str) -> None:
    httpx.post(f"{url}/sim/reset", timeout=5)


def _stats(url: str) -> dict:
    return httpx.get(f"{url}/sim/stats", timeout=5).json()


def run_layerbench(url: str, c: int, n: int, tokens: int) -> ClientRun:
    client = StreamClient(url, "tiny", max_tokens=tokens, timeout_s=120)
    gen = PromptGenerator(new_run_id("bench"), "bench", 32)
    run = asyncio.run(run_level(client, gen, c, n, on_measure_start=lambda: _reset(url)))
    ok = [r for r in run.records if r["ok"]]
    if len(ok) != len(run.records):
        raise LayerbenchError(f"layerbench client saw {len(run.records) - len(ok)} failures at c={c}")
    return ClientRun("layerbench", c, [r["ttft_ms"] for r in ok], [r["e2e_ms"] for r in ok],
                     [g for r in ok for g in np.diff(r["event_ms"])], sum(len(r["event_ms"]) for r in ok),
                     run.window_s, _stats(url))


def run_floor(url: str, c: int, n: int, tokens: int) -> ClientRun:
    port = int(url.rsplit(":", 1)[1])
    out, wall = asyncio.run(floor_level("127.0.0.1", port, "tiny", c, n, tokens,
                                        on_measure_start=lambda: _reset(url)))
    return ClientRun("floor", c, [o[0] for o in out], [o[2] for o in out],
                     [g for o in out for g in np.diff(o[1])], sum(len(o[1]) for o in out), wall, _stats(url))


def run_vllm_bench(url: str, c: int, n: int, tokens: int) -> ClientRun:
    py = ENGINE_VENV / "bin" / "python"
    if not py.exists():
        raise LayerbenchError("`vllm bench serve` needs the engine environment: run `make setup`")
    with tempfile.TemporaryDirectory() as tmp:
        _reset(url)
        cmd = [str(py), str(PROJECT_ROOT / "scripts" / "vllm_bench_serve.py"), "--backend", "openai",
               "--base-url", url, "--endpoint", "/v1/completions", "--model", "tiny", "--tokenizer",
               str(MODEL_DIR), "--dataset-name", "random", "--random-input-len", "32", "--random-output-len",
               str(tokens), "--num-prompts", str(n), "--max-concurrency", str(c), "--ignore-eos",
               "--num-warmups", "0", "--ready-check-timeout-sec", "0", "--disable-tqdm", "--save-result",
               "--save-detailed", "--result-dir", tmp, "--result-filename", "r.json"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                              env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "VLLM_NO_USAGE_STATS": "1"})
        if proc.returncode != 0:
            raise LayerbenchError(f"vllm bench serve failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        res = json.loads((Path(tmp) / "r.json").read_text())
    if res["failed"]:
        raise LayerbenchError(f"vllm bench serve saw {res['failed']} failures at c={c}")
    return ClientRun("vllm bench serve", c, [t * 1e3 for t in res["ttfts"]], [t * 1e3 for t in res["latencies"]],
                     [g * 1e3 for req in res["itls"] for g in req], sum(len(i) + 1 for i in res["itls"]),
                     res["duration"], _stats(url))


RUNNERS = {"layerbench": run_layerbench, "floor": run_floor, "vllm bench serve": run_vllm_bench}


def sim_stack(tmp: Path, cls=SimStack, **options):
    stack = cls(DeploySettings(log_dir=tmp, options={"max_num_seqs": 1024, **options}))
    stack.deploy()
    stack.wait_ready(30)
    return stack


def accuracy(tmp: Path, progress: Progress) -> list[list[ClientRun]]:
    """Per (level, client): REPEATS runs, clients interleaved so drifting machine state hits all alike."""
    runs: dict[tuple[str, int], list[ClientRun]] = {}
    task = progress.add_task("accuracy", total=len(ACCURACY_LEVELS) * len(CLIENTS) * REPEATS)
    with sim_stack(tmp, ttft_ms=TTFT_MS, itl_ms=ITL_MS) as sim:
        url = sim.endpoint().base_url
        for c in ACCURACY_LEVELS:
            for rep in range(REPEATS):
                for name in CLIENTS:
                    progress.update(task, description=f"accuracy c={c} {name} ({rep + 1}/{REPEATS})")
                    runs.setdefault((name, c), []).append(RUNNERS[name](url, c, max(30, 6 * c), TOKENS))
                    progress.advance(task)
    return list(runs.values())


def mean_err(runs: list[ClientRun], metric: str, p: int) -> float:
    return float(np.mean([r.err(metric, p) for r in runs]))


def resolution(tmp: Path, progress: Progress) -> list[dict]:
    """One sim + proxy deployment; the proxy's delays are switched off and on in place, alternating
    RESOLUTION_ROUNDS times, so drift between deployments cannot pose as overhead. 16 tokens per request."""
    known = {"request_delay_ms": 2.0, "chunk_delay_ms": 0.2}
    off = {k: 0.0 for k in known}
    task = progress.add_task("resolution", total=2 * RESOLUTION_ROUNDS * 3)
    rows = []
    with sim_stack(tmp, SimProxyStack, ttft_ms=TTFT_MS, itl_ms=ITL_MS) as stack:
        proxy, direct = stack.endpoint().base_url, stack.engine.url
        for c in (1, 16):
            got: dict[str, list[dict]] = {"direct": [], "off": [], "on": []}
            for _ in range(RESOLUTION_ROUNDS):
                for label, url, delays in (("direct", direct, None), ("off", proxy, off), ("on", proxy, known)):
                    progress.update(task, description=f"resolution c={c} {label}")
                    if delays is not None:
                        httpx.post(f"{proxy}/proxy/config", json=delays, timeout=5).raise_for_status()
                        httpx.post(f"{proxy}/proxy/reset", timeout=5)
                    run = run_layerbench(url, c, max(40, 8 * c), 16)  # /sim/* passes through the proxy
                    held = httpx.get(f"{proxy}/proxy/stats", timeout=5).json() if delays is not None else None
                    # minus the engine's own executed timing, which drifts from run to run
                    got[label].append({**{m: run.pct(m, 50) - run.server[m]["p50_ms"] for m in ("ttft", "e2e")},
                                       "held": held["request_hold"]["p50_ms"] + held["event_hold"]["p50_ms"]
                                       if held else 0.0})
                    progress.advance(task)

            def mean(label: str, key: str, got: dict = got) -> float:
                return float(np.mean([g[key] for g in got[label]]))

            executed = mean("on", "held") - mean("off", "held")
            for metric in ("ttft", "e2e"):
                rows.append({"concurrency": c, "metric": metric, "configured_ms": 2.2, "executed_ms": executed,
                             "reported_vs_proxy0_ms": mean("on", metric) - mean("off", metric),
                             "hop_cost_ms": mean("off", metric) - mean("direct", metric),
                             "spread_ms": float(np.std([a[metric] - b[metric]
                                                        for a, b in zip(got["on"], got["off"], strict=True)]))})
    return rows


def cpu_per_event(tmp: Path, progress: Progress) -> dict[str, float]:
    """CPU microseconds per SSE event of each client process at c=64, from two run sizes (their difference
    cancels fixed costs such as `vllm bench serve` importing vLLM): a machine-independent capacity figure."""
    out: dict[str, float] = {}
    task = progress.add_task("cpu per event", total=len(CLIENTS) * 2)
    with sim_stack(tmp, ttft_ms=TTFT_MS, itl_ms=CAPACITY_ITL_MS) as sim:
        url = sim.endpoint().base_url
        for name in CLIENTS:
            cost = []
            for n in (64, 320):
                progress.update(task, description=f"cpu per event {name} n={n}")
                before = _cpu_seconds()
                run = RUNNERS[name](url, 64, n, 64)
                cost.append((_cpu_seconds() - before, run.events))
                progress.advance(task)
            (c1, e1), (c2, e2) = cost
            out[name] = (c2 - c1) / (e2 - e1) * 1e6
    return out


def _cpu_seconds() -> float:
    """CPU time of this process plus its finished children (`vllm bench serve` runs as a child)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def capacity(tmp: Path, progress: Progress) -> dict[str, list[ClientRun]]:
    """Rising concurrency, floor first at each level. A client is past its capacity once its excess TTFT error
    over the floor (same level, same server, moments apart) has grown by EXCESS_LIMIT_MS over its excess at the
    lowest level: a fixed offset is accuracy (above), growth with load is saturation. The sweep ends where the
    floor itself degrades: the reference engine is saturated and no client can be judged."""
    out: dict[str, list[ClientRun]] = {name: [] for name in CLIENTS}
    alive = set(CLIENTS)
    task = progress.add_task("capacity", total=len(CLIENTS) * len(CAPACITY_LEVELS))
    with sim_stack(tmp, ttft_ms=TTFT_MS, itl_ms=CAPACITY_ITL_MS) as sim:
        url = sim.endpoint().base_url
        for c in CAPACITY_LEVELS:
            for name in CLIENTS:
                progress.advance(task)
                if name not in alive:
                    continue
                progress.update(task, description=f"capacity c={c} {name}")
                run = RUNNERS[name](url, c, 3 * c, 64)
                out[name].append(run)
                if name == "floor" and saturated(out["floor"]):
                    alive.clear()
                    break
                if name != "floor" and growth(out[name], out["floor"]) >= EXCESS_LIMIT_MS:
                    alive.discard(name)
    return out


def excess(run: ClientRun, floor: ClientRun) -> float:
    return run.err("ttft", 50) - floor.err("ttft", 50)


def saturated(floors: list[ClientRun]) -> bool:
    return floors[-1].err("ttft", 50) - floors[0].err("ttft", 50) > SATURATED_MS


def growth(runs: list[ClientRun], floors: list[ClientRun]) -> float:
    by_c = {f.concurrency: f for f in floors}
    return excess(runs[-1], by_c[runs[-1].concurrency]) - excess(runs[0], by_c[runs[0].concurrency])


def capacity_of(runs: list[ClientRun], floors: list[ClientRun]) -> tuple[float, bool]:
    """(highest sustained event rate, whether the client was still fine where the sweep ended)."""
    ok = [r for i, r in enumerate(runs) if growth(runs[: i + 1], floors) < EXCESS_LIMIT_MS
          and not saturated([f for f in floors if f.concurrency <= r.concurrency])]
    rate = max((r.event_rate for r in ok), default=0.0)
    return rate, len(ok) == len(runs) and not any(growth(runs[: i + 1], floors) >= EXCESS_LIMIT_MS
                                                   for i in range(len(runs)))


def render(acc: list[list[ClientRun]], res: list[dict], cap: dict[str, list[ClientRun]], cpu: dict[str, float],
           wall_s: float) -> str:
    f = "{:+.2f}".format
    by = {(runs[0].client, runs[0].concurrency): runs for runs in acc}
    acc_rows = []
    for runs in acc:
        r0 = runs[0]
        floor = by[("floor", r0.concurrency)]
        acc_rows.append([
            r0.client, str(r0.concurrency),
            *[f(mean_err(runs, m, p)) for m in ("ttft", "itl", "e2e") for p in (50, 99)],
            f(mean_err(runs, "ttft", 50) - mean_err(floor, "ttft", 50)),
            f(float(np.mean([r.pct("ttft", 50) for r in runs])) - TTFT_MS),
            f"{np.mean([r.server['late_first']['p50_ms'] for r in runs]):.2f} / "
            f"{np.mean([r.server['late_first']['p99_ms'] for r in runs]):.2f}",
        ])
    top = max(ACCURACY_LEVELS)
    lb, fl, vb = by[("layerbench", top)], by[("floor", top)], by[("vllm bench serve", top)]
    lb_x = mean_err(lb, "ttft", 50) - mean_err(fl, "ttft", 50)
    vb_x = mean_err(vb, "ttft", 50) - mean_err(fl, "ttft", 50)
    floors = cap["floor"]
    cap_of = {name: capacity_of(runs, floors) for name, runs in cap.items() if name != "floor"}
    engine_limited = saturated(floors)
    by_c = {r.concurrency: r for r in floors}

    def cap_cell(name: str, c: int) -> str:
        run = next((r for r in cap[name] if r.concurrency == c), None)
        if run is None:
            return "—"
        if name == "floor":
            mark = " (engine saturated)" if saturated([r for r in floors if r.concurrency <= c]) else ""
            return f"{run.event_rate:,.0f} ev/s, err {f(run.err('ttft', 50))}{mark}"
        return f"{run.event_rate:,.0f} ev/s, excess {f(excess(run, by_c[c]))}"

    def cap_text(name: str) -> str:
        rate, unbounded = cap_of[name]
        return f"≥ {rate:,.0f} (engine-limited)" if unbounded and engine_limited else f"{rate:,.0f}"

    lines = [
        "# How accurate is layerbench?",
        "",
        f"Generated by `make bench-harness` on {time.strftime('%Y-%m-%d %H:%M')} in {wall_s:.0f} s, on "
        f"{os.cpu_count()} CPUs. Reference engine: TTFT {TTFT_MS:.0f} ms, {ITL_MS:.0f} ms per token, {TOKENS} tokens, "
        "one token per SSE event. The clients take turns against the same server, interleaved, "
        f"{REPEATS} runs each (figures are their mean).",
        "",
        "*Error* = measured minus true, in ms, where *true* is what the server actually did: its own send times "
        "on the same monotonic clock (`GET /sim/stats`), so the server's lateness against its schedule (last "
        "column) is not charged to the client. What the server's log cannot see — the time a request waits in "
        "the socket while the server's loop is busy, loopback, the machine waking up — is charged to every "
        "client alike: the *floor* client (about 40 lines of raw sockets) shows how much that is, and *excess "
        "over floor* is the part that is the client's own.",
        "",
        "## Accuracy",
        "",
        markdown_table(["client", "c", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "E2E p50", "E2E p99",
                        "TTFT p50 excess over floor", "TTFT p50 − configured 50 ms", "server late p50 / p99"],
                       acc_rows),
        "",
        f"- At c={top}: layerbench's TTFT exceeds the floor's by {f(lb_x)} ms at p50 and "
        f"{f(mean_err(lb, 'ttft', 99) - mean_err(fl, 'ttft', 99))} ms at p99 (targets ≤ 0.5 / ≤ 2 ms).",
        f"- At c={top}: excess TTFT error over the floor: layerbench {f(lb_x)} ms, `vllm bench serve` {f(vb_x)} ms "
        f"({vb_x / max(lb_x, 0.1):.0f}× more, counting layerbench's excess as at least 0.1 ms; target ≥ 10×). "
        f"Against the server's executed timing: layerbench {f(mean_err(lb, 'ttft', 50))} ms, "
        f"`vllm bench serve` {f(mean_err(vb, 'ttft', 50))} ms.",
        "",
        "## Resolution: a known overhead (+2 ms per request, +0.2 ms per chunk)",
        "",
        "One deployment (reference engine + proxy); the proxy's delays are switched off and on in place, "
        f"alternating {RESOLUTION_ROUNDS} times. *Reported* is the difference in layerbench's p50 between on and off "
        "(each minus the engine's executed timing); *executed* is what the proxy itself recorded holding; *hop* is "
        "what the bare proxy costs over the engine alone; *spread* is the standard deviation of the per-round "
        "difference. 16 tokens per request.",
        "",
        markdown_table(["c", "metric", "configured", "executed", "reported", "error vs executed", "spread",
                        "hop (proxy +0)"],
                       [[str(r["concurrency"]), r["metric"].upper(), f"{r['configured_ms']:.2f}",
                         f"{r['executed_ms']:.2f}", f"{r['reported_vs_proxy0_ms']:.2f}",
                         f(r["reported_vs_proxy0_ms"] - r["executed_ms"]), f"{r['spread_ms']:.2f}",
                         f"{r['hop_cost_ms']:.2f}"] for r in res]),
        "",
        f"## Capacity: SSE events per second one client process sustains before its TTFT error grows by "
        f"{EXCESS_LIMIT_MS:.0f} ms ({CAPACITY_ITL_MS:.0f} ms per token, one token per event)",
        "",
        markdown_table(["client", *[f"c={c}" for c in CAPACITY_LEVELS], "capacity (events/s)"],
                       [[name, *[cap_cell(name, c) for c in CAPACITY_LEVELS],
                         "(reference)" if name == "floor" else cap_text(name)] for name in CLIENTS]),
        "",
        f"- layerbench sustains {cap_of['layerbench'][0] / max(cap_of['vllm bench serve'][0], 1):.1f}× the event "
        "rate of `vllm bench serve` (target ≥ 1.5×). A client is past its capacity once its excess over the floor "
        f"has grown by {EXCESS_LIMIT_MS:.0f} ms over its excess at c={CAPACITY_LEVELS[0]} (a constant offset is "
        "accuracy, above; growth with load is saturation); the last cell of a row is the first level past it.",
        "",
        "CPU cost per SSE event at c=64 (from two run sizes, so fixed costs cancel) and the event rate one core "
        "would sustain at that cost:",
        "",
        markdown_table(["client", "CPU µs per event", "events/s per core"],
                       [[name, f"{cpu[name]:.1f}", f"{1e6 / cpu[name]:,.0f}" if cpu[name] > 0 else "—"]
                        for name in CLIENTS]),
        "",
        f"- By CPU cost, layerbench sustains {cpu['vllm bench serve'] / cpu['layerbench']:.1f}× the event rate of "
        "`vllm bench serve` per core.",
        "- Client and reference engine share the machine's cores. The sweep stops where the floor's own error "
        f"has grown by > {SATURATED_MS:.0f} ms: the engine, not a client, is saturated there, and a client that was "
        "still fine is reported as ≥ its last rate.",
    ]
    return "\n".join(lines) + "\n"


def main(out_dir: Path = OUT_DIR, console: Console | None = None) -> Path:
    console = console or Console()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, Progress(console=console) as progress:
        acc = accuracy(Path(tmp), progress)
        res = resolution(Path(tmp), progress)
        cap = capacity(Path(tmp), progress)
        cpu = cpu_per_event(Path(tmp), progress)
    md = render(acc, res, cap, cpu, time.monotonic() - t0)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "harness-bench.md"
    path.write_text(md)
    (out_dir / "harness-bench.json").write_text(json.dumps({
        "accuracy": [{"client": r.client, "concurrency": r.concurrency, "server": r.server,
                      **{f"{m}_err_p{p}": r.err(m, p) for m in ("ttft", "itl", "e2e") for p in (50, 99)}}
                     for runs in acc for r in runs],
        "resolution": res,
        "cpu_us_per_event": cpu,
        "capacity": {k: [{"concurrency": r.concurrency, "events_per_s": r.event_rate,
                          "ttft_err_p50": r.err("ttft", 50)} for r in v] for k, v in cap.items()},
    }, indent=2))
    console.print(md)
    return path
