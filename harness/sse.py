"""Incremental HTTP/1.1 chunked-body and Server-Sent-Events parsing for the streaming hot path.

Both parsers take bytes as they arrive and keep no more state than a partial line. The SSE parser returns,
for each completed event, the arrival time of the read that carried the event's *first* byte, so TTFT is
stamped at the first byte of the first content event even when the event is split across reads."""

from __future__ import annotations


class ChunkedDecoder:
    """Decodes `Transfer-Encoding: chunked`. feed() returns body bytes; `done` after the 0-size chunk."""

    __slots__ = ("_buf", "_need", "done")

    def __init__(self) -> None:
        self._buf = b""
        self._need = -1  # -1: reading a size line; >= 0: bytes of chunk data (+2 for CRLF) still expected
        self.done = False

    def feed(self, data: bytes) -> bytes:
        buf = self._buf + data if self._buf else data
        out = []
        pos = 0
        n = len(buf)
        while pos < n and not self.done:
            if self._need < 0:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                size_field = buf[pos:eol].split(b";", 1)[0].strip()
                try:
                    size = int(size_field, 16)
                except ValueError:
                    raise ValueError(f"bad chunk size line {buf[pos:eol][:40]!r}") from None
                pos = eol + 2
                if size == 0:
                    self.done = True
                    break
                self._need = size + 2
            else:
                take = min(self._need, n - pos)
                data_end = pos + take
                # the last two bytes of a chunk are its CRLF, not body
                body_left = self._need - 2
                if body_left > 0:
                    out.append(buf[pos : pos + min(take, body_left)])
                self._need -= take
                pos = data_end
                if self._need == 0:
                    self._need = -1
        self._buf = buf[pos:]
        return b"".join(out)


class SSEParser:
    """Splits a byte stream into SSE events; returns (t_first_byte_ns, data) for each complete event.

    Only `data:` fields matter for OpenAI and Triton streams; comments and other fields are skipped.
    `pending` tells whether a partial event is buffered (a stream cut mid-event)."""

    __slots__ = ("_buf", "_t0")

    def __init__(self) -> None:
        self._buf = b""
        self._t0 = 0

    @property
    def pending(self) -> bool:
        return bool(self._buf.strip())

    def feed(self, data: bytes, t_ns: int) -> list[tuple[int, bytes]]:
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if not self._buf.strip():
            # a new event starts in this read: its first byte arrived now
            self._buf = data.lstrip(b"\n")
            self._t0 = t_ns
        else:
            self._buf += data
        events = []
        buf = self._buf
        start = 0
        t_event = self._t0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            block = buf[start:end]
            lines = [ln[5:].lstrip(b" ") if ln.startswith(b"data:") else None for ln in block.split(b"\n")]
            payload = [ln for ln in lines if ln is not None]
            if payload:
                events.append((t_event, b"\n".join(payload)))
            start = end + 2
            while start < len(buf) and buf[start : start + 1] == b"\n":
                start += 1
            t_event = t_ns  # any later event in this buffer completed with this read
        self._buf = buf[start:]
        if start:
            self._t0 = t_ns
        return events
