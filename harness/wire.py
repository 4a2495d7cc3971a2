"""Incremental HTTP/1.1 chunked-body decoding, shared by the load client (harness/load/http1.py) and the reference
engine's proxy (stacks/refengine/proxy.py): bytes in as they arrive, body bytes out, no more state than a partial
size line. Malformed framing raises ValueError (the client records it as a failed request)."""

from __future__ import annotations

_HEX = b"0123456789abcdefABCDEF"
# A size line is a few hex digits plus optional extensions; a peer that never sends CRLF must not make the
# buffer grow without bound.
MAX_SIZE_LINE = 4096


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
            need = self._need
            if need < 0:
                eol = buf.find(b"\r\n", pos)
                if (eol if eol >= 0 else n) - pos > MAX_SIZE_LINE:
                    raise ValueError(f"chunk size line longer than {MAX_SIZE_LINE} bytes")
                if eol < 0:
                    break
                size_field = buf[pos:eol]
                if b";" in size_field:
                    size_field = size_field.split(b";", 1)[0]
                size_field = size_field.strip(b" \t")
                # only hex digits: int(x, 16) would also take "-5", "+5", "0x5" and "1_0"
                if not size_field or size_field.strip(_HEX):
                    raise ValueError(f"bad chunk size line {buf[pos:eol][:40]!r}")
                size = int(size_field, 16)
                pos = eol + 2
                if size == 0:
                    self.done = True
                    break
                end = pos + size
                if end + 2 <= n:  # the whole chunk is here (one per read, as servers stream): take it at once
                    if buf[end : end + 2] != b"\r\n":
                        raise ValueError(f"chunk data not followed by CRLF: {buf[end : end + 2]!r}")
                    out.append(buf[pos:end])
                    pos = end + 2
                    continue
                self._need = size + 2
            else:
                take = min(need, n - pos)
                # the last two bytes of a chunk are its CRLF, not body
                body_left = need - 2
                if body_left > 0:
                    out.append(buf[pos : pos + min(take, body_left)])
                crlf_at = pos + max(body_left, 0)
                if pos + take > crlf_at:
                    # check the CRLF (or the part of it in this read): a wrong chunk size would otherwise
                    # silently splice framing bytes into the body
                    seen = 2 - min(need, 2)
                    if buf[crlf_at : pos + take] != b"\r\n"[seen : seen + pos + take - crlf_at]:
                        raise ValueError(f"chunk data not followed by CRLF: {buf[crlf_at : crlf_at + 2]!r}")
                self._need = need - take
                pos += take
                if self._need == 0:
                    self._need = -1
        self._buf = buf[pos:] if pos < n else b""
        return out[0] if len(out) == 1 else b"".join(out)
