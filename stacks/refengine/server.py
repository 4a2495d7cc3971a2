"""The reference engine: a streaming server whose timing is exactly configurable, speaking OpenAI's
`/v1/completions` and `/v1/chat/completions` and Triton's `POST /v2/models/<model>/generate_stream` (the
inputs of NVIDIA's vLLM backend; one SSE event per response with `text_output` and `num_output_tokens`).

- TTFT = ttft_ms + prefill_ms_per_token * prompt_tokens (+ uniform jitter), counted from admission;
  token k is due at first + k * itl_ms: absolute deadlines, so error never accumulates.
- tokens_per_chunk tokens per SSE event (like Ray Serve's stream batching); usage always carries the truth.
- max_num_seqs with a real FIFO waiting queue; failure injection (HTTP 500, 429, a stream cut mid-way,
  a slow /metrics, /metrics answering 500 / hanging / garbage every Nth time, the engine SIGKILLing its own
  process group after N requests, slow start-up and shutdown), changeable while it runs via POST
  /sim/faults; /metrics with vLLM 0.32.0's family names following the simulated state.
- Known noise: a per-deployment slowdown exp(deployment_sigma * Z), a per-busy-period one exp(window_sigma * Z),
  a linear drift (drift_per_min since drift_epoch); the factors drawn are served at /sim/stats, so a compare's
  verdict can be checked against what the engine actually did.
- Every request's actual send times are kept (same monotonic clock as the client: perf_counter_ns is
  CLOCK_MONOTONIC on Linux), served at GET /sim/stats: how late the server itself was, so a benchmark can tell
  the client's error from the server's.

Run: python -m stacks.refengine.server --port P [--ttft-ms 50 --itl-ms 10 ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from stacks.refengine.http import Request, Responder, run_server
from stacks.refengine.metrics import SimMetrics
from stacks.refengine.prefix import PrefixCache
from stacks.refengine.render import render
from stacks.refengine.timing import PreciseTimer


class SimConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = "tiny"
    version: str = "sim-0.32.0"
    max_model_len: int = 2048
    ttft_ms: float = Field(50.0, ge=0)
    prefill_ms_per_token: float = Field(0.0, ge=0)
    itl_ms: float = Field(10.0, ge=0)
    tokens_per_chunk: int = Field(1, ge=1)
    jitter_ms: float = Field(0.0, ge=0)
    max_num_seqs: int = Field(256, ge=1)
    interference_above: int = Field(0, ge=0, description="while more than this many requests run, each token "
                                    "takes interference_itl_ms instead of itl_ms: decodes stalled by other requests' "
                                    "prefill, with a known knee (0: never)")
    interference_itl_ms: float = Field(0.0, ge=0)
    kv_capacity_tokens: int = Field(524_288, ge=1)
    fail_500: float = Field(0.0, ge=0, le=1)
    fail_429: float = Field(0.0, ge=0, le=1)
    cut_stream: float = Field(0.0, ge=0, le=1)
    metrics_delay_ms: float = Field(0.0, ge=0)
    metrics_fault: Literal["none", "500", "hang", "garbage"] = "none"
    metrics_fault_every: int = Field(1, ge=1, description="every Nth /metrics request gets metrics_fault")
    die_after: int = Field(0, ge=0, description="SIGKILL the engine's own process group when request N+1 "
                           "arrives, with requests in flight (0: never)")
    startup_delay_s: float = Field(0.0, ge=0)
    shutdown_delay_s: float = Field(0.0, ge=0)
    seed: int = 0
    # known noise, so a compare's verdict is tested against a known truth (the factors are served at /sim/stats)
    deployment_sigma: float = Field(0.0, ge=0, le=1, description="this deployment runs exp(sigma * Z) slower for "
                                    "its whole life (Z ~ N(0, 1), drawn at start): where a deployment's processes "
                                    "land on a shared host")
    window_sigma: float = Field(0.0, ge=0, le=1, description="each busy period (idle to idle: a measured window) "
                                "runs exp(sigma * Z) slower, drawn anew")
    drift_per_min: float = Field(0.0, ge=-0.5, le=0.5, description="the engine slows by this share of its timing per "
                                 "minute since drift_epoch (a drifting host)")
    drift_epoch: float = Field(0.0, ge=0, description="unix time the drift counts from (0: this engine's start); "
                               "give every deployment of a compare the same")
    noise_seed: int = Field(-1, description="seed of the noise draws (-1: from the OS, so every deployment differs)")
    max_position_embeddings: int = Field(32768, ge=1, description="the model's context limit: a longer "
                                         "max_model_len is refused at start-up, as vLLM refuses it")
    prefix_cache_blocks: int = Field(0, ge=0, description="prompts' first blocks (PREFIX_BLOCK_CHARS) the prefix "
                                     "cache holds, the least recently used dropped first (0: every one seen)")
    prefix_count: Literal["first", "chain"] = Field("first", description="first: a prompt's first block stands for "
                                                    "its prefix; chain: every block, hits up to the first miss, as "
                                                    "vLLM counts them (stacks/refengine/prefix.py)")
    prefix_hit_saves_ms: float = Field(0.0, ge=0, description="a request whose first block is in the prefix cache "
                                       "gets its first token this much sooner, its prefill partly skipped (0: hits "
                                       "are counted in the metrics and change no timing)")
    slowdown: float = Field(1.0, ge=0.01, le=100, description="every request's timing times this; POST /sim/faults "
                            "changes it while the engine runs (one engine of several slowed)")
    processes: int = Field(1, ge=1, le=32, description="serving processes sharing the port (SO_REUSEPORT, the "
                           "kernel spreads connections): an engine that is never the client's limit, for the harness "
                           "benchmark's scale section; /sim/stats and /metrics are then one process's")

    @model_validator(mode="after")
    def _fits(self) -> SimConfig:
        if self.max_model_len > self.max_position_embeddings:
            raise ValueError(f"User-specified max_model_len ({self.max_model_len}) is greater than the model's "
                             f"max_position_embeddings ({self.max_position_embeddings})")
        return self


# what POST /sim/faults may change while the engine runs
RUNTIME_FAULTS = ("fail_500", "fail_429", "cut_stream", "metrics_delay_ms", "metrics_fault", "metrics_fault_every",
                  "slowdown")


@dataclass(frozen=True, slots=True)
class Generation:
    """One request as the engine streams its answer: its id, its form (chat, Triton's, or a completion; usage
    asked), its prompt and output tokens, and what was drawn for it (a cut stream, the TTFT jitter)."""

    rid: str
    chat: bool
    triton: bool
    include_usage: bool
    prompt_tokens: int
    max_tokens: int
    cut: bool
    jitter_ms: float
    cached: bool = False  # its first block was in the prefix cache


class Engine:
    def __init__(self, cfg: SimConfig, timer: PreciseTimer):
        self.cfg, self.timer = cfg, timer
        self.rng = random.Random(cfg.seed)
        self.slots = asyncio.Semaphore(cfg.max_num_seqs)
        self.running = self.waiting = self.kv_tokens = 0
        self.metrics = SimMetrics(cfg.model, cfg.kv_capacity_tokens)
        self.prefix = PrefixCache(cfg.prefix_cache_blocks, cfg.prefix_count)
        # what the server actually did (perf_counter_ns = CLOCK_MONOTONIC, the client's clock too)
        self.late_first_ns: list[int] = []  # actual send - due, first content event
        self.first_sent_ns: list[int] = []  # when each first content event was sent (absolute: a client pairs its own)
        self.late_event_ns: list[int] = []  # every content event
        self.ttft_ns: list[int] = []  # request read -> first content event written
        self.e2e_ns: list[int] = []  # request read -> end of stream written
        self.itl_ns: list[int] = []  # gaps between content events written
        self.counter = 0
        self.scrapes = 0
        self.noise = random.Random(None if cfg.noise_seed < 0 else cfg.noise_seed)
        self.deployment_factor = float(np.exp(cfg.deployment_sigma * self.noise.gauss(0, 1)))
        self.window_factors: list[float] = []
        self.epoch = cfg.drift_epoch or time.time()

    def factor(self) -> float:
        """How much slower than configured this request runs: deployment x window x drift."""
        drift = 1.0 + self.cfg.drift_per_min * (time.time() - self.epoch) / 60.0
        window = self.window_factors[-1] if self.window_factors else 1.0
        return self.deployment_factor * window * max(0.05, drift) * self.cfg.slowdown

    # ---- routes ----
    async def handle(self, req: Request, resp: Responder) -> None:
        route = (req.method, req.path)
        if route == ("GET", "/health"):
            await resp.send(200, b"", "text/plain")
        elif route == ("GET", "/version"):
            await resp.send_json(200, {"version": self.cfg.version})
        elif route == ("GET", "/v1/models"):
            await resp.send_json(200, {"object": "list", "data": [
                {"id": self.cfg.model, "object": "model", "owned_by": "layerbench-sim",
                 "max_model_len": self.cfg.max_model_len}]})
        elif route == ("GET", "/metrics"):
            await self.serve_metrics(resp)
        elif route == ("POST", "/sim/faults"):
            try:
                self.cfg = SimConfig.model_validate({**self.cfg.model_dump(), **{
                    k: v for k, v in req.json().items() if k in RUNTIME_FAULTS}})
            except ValueError as e:
                await resp.send_json(400, {"error": {"message": str(e)[:300], "code": 400}})
                return
            await resp.send_json(200, {k: getattr(self.cfg, k) for k in RUNTIME_FAULTS})
        elif route == ("GET", "/sim/stats"):
            await resp.send_json(200, self.stats())
        elif route == ("POST", "/sim/reset"):
            for xs in (self.late_first_ns, self.first_sent_ns, self.late_event_ns, self.ttft_ns, self.e2e_ns,
                       self.itl_ns):
                xs.clear()
            await resp.send_json(200, {"reset": True})
        elif req.method == "POST" and req.path in ("/v1/completions/render", "/v1/chat/completions/render"):
            await resp.send_json(*render(req, self.cfg.model))
        elif req.method == "POST" and req.path in ("/v1/completions", "/v1/chat/completions"):
            await self.generate(req, resp, "chat" if req.path.endswith("chat/completions") else "completions")
        elif req.method == "POST" and req.path == f"/v2/models/{self.cfg.model}/generate_stream":
            await self.generate(req, resp, "triton")
        else:
            await resp.send_json(404, {"error": {"message": f"no route {req.method} {req.path}", "code": 404}})

    async def serve_metrics(self, resp: Responder) -> None:
        self.scrapes += 1
        if self.cfg.metrics_delay_ms:
            await asyncio.sleep(self.cfg.metrics_delay_ms / 1e3)
        fault = self.cfg.metrics_fault if self.scrapes % self.cfg.metrics_fault_every == 0 else "none"
        if fault == "500":
            await resp.send_json(500, {"error": {"message": "injected: metrics failed", "code": 500}})
        elif fault == "hang":
            await asyncio.sleep(3600)  # the scraper's timeout ends it
        elif fault == "garbage":
            await resp.send(200, b"\x00this is {not prometheus text\n", "text/plain")
        else:
            await resp.send(200, self.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")

    def stats(self) -> dict:
        def pct(xs: list[int]) -> dict:
            if not xs:
                return {"n": 0}
            a = np.asarray(xs) / 1e6
            return {"n": int(a.size), "p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99)),
                    "max_ms": float(a.max())}

        return {"late_first": pct(self.late_first_ns), "late_event": pct(self.late_event_ns),
                "ttft": pct(self.ttft_ns), "e2e": pct(self.e2e_ns), "itl": pct(self.itl_ns),
                "requests": self.counter, "first_sent_ns": self.first_sent_ns, "prefix_hits": self.prefix.hits,
                "noise": {"deployment_factor": self.deployment_factor, "window_factors": self.window_factors,
                          "drift_per_min": self.cfg.drift_per_min, "drift_epoch": self.epoch}}

    # ---- generation ----
    async def generate(self, req: Request, resp: Responder, protocol: str) -> None:
        t_arrival = time.perf_counter_ns()
        chat = protocol == "chat"
        try:
            body = req.json()
            if protocol == "triton":  # Triton: the model is in the path; sampling parameters are a JSON string
                body = {**json.loads(body.get("sampling_parameters") or "{}"), "prompt": body.get("text_input", ""),
                        "model": self.cfg.model, "protocol": "triton"}
        except (ValueError, AttributeError, TypeError):
            await resp.send_json(400, {"error": {"message": "body is not JSON", "code": 400}})
            return
        if body.get("model") != self.cfg.model:
            await resp.send_json(404, {"error": {"message": f"model {body.get('model')!r} does not exist",
                                                 "code": 404}})
            return
        roll = self.rng.random()
        if roll < self.cfg.fail_429:
            await resp.send_json(429, {"error": {"message": "injected: too many requests", "code": 429}})
            return
        if roll < self.cfg.fail_429 + self.cfg.fail_500:
            await resp.send_json(500, {"error": {"message": "injected: internal error", "code": 500}})
            return
        cut = self.rng.random() < self.cfg.cut_stream
        jitter = self.rng.uniform(-self.cfg.jitter_ms, self.cfg.jitter_ms) if self.cfg.jitter_ms else 0.0
        prompt = (" ".join(m.get("content", "") for m in body.get("messages", [])) if chat
                  else str(body.get("prompt", "")))
        prompt_tokens = max(1, len(prompt) // 4)
        max_tokens = int(body.get("max_tokens") or 16)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        triton = body.get("protocol") == "triton"
        if self.cfg.die_after and self.counter >= self.cfg.die_after:
            os.killpg(os.getpgid(0), signal.SIGKILL)  # like an OOM kill of the whole engine: no goodbye
        self.counter += 1
        rid = f"{'chatcmpl' if chat else 'cmpl'}-sim{self.counter}"

        if self.running == 0 and self.waiting == 0 and self.cfg.window_sigma:  # a busy period begins
            self.window_factors.append(float(np.exp(self.cfg.window_sigma * self.noise.gauss(0, 1))))
        self.waiting += 1
        self._publish()
        async with self.slots:
            self.waiting -= 1
            self.running += 1
            kv = prompt_tokens + max_tokens
            self.kv_tokens += kv
            t_admit = time.perf_counter_ns()
            hit, cached, queried = self.prefix.admit(prompt, prompt_tokens)
            self.metrics.on_admit(prompt_tokens, max_tokens, (t_admit - t_arrival) / 1e9, cached, queried)
            self._publish()
            try:
                await self._stream(resp, Generation(rid, chat, triton, include_usage, prompt_tokens, max_tokens, cut,
                                                    jitter, hit), t_arrival, t_admit)
            finally:
                self.running -= 1
                self.kv_tokens -= kv
                self._publish()

    def _publish(self) -> None:
        self.metrics.set_state(self.running, self.waiting, self.kv_tokens)

    def _event(self, rid: str, chat: bool, text: str | None, finish: str | None = None,
               usage: dict | None = None, triton: tuple[int, int] | None = None) -> bytes:
        """One SSE event; triton: (output tokens in this response, prompt tokens or 0) in Triton's format."""
        if triton is not None:
            obj: dict = {"model_name": self.cfg.model, "model_version": "1", "text_output": text or "",
                         "num_output_tokens": triton[0]}
            if triton[1]:
                obj["num_input_tokens"] = triton[1]
            return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
        created = int(time.time())
        if usage is not None:
            choices: list = []
        elif chat:
            delta = {"role": "assistant", "content": ""} if text is None else {"content": text}
            choices = [{"index": 0, "delta": delta, "finish_reason": finish}]
        else:
            choices = [{"index": 0, "text": text, "finish_reason": finish}]
        obj = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "created": created,
               "model": self.cfg.model, "choices": choices}
        if usage is not None:
            obj["usage"] = usage
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    async def _stream(self, resp: Responder, gen: Generation, t_arrival: int, t_admit: int) -> None:
        """Streams `gen`'s answer on its token deadlines; t_arrival, t_admit: perf_counter_ns."""
        rid, chat, triton, include_usage = gen.rid, gen.chat, gen.triton, gen.include_usage  # locals: read per chunk
        prompt_tokens, max_tokens, cut, jitter_ms = gen.prompt_tokens, gen.max_tokens, gen.cut, gen.jitter_ms
        cfg = self.cfg
        clock = time.perf_counter_ns
        slow = self.factor()
        saved = cfg.prefix_hit_saves_ms if gen.cached else 0.0
        ttft_ns = int((cfg.ttft_ms + cfg.prefill_ms_per_token * prompt_tokens + jitter_ms - saved) * 1e6 * slow)
        itl_ns = int(cfg.itl_ms * 1e6 * slow)
        first_due = t_admit + max(0, ttft_ns)
        resp.start_stream()
        if chat:
            resp.chunk(self._event(rid, chat, None))  # role-only chunk: not a token, not TTFT
        await resp.writer.drain()
        n_chunks = -(-max_tokens // cfg.tokens_per_chunk)
        sent = 0
        prev_sent_ns = None
        t_first_sent = 0
        due = first_due
        for j in range(n_chunks):
            n = min(cfg.tokens_per_chunk, max_tokens - sent)
            # absolute deadlines: each token is due one interval after the previous token's deadline (never after
            # its actual send), so lateness never accumulates; the interval depends on how many requests run
            token_ns = itl_ns if not cfg.interference_above or self.running <= cfg.interference_above \
                else int(cfg.interference_itl_ms * 1e6 * slow)
            due += ((n - 1) if j == 0 else n) * token_ns  # a chunk leaves when its last token is due
            await self.timer.sleep_until(due)
            if cut and j >= n_chunks // 2:
                resp.abort()
                return
            sent += n
            resp.chunk(self._event(rid, chat, "tok " * n, "length" if sent == max_tokens else None,
                                   triton=(n, prompt_tokens if j == 0 else 0) if triton else None))
            now = clock()
            self.late_event_ns.append(now - due)
            if j == 0:
                t_first_sent = now
                self.late_first_ns.append(now - due)
                self.first_sent_ns.append(now)
                self.ttft_ns.append(now - t_arrival)
                self.metrics.on_first_token((now - t_admit) / 1e9)
            else:
                self.itl_ns.append(now - prev_sent_ns)
            self.metrics.on_token(n, None if prev_sent_ns is None else (now - prev_sent_ns) / 1e9)
            prev_sent_ns = now
            await resp.writer.drain()
        if include_usage and not triton:
            resp.chunk(self._event(rid, chat, None, usage={"prompt_tokens": prompt_tokens,
                                                           "completion_tokens": max_tokens,
                                                           "total_tokens": prompt_tokens + max_tokens}))
        if not triton:  # Triton's stream ends with the model's final response, without a marker
            resp.chunk(b"data: [DONE]\n\n")
        await resp.end_stream()
        end = clock()
        self.e2e_ns.append(end - t_arrival)
        tpot = (end - t_first_sent) / 1e9 / (max_tokens - 1) if max_tokens > 1 else None
        self.metrics.on_finish((end - t_admit) / 1e9, max_tokens, tpot)


def config_parser(model: type[BaseModel]) -> argparse.ArgumentParser:
    """--field-name flags for every field of a pydantic config model."""
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--reuse-port", action="store_true", help="bind with SO_REUSEPORT (a helper of --processes)")
    for name in model.model_fields:
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, default=None)
    return p


