"""The known-overhead proxy: a serving "layer" whose cost is exactly what we configure.

- request_delay_ms: each request is held this long before it goes upstream;
- chunk_delay_ms: each upstream SSE event is forwarded this long after it arrived (deadline-scheduled, so
  delays do not pile up while events are further apart than the delay);
- rechunk: merge N upstream content events into one event carrying all their text (like Ray Serve's stream
  batching), so tokens per event rises while usage still carries the true token count;
- batch_interval_ms: content events held and sent as one every N ms from the first one held (Ray Serve LLM's
  response batcher, 50 ms by default there: RAYLLM_MODEL_RESPONSE_BATCH_TIMEOUT_MS,
  ray/llm/_internal/serve/constants.py in ray 2.60.0), so tokens per event rises with the engine's token rate;
- chunk_cpu_us: each content event costs this much CPU in `per_chunk_work` (a busy loop; a layer's per-chunk
  middleware, as LiteLLM#21501 found one taking 53% of the proxy's CPU), so the proxy's one core runs out at a
  known token rate;
- max_ongoing: at most N requests forwarded at once (a layer that caps the engine's concurrency);
- metrics: pass | hide (404, like Ray Serve's API port) | rename (vllm:* -> proxy_vllm_*, like ray_vllm_*).
- upstream_ports: several engines behind it (a router), each POST sent to one by `route`: round_robin (each to the
  next), hash (the engine a hash of the prompt's first block picks: PREFIX_BLOCK_CHARS, the reference engine's
  cached block), or cache_aware (a block goes where it went first; a new block to the engine holding the fewest:
  an idealised router that knows every engine's cache and keeps them balanced). Other requests go to the first.

What it actually added is recorded per request and served at GET /proxy/stats, so a benchmark compares
what layerbench reports with what the proxy really did, not only with what it was asked to do.
POST /proxy/config changes the delays in place; every other path (including /sim/*) goes upstream.

Run: python -m stacks.refengine.proxy --port P --upstream-port U [--request-delay-ms 2 --chunk-delay-ms 0.2]
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import time
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from harness.wire import ChunkedDecoder
from stacks.refengine.http import Request, Responder, run_server
from stacks.refengine.prefix import PREFIX_BLOCK_CHARS
from stacks.refengine.server import config_parser
from stacks.refengine.timing import PreciseTimer


class ProxyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    upstream_host: str = "127.0.0.1"
    upstream_port: int
    request_delay_ms: float = Field(0.0, ge=0)
    chunk_delay_ms: float = Field(0.0, ge=0)
    rechunk: int = Field(1, ge=1)
    batch_interval_ms: float = Field(0.0, ge=0, description="content events held and sent as one every N ms from "
                                     "the first one held, like Ray Serve LLM's response batcher (0: no batching)")
    chunk_cpu_us: float = Field(0.0, ge=0, description="CPU burned per content event in per_chunk_work (0: none)")
    metrics: Literal["pass", "hide", "rename"] = "pass"
    rename_prefix: str = "proxy_vllm_"
    max_ongoing: int = Field(0, ge=0, description="at most this many requests forwarded at once, the others wait "
                             "in the proxy (like a layer's max_ongoing_requests; 0: no limit)")
    proxy_die_after: int = Field(0, ge=0, description="SIGKILL the proxy's own process group when request N+1 "
                           "arrives, with requests in flight (0: never): the layer dies, the engine lives")
    upstream_ports: str = Field("", pattern=r"^(\d+(,\d+)*)?$", description="several engines' ports, comma-separated "
                                "(set by the stack from engine.replicas); empty: upstream_port alone")
    route: Literal["round_robin", "hash", "cache_aware"] = Field(
        "round_robin", description="how requests are spread over several engines (upstream_ports)")

    def ports(self) -> list[int]:
        return [int(p) for p in self.upstream_ports.split(",")] if self.upstream_ports else [self.upstream_port]


class Upstream:
    """One keep-alive connection to one engine per downstream connection (no pool lock on the path)."""

    def __init__(self, cfg: ProxyConfig, port: int):
        self.cfg, self.port = cfg, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def send(self, req: Request) -> tuple[int, dict[str, str], asyncio.StreamReader]:
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(self.cfg.upstream_host, self.port)
        head = f"{req.method} {req.path} HTTP/1.1\r\nHost: upstream\r\n"
        if req.body:
            head += f"Content-Type: application/json\r\nContent-Length: {len(req.body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + req.body)
        raw = await self.reader.readuntil(b"\r\n\r\n")  # type: ignore[union-attr]
        lines = raw.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
        return int(lines[0].split(" ")[1]), headers, self.reader  # type: ignore[return-value]

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.writer = self.reader = None


class Proxy:
    def __init__(self, cfg: ProxyConfig, timer: PreciseTimer):
        self.cfg, self.timer = cfg, timer
        self.held_request_ns: list[int] = []  # downstream arrival -> sent upstream
        self.held_event_ns: list[int] = []  # upstream event arrival -> forwarded downstream
        self.posts = 0
        self.ongoing = asyncio.Semaphore(cfg.max_ongoing) if cfg.max_ongoing else None
        self.router = Router(cfg)

    def stats(self) -> dict:
        def pct(xs):
            if not xs:
                return {"n": 0}
            a = np.asarray(xs) / 1e6
            return {"n": int(a.size), "p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99))}

        return {"request_hold": pct(self.held_request_ns), "event_hold": pct(self.held_event_ns),
                "config": self.cfg.model_dump(), "sent": self.router.sent}

    async def handle(self, req: Request, resp: Responder) -> None:
        t_arrival = time.perf_counter_ns()
        if req.path == "/proxy/stats":
            await resp.send_json(200, self.stats())
            return
        if req.path == "/proxy/config" and req.method == "POST":
            # change delays in place, so a benchmark can alternate with/without on one deployment
            self.cfg = self.cfg.model_copy(update=ProxyConfig.model_validate({**self.cfg.model_dump(), **req.json()})
                                           .model_dump())
            await resp.send_json(200, self.cfg.model_dump())
            return
        if req.path == "/proxy/reset":
            self.held_request_ns.clear()
            self.held_event_ns.clear()
            await resp.send_json(200, {"reset": True})
            return
        if req.path == "/metrics" and self.cfg.metrics == "hide":
            await resp.send(404, b'{"detail":"Not Found"}')
            return
        if req.method == "POST" and self.cfg.proxy_die_after:
            self.posts += 1
            if self.posts > self.cfg.proxy_die_after:
                os.killpg(os.getpgid(0), signal.SIGKILL)
        i = self.router.pick(req) if req.method == "POST" else 0
        up = resp.state.get(("upstream", i))
        if up is None:
            up = resp.state[("upstream", i)] = Upstream(self.cfg, self.router.ports[i])
            resp.on_close.append(up.close)
        if self.ongoing is not None and req.method == "POST":
            async with self.ongoing:
                await self._forward(req, resp, up, t_arrival)
        else:
            await self._forward(req, resp, up, t_arrival)

    async def _forward(self, req: Request, resp: Responder, up: Upstream, t_arrival: int) -> None:
        if self.cfg.request_delay_ms and req.method == "POST":
            await self.timer.sleep_until(t_arrival + int(self.cfg.request_delay_ms * 1e6))
        try:
            if req.method == "POST":
                self.held_request_ns.append(time.perf_counter_ns() - t_arrival)
            status, headers, reader = await up.send(req)
            if headers.get("transfer-encoding", "").lower() == "chunked":
                await self._stream(reader, resp, status)
            else:
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                if req.path == "/metrics" and self.cfg.metrics == "rename":
                    body = body.replace(b"vllm:", self.cfg.rename_prefix.encode())
                await resp.send(status, body, headers.get("content-type", "application/json"))
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as e:
            up.close()
            if resp.streaming:
                resp.abort()  # pass an upstream cut through as a cut
            else:
                await resp.send_json(502, {"error": {"message": f"upstream: {type(e).__name__}", "code": 502}})

    async def _stream(self, reader: asyncio.StreamReader, resp: Responder, status: int) -> None:
        resp.start_stream()
        if status != 200:
            raise ConnectionError(f"upstream streamed status {status}")
        dechunk = ChunkedDecoder()
        buf = b""
        batch: list[bytes] = []
        cfg = self.cfg
        delay_ns, interval_ns = int(cfg.chunk_delay_ms * 1e6), int(cfg.batch_interval_ms * 1e6)
        due: int | None = None  # when what is held goes out (batch_interval_ms)
        while not dechunk.done:
            try:
                wait = None if due is None else max(0.0, (due - time.perf_counter_ns()) / 1e9)
                data = await asyncio.wait_for(reader.read(65536), wait)
            except asyncio.TimeoutError:  # the interval is up: what is held goes out as one event
                resp.chunk(_merge(batch))
                batch, due = [], None
                await resp.writer.drain()
                continue
            t = time.perf_counter_ns()
            if not data:
                raise ConnectionError("upstream closed mid-stream")
            buf += dechunk.feed(data)
            while (end := buf.find(b"\n\n")) >= 0:
                event, buf = buf[: end + 2], buf[end + 2:]
                content = _is_content(event)
                if content:
                    if cfg.chunk_cpu_us:
                        per_chunk_work(cfg.chunk_cpu_us)
                    batch.append(event)
                    if interval_ns and due is None:
                        due = t + interval_ns
                    if len(batch) < cfg.rechunk or (interval_ns and cfg.rechunk == 1):
                        continue
                due = None
                if delay_ns:
                    await self.timer.sleep_until(t + delay_ns)
                if batch:  # a non-content event (usage, [DONE]) flushes what is batched first
                    resp.chunk(_merge(batch))
                    batch = []
                if not content:
                    resp.chunk(event)
                self.held_event_ns.append(time.perf_counter_ns() - t)
            await resp.writer.drain()
        if batch:
            resp.chunk(_merge(batch))
        await resp.end_stream()


class Router:
    """Which engine a request goes to (ProxyConfig.route), and how many each was sent (/proxy/stats)."""

    def __init__(self, cfg: ProxyConfig):
        self.ports, self.route = cfg.ports(), cfg.route
        self.sent = [0] * len(self.ports)
        self.turn = 0
        self.home: dict[bytes, int] = {}  # cache_aware: where each block went first
        self.homes = [0] * len(self.ports)  # blocks placed on each engine

    def pick(self, req: Request) -> int:
        n = len(self.ports)
        if n == 1:
            i = 0
        elif self.route == "round_robin":
            i, self.turn = self.turn % n, self.turn + 1
        else:
            block = _prompt_block(req.body)
            if self.route == "hash":
                i = int.from_bytes(hashlib.blake2b(block, digest_size=8).digest(), "big") % n
            elif (i := self.home.get(block, -1)) < 0:
                i = self.homes.index(min(self.homes))
                self.home[block] = i
                self.homes[i] += 1
        self.sent[i] += 1
        return i


def _prompt_block(body: bytes) -> bytes:
    """The prompt's first PREFIX_BLOCK_CHARS characters, as the reference engine keys its cache."""
    try:
        obj = json.loads(body)
    except ValueError:
        return b""
    prompt = " ".join(m.get("content", "") for m in obj.get("messages", [])) if "messages" in obj \
        else str(obj.get("prompt", ""))
    return prompt[:PREFIX_BLOCK_CHARS].encode()


