"""SSE / chunked parsing and the streaming client's handling of real-world stream shapes."""

import asyncio
import json

import pytest

from harness.load.client import RequestRecord, StreamClient
from harness.load.sse import SSEParser
from harness.wire import ChunkedDecoder
from tests.conftest import STREAM_HEAD, chunk


def ev(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def text_ev(t):
    return ev({"choices": [{"index": 0, "text": t}]})


USAGE = ev({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}})
DONE = ev(b"[DONE]")


def test_event_split_across_reads_keeps_first_byte_time():
    p = SSEParser()
    whole = text_ev("hello")
    assert p.feed(whole[:9], 100) == []
    assert p.pending
    events = p.feed(whole[9:], 200)
    assert events == [(100, whole[6:-2])]  # stamped at the read that carried its first byte
    assert not p.pending


def test_several_events_in_one_read_and_crlf():
    p = SSEParser()
    data = (text_ev("a") + text_ev("b") + DONE).replace(b"\n", b"\r\n")
    events = p.feed(data, 5)
    assert [e[1] for e in events] == [b'{"choices": [{"index": 0, "text": "a"}]}',
                                      b'{"choices": [{"index": 0, "text": "b"}]}', b"[DONE]"]
    assert all(t == 5 for t, _ in events)


def test_trailing_partial_event_gets_time_of_its_own_first_read():
    p = SSEParser()
    first, second = text_ev("a"), text_ev("b")
    assert [t for t, _ in p.feed(first + second[:4], 10)] == [10]
    assert [t for t, _ in p.feed(second[4:], 20)] == [10]  # 'b' began arriving in the read at t=10


def test_comments_and_other_fields_are_ignored():
    p = SSEParser()
    assert p.feed(b": keep-alive\n\nevent: x\nid: 3\ndata: 1\n\n", 0) == [(0, b"1")]


def test_chunked_decoder_any_split():
    body = text_ev("hello") + USAGE + DONE
    wire = chunk(body[:20]) + chunk(body[20:]) + b"0\r\n\r\n"
    for step in (1, 2, 3, 7, len(wire)):
        d = ChunkedDecoder()
        out = b"".join(d.feed(wire[i:i + step]) for i in range(0, len(wire), step))
        assert out == body and d.done


def test_chunked_decoder_rejects_garbage():
    with pytest.raises(ValueError):
        ChunkedDecoder().feed(b"zz\r\n")


def run_client(scripted_server, handler, api="completions"):
    async def go():
        async with scripted_server(handler) as srv:
            client = StreamClient(srv.url, "m", api=api, max_tokens=5, timeout_s=5)
            conn = client.connection()
            rec = RequestRecord(level=1, index=0)
            await client.measure(conn, "p", rec)
            conn.close()
            return rec

    return asyncio.run(go())


def stream(*parts, delay=0.0, head=STREAM_HEAD, terminate=True):
    async def handler(reader, writer):
        writer.write(head)
        for part in parts:
            writer.write(chunk(part))
            await writer.drain()
            if delay:
                await asyncio.sleep(delay)  # server-side pacing, not a readiness wait
        if terminate:
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    return handler


def test_client_completion_stream_with_usage(scripted_server):
    parts = [text_ev("a"), text_ev("bc")[:10], text_ev("bc")[10:] + text_ev("d"), USAGE, DONE]
    r = run_client(scripted_server, stream(*parts, delay=0.02))
    assert r.ok, r.error_detail
    assert r.output_tokens == 5 and r.prompt_tokens == 7  # from usage, not from the 3 content events
    assert len(r.event_ms) == 3
    assert r.ttft_ms == r.event_ms[0] < r.e2e_ms
    assert r.event_ms[1] >= r.event_ms[0] + 15  # the split event is stamped at its first part's arrival


