"""One keep-alive HTTP/1.1 connection whose streamed response is parsed in the event loop's read callback.

An asyncio `Protocol`, not a StreamReader: each read is stamped and parsed where the loop hands it over
(`data_received`), and the request's coroutine wakes once, when its response is complete. Through a StreamReader
every read also cost a future, a task step and a buffer copy before the stamp: on the 2-core CPU host that was
about a quarter of the client's CPU per SSE event (`make bench-harness`, scale section), and the stamp came after
the task step rather than at the read.

A `Response` does the parsing: the status line and headers, then the body (chunked, by Content-Length, or to the
connection's close), which it splits into SSE events for the client's `on_event`. Whatever goes wrong ends the
request's future with the exception the client records: StreamProtocolError, ValueError (chunk framing) or
ConnectionError (the peer closed mid-response)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from harness.load.sse import SSEParser
from harness.wire import ChunkedDecoder

MAX_HEAD = 1 << 16  # a response head longer than this is malformed (a StreamReader's default limit, as before)


class StreamProtocolError(Exception):
    def __init__(self, kind: str, detail: str, status: int | None = None):
        super().__init__(detail)
        self.kind, self.detail, self.status = kind, detail, status


def parse_head(raw: bytes) -> tuple[int, dict[str, str]]:
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise StreamProtocolError("malformed", f"bad status line {lines[0][:80]!r}")
    headers = {}
    for ln in lines[1:]:
        if ":" in ln:
            k, v = ln.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    return int(parts[1]), headers


class Response:
    """One response as it arrives. `on_event(data, t_first_byte_ns)` returns whether the event was the stream's
    last (`[DONE]`); `done` (a future) ends with None once the body is complete, or with the exception."""

    __slots__ = ("on_event", "done", "status", "keep_alive", "headers", "_head", "_length", "_received", "_chunks",
                 "_sse", "_seen_last", "_error_body", "t_end_ns")

    def __init__(self, on_event: Callable[[bytes, int], bool], done: asyncio.Future):
        self.on_event, self.done = on_event, done
        self.status: int | None = None
        self.keep_alive = True
        self.headers: dict[str, str] = {}  # the response head's, names lower-case
        self._head = b""
        self._length: int | None = None
        self._received = 0
        self._chunks: ChunkedDecoder | None = None
        self._sse = SSEParser()
        self._seen_last = False
        self._error_body: list[bytes] | None = None  # a non-200 response's body, kept for its message
        self.t_end_ns = 0

    @property
    def chunked(self) -> bool:
        return self._chunks is not None

    def feed(self, data: bytes, t_ns: int) -> None:
        if self.done.done():
            return  # bytes after the response ended (or failed): nothing of this request's
        try:
            if self.status is None:
                data = self._read_head(data)
                if self.status is None or not data:
                    return
            self._read_body(data, t_ns)
        except Exception as e:  # noqa: BLE001 - the request's coroutine raises it (the loop would only log it)
            self.done.set_exception(e)

    def eof(self) -> None:
        """The peer closed the connection."""
        if self.done.done():
            return
        if self.status is None:
            self.done.set_exception(ConnectionError("connection closed before the response's head"))
        elif self._error_body is not None:
            self._fail_status()
        elif self._seen_last or (self._length is not None and self._received >= self._length):
            self._finish()
        else:
            partial = " (partial event)" if self._sse.pending else ""
            self.done.set_exception(StreamProtocolError("disconnect", "connection closed mid-stream" + partial))

    def _read_head(self, data: bytes) -> bytes:
        buf = self._head + data if self._head else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                raise StreamProtocolError("malformed", f"response head longer than {MAX_HEAD} bytes")
            self._head = buf
            return b""
        self._head = b""
        status, headers = parse_head(buf[:end])
        self.status, self.headers = status, headers
        if headers.get("transfer-encoding", "").lower() == "chunked":
            self._chunks = ChunkedDecoder()
        if "content-length" in headers:
            self._length = int(headers["content-length"])
        self.keep_alive = headers.get("connection", "").lower() != "close"
        if status != 200:
            self._error_body = []
        rest = buf[end + 4:]
        if not rest and self._length == 0:
            self._ended()
        return rest

    def _read_body(self, data: bytes, t_ns: int) -> None:
        self._received += len(data)
        body = self._chunks.feed(data) if self._chunks is not None else data
        if self._error_body is not None:
            self._error_body.append(body)
        else:
            for t_ev, payload in self._sse.feed(body, t_ns):
                if self.on_event(payload, t_ev):
                    self._seen_last = True
        if (self._chunks is not None and self._chunks.done) or (
                self._length is not None and self._received >= self._length):
            self._ended()
        elif self._error_body is not None and self._chunks is None and self._length is None:
            self._fail_status()  # a body delimited by the close: its first read says enough

    def _ended(self) -> None:
        if self._error_body is not None:
            self._fail_status()
        else:
            self._finish()

    def _finish(self) -> None:
        self.t_end_ns = time.perf_counter_ns()
        if self._sse.pending:
            self.done.set_exception(StreamProtocolError("malformed", "stream ended inside an event"))
        else:
            self.done.set_result(None)

    def _fail_status(self) -> None:
        body = b"".join(self._error_body or ())
        self.done.set_exception(StreamProtocolError(f"http_{self.status}", body[:300].decode(errors="replace"),
                                                    self.status))


class _Wire(asyncio.Protocol):
    """One transport's protocol: a reopened connection gets a new one, so a closed transport's late callbacks
    cannot touch its successor."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.response: Response | None = None

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter_ns()  # the read's arrival: before any parsing
        if self.response is not None:
            self.response.feed(data, t)

    def eof_received(self) -> bool:
        if self.response is not None:
            self.response.eof()
        return False  # let the transport close

    def connection_lost(self, exc: Exception | None) -> None:
        if self.response is not None:
            self.response.eof()


class Connection:
    """One HTTP/1.1 keep-alive connection; reopened on its next use after the server closed it or an error."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.wire: _Wire | None = None

    async def ensure(self) -> None:
        if self.wire is None or self.wire.transport is None or self.wire.transport.is_closing():
            self.wire = None
            _, self.wire = await asyncio.get_running_loop().create_connection(_Wire, self.host, self.port)

    def send(self, request: bytes, response: Response) -> None:
        wire = self.wire
        assert wire is not None and wire.transport is not None
        wire.response = response
        wire.transport.write(request)

    def close(self) -> None:
        if self.wire is not None and self.wire.transport is not None:
            self.wire.transport.close()
        self.wire = None