async def amain(argv: list[str] | None = None) -> None:
    args = config_parser(SimConfig).parse_args(argv)
    cfg = SimConfig.model_validate({k: v for k, v in vars(args).items() if k in SimConfig.model_fields
                                    and v is not None})
    timer = PreciseTimer(asyncio.get_running_loop())
    engine = Engine(cfg, timer)
    await asyncio.sleep(cfg.startup_delay_s)
    if cfg.deployment_sigma or cfg.window_sigma or cfg.drift_per_min:  # the known truth, in the engine's log
        print(f"layerbench-sim: noise {json.dumps({'deployment_factor': engine.deployment_factor})}", flush=True)
    helpers = [subprocess.Popen([sys.executable, "-m", "stacks.refengine.server", *(argv or sys.argv[1:]),
                                 "--processes", "1", "--reuse-port"]) for _ in range(cfg.processes - 1)]
    try:  # the helpers are in this process's group, which the stack stops; they are also stopped here
        await run_server(engine.handle, args.host, args.port, timer.close, reuse_port=args.reuse_port or bool(helpers))
    finally:
        for h in helpers:
            h.terminate()
        for h in helpers:
            h.wait()
    if cfg.deployment_sigma or cfg.window_sigma or cfg.drift_per_min:
        print(f"layerbench-sim: noise {json.dumps(engine.stats()['noise'])}", flush=True)
    print("layerbench-sim: stopping", flush=True)  # tests wait for this line to signal during teardown
    time.sleep(cfg.shutdown_delay_s)  # a slow shutdown, for tests that signal layerbench during teardown


if __name__ == "__main__":
    asyncio.run(amain())
