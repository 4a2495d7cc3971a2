"""The floor: the least a streaming client can do. Closed loop, one keep-alive socket per slot, one clock
read per socket read, TTFT stamped at the first read holding a content event. No SSE or chunk parsing
beyond finding markers, so what remains of its error is the machine and the server, not the client.
Written for the benchmark only; it understands the reference engine's stream and nothing else."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

CONTENT = b'"text":"t'  # the reference engine's content events carry "tok "; role/usage events do not
END = b"0\r\n\r\n"


async def _one(reader, writer, request: bytes) -> tuple[float, list[float], float, int]:
    t0 = time.perf_counter_ns()
    writer.write(request)
    events: list[float] = []
    tail = b""
    while True:
        data = await reader.read(65536)
        t = time.perf_counter_ns()
        if not data:
            raise ConnectionError("closed")
        n = (tail + data).count(CONTENT)
        events += [(t - t0) / 1e6] * n
        tail = (tail + data)[-16:]
        if tail.endswith(END):
            return events[0], events, (t - t0) / 1e6, t0


@dataclass(frozen=True)
class Server:
    """Where the floor sends, and what it asks for: the engine's host and port, the served model's name and the
    tokens each request streams."""

    host: str
    port: int
    model: str
    max_tokens: int


async def floor_level(server: Server, concurrency: int, n: int, on_measure_start: Callable[[], None] | None = None
                      ) -> tuple[list[tuple[float, list[float], float, int]], float]:
    """One warmup wave, then n measured requests: ([(ttft_ms, event_ms, e2e_ms, start_ns)], measured window in s);
    start_ns is the request's start on perf_counter_ns, so start_ns + ttft_ms·1e6 is when its first event came."""
    host = server.host
    body = json.dumps({"model": server.model, "prompt": "x" * 64, "max_tokens": server.max_tokens, "stream": True,
                       "ignore_eos": True}).encode()
    request = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    conns = [await asyncio.open_connection(host, server.port) for _ in range(concurrency)]
    try:
        await asyncio.gather(*(_one(r, w, request) for r, w in conns))  # warmup wave
        if on_measure_start:
            on_measure_start()
        left = n
        out: list[tuple[float, list[float], float, int]] = []

        async def slot(reader, writer):
            nonlocal left
            while left > 0:
                left -= 1
                out.append(await _one(reader, writer, request))

        t0 = time.perf_counter()
        await asyncio.gather(*(slot(r, w) for r, w in conns))
        return out, time.perf_counter() - t0
    finally:
        for _, w in conns:
            w.close()
