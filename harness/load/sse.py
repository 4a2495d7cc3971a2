"""Incremental Server-Sent-Events parsing for the streaming hot path (the chunked body under it: harness/wire.py).

The parser takes bytes as they arrive and keeps no more state than a partial line. It returns,
for each completed event, the arrival time of the read that carried the event's *first* byte, so TTFT is
stamped at the first byte of the first content event even when the event is split across reads.
Malformed chunked framing raises ValueError (the client records it as a failed request); the SSE parser
accepts any bytes, as the SSE spec does."""

from __future__ import annotations


def _event_data(block: bytes) -> bytes | None:
    """The `data` field values of one event joined by LF, or None when it has none (then it is not dispatched).

    Per the SSE spec a `data` line without a colon is an empty value, and exactly one space after the colon
    is dropped (a payload's own leading spaces are kept). Other fields and `:` comments are ignored."""
    if block[:6] == b"data: " and b"\n" not in block:  # one data line, as OpenAI and Triton stream
        return block[6:]
    values = []
    for ln in block.split(b"\n"):
        if ln.startswith(b"data"):
            if len(ln) == 4:
                values.append(b"")
            elif ln[4] == 58:  # ":"
                values.append(ln[6:] if ln[5:6] == b" " else ln[5:])
    return b"\n".join(values) if values else None


class SSEParser:
    """Splits a byte stream into SSE events; returns (t_first_byte_ns, data) for each complete event.

    Only `data` fields matter for OpenAI and Triton streams; comments and other fields are skipped.
    `pending` tells whether a partial event is buffered (a stream cut mid-event)."""

    __slots__ = ("_buf", "_t0", "_cr")

    def __init__(self) -> None:
        self._buf = b""  # never starts with a line break: empty means no event has begun
        self._t0 = 0
        self._cr = False  # the last read ended in CR: a LF opening the next read is the same line break

    @property
    def pending(self) -> bool:
        return bool(self._buf.strip())

    def feed(self, data: bytes, t_ns: int) -> list[tuple[int, bytes]]:
        if not self._buf and not self._cr and data[-2:] == b"\n\n" and data.find(b"\n\n") == len(data) - 2 \
                and data[:1] != b"\n" and b"\r" not in data:
            # one whole event in one read, as servers stream: the general path below gives the same answer
            payload = _event_data(data[:-2])
            return [(t_ns, payload)] if payload is not None else []
        if self._cr and data:
            self._cr = False
            if data[:1] == b"\n":
                data = data[1:]
        if b"\r" in data:
            # CRLF, CR and LF all end a line; normalise to LF
            self._cr = data[-1:] == b"\r"
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        scan = 0  # an event longer than a read (>64 KB): its end is searched for in the new bytes only
        if not self._buf:
            # a new event starts in this read: its first byte arrived now
            self._buf = data.lstrip(b"\n")
            self._t0 = t_ns
        else:
            scan = len(self._buf) - 1  # the buffer holds no blank line yet; one may straddle the seam
            self._buf += data
        events = []
        buf = self._buf
        start = 0
        t_event = self._t0
        while True:
            end = buf.find(b"\n\n", max(start, scan))
            if end < 0:
                break
            payload = _event_data(buf[start:end])
            if payload is not None:
                events.append((t_event, payload))
            start = end + 2
            while start < len(buf) and buf[start] == 10:  # "\n"
                start += 1
            t_event = t_ns  # any later event in this buffer completed with this read
        if start:
            self._buf = buf[start:]
            self._t0 = t_ns
        return events