def test_client_role_only_first_chunk_is_not_ttft(scripted_server):
    role = ev({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    content = ev({"choices": [{"index": 0, "delta": {"content": "hi"}}]})
    r = run_client(scripted_server, stream(role, content, USAGE, DONE, delay=0.05), api="chat")
    assert r.ok
    assert len(r.event_ms) == 1 and r.ttft_ms >= 40  # the role chunk 50 ms earlier did not count


def test_client_error_event_is_a_failure(scripted_server):
    err = ev({"error": {"message": "engine dead", "code": 500}})
    r = run_client(scripted_server, stream(text_ev("a"), err, DONE))
    assert not r.ok and r.error == "server_error" and "engine dead" in r.error_detail


def test_client_stream_cut_mid_event_is_a_failure(scripted_server):
    r = run_client(scripted_server, stream(text_ev("a"), text_ev("b")[:8], terminate=False))
    assert not r.ok and r.error == "disconnect" and "partial event" in r.error_detail


def test_client_bad_chunk_framing_is_malformed(scripted_server):
    async def handler(reader, writer):
        writer.write(STREAM_HEAD + b"zz\r\nnot a chunk\r\n")
        await writer.drain()

    r = run_client(scripted_server, handler)
    assert not r.ok and r.error == "malformed" and "chunk size" in r.error_detail


def test_client_missing_usage_is_malformed(scripted_server):
    r = run_client(scripted_server, stream(text_ev("a"), DONE))
    assert not r.ok and r.error == "malformed"


def test_client_http_error_status(scripted_server):
    async def handler(reader, writer):
        body = b'{"error": "overloaded"}'
        writer.write(b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()

    r = run_client(scripted_server, handler)
    assert not r.ok and r.error == "http_429" and r.http_status == 429 and "overloaded" in r.error_detail


def test_client_connect_refused():
    async def go():
        client = StreamClient("http://127.0.0.1:9", "m", timeout_s=2)
        rec = RequestRecord(level=1, index=0)
        return await client.measure(client.connection(), "p", rec)

    r = asyncio.run(go())
    assert not r.ok and r.error == "connect"


def test_client_timeout(scripted_server):
    async def handler(reader, writer):
        writer.write(STREAM_HEAD + chunk(text_ev("a")))
        await writer.drain()
        await asyncio.sleep(3)

    async def go():
        async with scripted_server(handler) as srv:
            client = StreamClient(srv.url, "m", timeout_s=0.5)
            return await client.measure(client.connection(), "p", RequestRecord(level=1, index=0))

    r = asyncio.run(go())
    assert not r.ok and r.error == "timeout"


def test_a_connection_the_server_closed_is_reopened_for_the_next_request(scripted_server):
    # STREAM_HEAD says `connection: close`: each request needs a new socket, and the first socket's late close
    # callbacks must not touch the second's
    async def go():
        async with scripted_server(stream(text_ev("a"), USAGE, DONE)) as srv:
            client = StreamClient(srv.url, "m", max_tokens=5, timeout_s=5)
            conn = client.connection()
            recs = [await client.measure(conn, "p", RequestRecord(level=1, index=i)) for i in range(3)]
            conn.close()
            return recs

    recs = asyncio.run(go())
    assert [r.ok for r in recs] == [True, True, True], [r.error_detail for r in recs]
    assert all(r.output_tokens == 5 and len(r.event_ms) == 1 for r in recs)


def test_a_head_split_across_reads_and_a_body_delimited_by_close(scripted_server):
    async def handler(reader, writer):
        head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n"  # no length, not chunked
        for part in (head[:9], head[9:30], head[30:] + text_ev("a")[:5], text_ev("a")[5:] + USAGE + DONE):
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(0.01)  # server-side pacing: each part its own read

    r = run_client(scripted_server, handler)
    assert r.ok, r.error_detail
    assert r.http_status == 200 and len(r.event_ms) == 1 and r.output_tokens == 5


def test_an_oversized_head_and_an_event_that_is_not_an_object_are_malformed(scripted_server):
    async def endless_head(reader, writer):
        writer.write(b"HTTP/1.1 200 OK\r\n" + b"x-pad: " + b"p" * 70_000)
        await writer.drain()
        await asyncio.sleep(1)

    r = run_client(scripted_server, endless_head)
    assert not r.ok and r.error == "malformed" and "head longer" in r.error_detail
    r = run_client(scripted_server, stream(ev([1, 2]), USAGE, DONE))
    assert not r.ok and r.error == "malformed" and "not an object" in r.error_detail
