"""The clients of the harness benchmark, each run as one closed-loop level against the reference engine.

Owns: ClientRun (what one client measured in one run, beside the server's own record of the same requests),
the runners for layerbench's clients (OpenAI, and Triton's generate_stream in the accuracy section), the
raw-socket floor (harness/bench/floor.py) and `vllm bench serve`
(from the engine environment), the reference-engine deployment they share, and each run's client CPU time."""

from __future__ import annotations

import asyncio
import functools
import json
import resource
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import psutil

from harness.bench.floor import Server, floor_level
from harness.errors import LayerbenchError
from harness.host.busy import busy_s
from harness.load import eventloop
from harness.load.prompts import PromptGenerator
from harness.load.protocols import CLIENTS as PROTOCOLS
from harness.load.runner import Hooks, LevelPlan, Sender, run_level
from harness.results import new_run_id
from stacks.base import ENGINE_VENV, MODEL_DIR, PROJECT_ROOT, DeploySettings, Stack
from stacks.sim import SimStack

CLIENTS = ("floor", "layerbench", "vllm bench serve")
TRITON = "layerbench triton"  # layerbench's Triton client against the reference engine's generate_stream
TTFT_MS = 50.0  # the reference engine's configured time to first token, in every section


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
    cpu_s: float = 0.0  # client CPU seconds: in-process runs whole, a child process from its first request on
    first_ns: list[float] = field(default_factory=list)  # each first content event's arrival, perf_counter ns
    other_cores: float | None = None  # cores used by processes other than client and engine meanwhile (OtherLoad)

    def pct(self, name: str, p: float) -> float:
        return float(np.percentile(getattr(self, name), p))

    def err(self, name: str, p: int) -> float:
        """measured pXX minus the server's executed pXX (ms)."""
        return self.pct(name, p) - self.server[name][f"p{p}_ms"]

    @property
    def event_rate(self) -> float:
        return self.events / self.wall_s if self.wall_s else 0.0


def reset(url: str) -> None:
    httpx.post(f"{url}/sim/reset", timeout=5)


def stats(url: str) -> dict:
    return httpx.get(f"{url}/sim/stats", timeout=5).json()


def own_cpu_s() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


def run_layerbench(url: str, c: int, n: int, tokens: int, protocol: str = "openai") -> ClientRun:
    client = PROTOCOLS[protocol](url, "tiny", max_tokens=tokens, timeout_s=120)
    gen = PromptGenerator(new_run_id("bench"), "bench", 32)
    cpu0 = own_cpu_s()
    run = eventloop.run(run_level(Sender(client, gen), LevelPlan(c, n), Hooks(on_measure_start=lambda: reset(url))))
    cpu = own_cpu_s() - cpu0
    ok = [r for r in run.records if r["ok"]]
    if len(ok) != len(run.records):
        raise LayerbenchError(f"layerbench client saw {len(run.records) - len(ok)} failures at c={c}")
    name = TRITON if protocol == "triton" else "layerbench"
    return ClientRun(name, c, [r["ttft_ms"] for r in ok], [r["e2e_ms"] for r in ok],
                     [g for r in ok for g in np.diff(r["event_ms"])], sum(len(r["event_ms"]) for r in ok),
                     run.window_s, stats(url), cpu, [r["t_start_ns"] + r["ttft_ms"] * 1e6 for r in ok])


def run_floor(url: str, c: int, n: int, tokens: int) -> ClientRun:
    port = int(url.rsplit(":", 1)[1])
    cpu0 = own_cpu_s()
    out, wall = asyncio.run(floor_level(Server("127.0.0.1", port, "tiny", tokens), c, n,
                                        on_measure_start=lambda: reset(url)))
    cpu = own_cpu_s() - cpu0
    return ClientRun("floor", c, [o[0] for o in out], [o[2] for o in out],
                     [g for o in out for g in np.diff(o[1])], sum(len(o[1]) for o in out), wall, stats(url), cpu,
                     [o[3] + o[0] * 1e6 for o in out])


def _children_cpu_s() -> float:
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def _cpu_before_first_request(proc: subprocess.Popen, url: str, requests0: int) -> float:
    """Polls the engine until it has seen a request from `proc`; returns proc's CPU seconds by then (its vLLM
    import, tokenizer and dataset: a fixed cost that varies by seconds from run to run), 0.0 if missed."""
    try:
        ps = psutil.Process(proc.pid)
        while proc.poll() is None:
            cpu = ps.cpu_times()
            if stats(url)["requests"] != requests0:
                return cpu.user + cpu.system + cpu.children_user + cpu.children_system
            time.sleep(0.02)
    except (psutil.Error, httpx.HTTPError):
        pass
    return 0.0


