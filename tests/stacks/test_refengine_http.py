"""The reference engine's HTTP/1.1 request reader: a body sent with Content-Length, and one streamed chunked by a
proxy that forwards it without measuring it (smg 1.13.0 does so with retries off)."""

from __future__ import annotations

import asyncio

import pytest

from stacks.refengine.http import read_request


def _read(wire: bytes):
    async def go():
        reader = asyncio.StreamReader()
        reader.feed_data(wire)
        reader.feed_eof()
        return await read_request(reader), await reader.read()

    return asyncio.run(go())


BODY = b'{"model": "m", "prompt": "one two three"}'


def test_a_body_with_content_length_is_read_and_the_next_request_left_alone():
    req, rest = _read(b"POST /v1/completions?x=1 HTTP/1.1\r\nContent-Length: %d\r\n\r\n%sGET /" % (len(BODY), BODY))
    assert (req.method, req.path, req.body, rest) == ("POST", "/v1/completions", BODY, b"GET /")


@pytest.mark.parametrize("cuts", [[len(BODY)], [1, 7, len(BODY) - 8], [16, len(BODY) - 16]])
def test_a_chunked_body_is_joined_whatever_its_chunks_extensions_and_trailers(cuts):
    chunks, at = [], 0
    for i, n in enumerate(cuts):
        ext = b";name=v" if i % 2 else b""
        chunks.append(b"%x%s\r\n%s\r\n" % (n, ext, BODY[at:at + n]))
        at += n
    wire = (b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(chunks)
            + b"0\r\nX-Trailer: 1\r\n\r\nGET /")
    req, rest = _read(wire)
    assert req.body == BODY and rest == b"GET /"


def test_a_chunk_size_that_is_not_hex_ends_the_connection():
    req, _ = _read(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")
    assert req is None
