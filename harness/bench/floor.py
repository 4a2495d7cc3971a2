"""The floor: the least a streaming client can do. Closed loop, one keep-alive socket per slot, one clock
read per socket read, TTFT stamped at the first read holding a content event. No SSE or chunk parsing
beyond finding the markers, so what remains of its error is the machine and the server, not the client."""

from __future__ import annotations

import asyncio
import json
import time

CONTENT = b'"text":"t'  # the reference engine's content events carry "tok "; role/usage events do not
END = b"0\r\n\r\n"


async def _one(reader, writer, request: bytes) -> tuple[float, float]:
    t0 = time.perf_counter_ns()
    writer.write(request)
    ttft = 0
    tail = b""
    while True:
        data = await reader.read(65536)
        t = time.perf_counter_ns()
        if not data:
            raise ConnectionError("closed")
        if not ttft and CONTENT in tail + data:
            ttft = t
        tail = (tail + data)[-16:]
        if tail.endswith(END):
            return (ttft - t0) / 1e6, (t - t0) / 1e6


async def floor_level(host: str, port: int, model: str, concurrency: int, n: int, max_tokens: int) -> list[tuple]:
    """Returns [(ttft_ms, e2e_ms)] for n requests at the given concurrency."""
    body = json.dumps({"model": model, "prompt": "x" * 64, "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True}).encode()
    request = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    left = n
    out: list[tuple] = []

    async def slot():
        nonlocal left
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while left > 0:
                left -= 1
                out.append(await _one(reader, writer, request))
        finally:
            writer.close()

    await asyncio.gather(*(slot() for _ in range(concurrency)))
    return out