def per_chunk_work(us: float) -> None:
    """Busy for `us` microseconds: the per-chunk CPU a profile must find by this name."""
    end = time.perf_counter_ns() + int(us * 1000)
    while time.perf_counter_ns() < end:
        pass


def _is_content(event: bytes) -> bool:
    return b'"text":"' in event or b'"content":"' in event and b'"content":""' not in event


def _merge(events: list[bytes]) -> bytes:
    """One SSE event with the concatenated text of several content events (completions or chat)."""
    if len(events) == 1:
        return events[0]
    objs = [json.loads(e[len(b"data: "):].strip()) for e in events]
    merged = objs[-1]  # keeps the last finish_reason
    choice = merged["choices"][0]
    if "text" in choice:
        choice["text"] = "".join(o["choices"][0]["text"] for o in objs)
    else:
        choice["delta"]["content"] = "".join(o["choices"][0]["delta"].get("content") or "" for o in objs)
    return b"data: " + json.dumps(merged, separators=(",", ":")).encode() + b"\n\n"


async def amain(argv: list[str] | None = None) -> None:
    args = config_parser(ProxyConfig).parse_args(argv)
    cfg = ProxyConfig.model_validate({k: v for k, v in vars(args).items() if k in ProxyConfig.model_fields
                                      and v is not None})
    timer = PreciseTimer(asyncio.get_running_loop())
    await run_server(Proxy(cfg, timer).handle, args.host, args.port, timer.close)


if __name__ == "__main__":
    asyncio.run(amain())
