"""A minimal HTTP/1.1 server on asyncio streams: keep-alive, Content-Length bodies, chunked streaming.
Small on purpose: the reference engine's own overhead must be tiny and known (no framework in the path)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Server Error",
           502: "Bad Gateway", 503: "Service Unavailable"}


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        return json.loads(self.body or b"{}")


class Responder:
    def __init__(self, writer: asyncio.StreamWriter):
        self.writer = writer
        self.streaming = False
        self.keep_alive = True
        self.state: dict = {}  # per-connection state of the handler (the proxy keeps its upstream here)
        self.on_close: list[Callable[[], None]] = []

    async def send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        head = (f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}\r\ncontent-type: {content_type}\r\n"
                f"content-length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        await self.writer.drain()

    async def send_json(self, status: int, obj) -> None:
        await self.send(status, json.dumps(obj).encode())

    def start_stream(self, content_type: str = "text/event-stream") -> None:
        self.writer.write(f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ncache-control: no-cache\r\n"
                          f"transfer-encoding: chunked\r\n\r\n".encode())
        self.streaming = True

    def chunk(self, data: bytes) -> None:
        """Write one chunk now (no drain: the caller decides when to yield)."""
        self.writer.write(b"%x\r\n%s\r\n" % (len(data), data))

    async def end_stream(self) -> None:
        self.writer.write(b"0\r\n\r\n")
        await self.writer.drain()

    def abort(self) -> None:
        """Cut the connection mid-response (failure injection)."""
        self.keep_alive = False
        self.writer.transport.abort()


Handler = Callable[[Request, Responder], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = (lines[0].split(" ", 2) + ["", ""])[:3]
    headers = {}
    for ln in lines[1:]:
        if ":" in ln:
            k, v = ln.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    try:
        if headers.get("transfer-encoding", "").lower() == "chunked":  # a proxy streaming a body it did not measure
            body = await read_chunked(reader)
        else:
            body = await reader.readexactly(int(headers.get("content-length", 0) or 0))
    except ValueError:  # a size that is not a number: nothing more on this connection can be read
        return None
    return Request(method, path.split("?", 1)[0], headers, body)


async def read_chunked(reader: asyncio.StreamReader) -> bytes:
    """A chunked body (RFC 9112 section 7.1): each chunk's size in hex (any `;extension` ignored), its bytes and a
    CRLF, up to the size 0; then the trailer section, up to its empty line."""
    parts = []
    while size := int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16):
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)
    while await reader.readuntil(b"\r\n") != b"\r\n":
        pass
    return b"".join(parts)


def serve(handler: Handler, open_writers: set[asyncio.StreamWriter]
          ) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """Connection callback for asyncio.start_server: one request after another on a keep-alive connection.
    Open connections are tracked so a stopping server can close idle keep-alive clients itself."""

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        open_writers.add(writer)
        resp = Responder(writer)
        try:
            while resp.keep_alive and (req := await read_request(reader)) is not None:
                await handler(req, resp)
                if req.headers.get("connection", "").lower() == "close":
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            open_writers.discard(writer)
            for close in resp.on_close:
                close()
            if not writer.is_closing():
                writer.close()

    return on_connection


async def run_server(handler: Handler, host: str, port: int, on_stop: Callable[[], None] | None = None,
                     reuse_port: bool = False) -> None:
    """Serve until SIGTERM/SIGINT, then close the listener and every open connection and return."""
    import signal

    open_writers: set[asyncio.StreamWriter] = set()
    server = await asyncio.start_server(serve(handler, open_writers), host, port, backlog=1024,
                                        reuse_port=reuse_port or None)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()
    for w in list(open_writers):
        w.transport.abort()  # idle keep-alive clients would otherwise hold wait_closed() forever
    try:
        await asyncio.wait_for(server.wait_closed(), 5)
    except (TimeoutError, asyncio.TimeoutError):  # one class from Python 3.11 on
        pass
    if on_stop:
        on_stop()