def run_vllm_bench(url: str, c: int, n: int, tokens: int) -> ClientRun:
    py = ENGINE_VENV / "bin" / "python"
    if not py.exists():
        raise LayerbenchError("`vllm bench serve` needs the engine environment: run `make setup`")
    with tempfile.TemporaryDirectory() as tmp:
        reset(url)
        requests0 = stats(url)["requests"]
        cmd = [str(py), str(PROJECT_ROOT / "scripts" / "vllm_bench_serve.py"), "--backend", "openai",
               "--base-url", url, "--endpoint", "/v1/completions", "--model", "tiny", "--tokenizer",
               str(MODEL_DIR), "--dataset-name", "random", "--random-input-len", "32", "--random-output-len",
               str(tokens), "--num-prompts", str(n), "--max-concurrency", str(c), "--ignore-eos",
               "--num-warmups", "0", "--ready-check-timeout-sec", "0", "--disable-tqdm", "--save-result",
               "--save-detailed", "--result-dir", tmp, "--result-filename", "r.json"]
        kids0 = _children_cpu_s()
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "VLLM_NO_USAGE_STATS": "1"}
                              ) as proc:
            startup = _cpu_before_first_request(proc, url, requests0)
            try:
                stdout, stderr = proc.communicate(timeout=900)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                raise LayerbenchError("vllm bench serve did not finish in 900 s") from None
        cpu = _children_cpu_s() - kids0 - startup
        if proc.returncode != 0:
            raise LayerbenchError(f"vllm bench serve failed:\n{stdout[-2000:]}\n{stderr[-2000:]}")
        res = json.loads((Path(tmp) / "r.json").read_text())
    if res["failed"]:
        raise LayerbenchError(f"vllm bench serve saw {res['failed']} failures at c={c}")
    return ClientRun("vllm bench serve", c, [t * 1e3 for t in res["ttfts"]], [t * 1e3 for t in res["latencies"]],
                     [g * 1e3 for req in res["itls"] for g in req], sum(len(i) + 1 for i in res["itls"]),
                     res["duration"], stats(url), cpu,  # its perf_counter is CLOCK_MONOTONIC too
                     [(s + t) * 1e9 for s, t in zip(res.get("start_times") or [], res["ttfts"], strict=False)])


RUNNERS = {"layerbench": run_layerbench, "floor": run_floor, "vllm bench serve": run_vllm_bench,
           TRITON: functools.partial(run_layerbench, protocol="triton")}


def sim_stack(tmp: Path, cls: type[Stack] = SimStack, **options) -> Stack:
    stack = cls(DeploySettings(log_dir=tmp, options={"max_num_seqs": 1024, **options}))
    stack.deploy()
    stack.wait_ready(30)
    return stack


class OtherLoad:
    """Cores used by every process other than this one, its children and the deployment while runs go: the
    machine's busy time (/proc/stat, steal included) minus ours. A round measured on a busy machine measures the
    contention too; the report says so instead of charging it to a client."""

    def __init__(self, stack: Stack):
        self.procs = [p for ps in stack.processes().values() for p in ps]

    def _sample(self) -> tuple[float, float]:
        busy = busy_s(psutil.cpu_times())
        ours = own_cpu_s() + _children_cpu_s()
        for p in self.procs:
            try:
                c = p.cpu_times()
                ours += c.user + c.system
            except psutil.Error:
                pass
        return busy, ours

    def run(self, runner, url: str, c: int, n: int, tokens: int) -> ClientRun:
        (busy0, ours0), t0 = self._sample(), time.monotonic()
        run = runner(url, c, n, tokens)
        (busy1, ours1), wall = self._sample(), time.monotonic() - t0
        run.other_cores = max(0.0, (busy1 - busy0) - (ours1 - ours0)) / wall if wall > 0 else None
        return run


def rotated(names: tuple[str, ...], k: int) -> tuple[str, ...]:
    """The clients' order in round k: each takes each place in turn, so no client always follows another."""
    k %= len(names)
    return names[k:] + names[:k]
