"""Triton's generate_stream client: NVIDIA's vLLM-backend inputs on the wire, token counts from the server's
`num_output_tokens` (never from counting events), Triton's error events, and the reference engine's Triton
protocol measured like its OpenAI one."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from harness.errors import LayerbenchError
from harness.load.client import RequestRecord, StreamClient
from harness.load.protocols import CLIENTS
from harness.load.triton_client import TritonStreamClient
from stacks.base import DeploySettings, Endpoint
from stacks.sim import SimStack
from tests.conftest import STREAM_HEAD, chunk


def ev(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def out(text: str, n: int, **more) -> bytes:
    return ev({"model_name": "m", "model_version": "1", "text_output": text, "num_output_tokens": n, **more})


def stream(*parts: bytes, terminate: bool = True):
    async def handler(reader, writer):
        writer.write(STREAM_HEAD)
        for part in parts:
            writer.write(chunk(part))
            await writer.drain()
            await asyncio.sleep(0.01)  # server-side pacing
        if terminate:
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    return handler


def run_client(scripted_server, handler) -> RequestRecord:
    async def go():
        async with scripted_server(handler) as srv:
            client = TritonStreamClient(srv.url, "m", max_tokens=5, timeout_s=5)
            return await client.measure(client.connection(), "p", RequestRecord(level=1, index=0))

    return asyncio.run(go())


def test_endpoint_protocol_picks_the_client():
    assert CLIENTS[Endpoint(base_url="http://x", model="m").protocol] is StreamClient
    assert CLIENTS[Endpoint(base_url="http://x", model="m", protocol="triton").protocol] is TritonStreamClient


def test_request_carries_the_vllm_backend_inputs():
    wire = TritonStreamClient("http://127.0.0.1:8000/pre", "tiny", max_tokens=7, ignore_eos=True).encode("hi")
    head, body = wire.split(b"\r\n\r\n", 1)
    assert head.startswith(b"POST /pre/v2/models/tiny/generate_stream HTTP/1.1\r\n")
    obj = json.loads(body)
    assert obj["text_input"] == "hi" and obj["stream"] is True and obj["exclude_input_in_output"] is True
    # a JSON *string*: Triton answers an object here with HTTP 500
    assert isinstance(obj["sampling_parameters"], str)
    assert json.loads(obj["sampling_parameters"]) == {"max_tokens": 7, "temperature": 0.0, "ignore_eos": True}


def test_chat_profiles_are_refused():
    with pytest.raises(LayerbenchError, match="api: completions"):
        TritonStreamClient("http://127.0.0.1:1", "m", api="chat")


def test_tokens_come_from_the_server_counts(scripted_server):
    # 3 text events carrying 2 + 2 + 1 tokens, and a last response with no text: 5 tokens, 3 content events
    r = run_client(scripted_server, stream(out("ab", 2, num_input_tokens=9), out("cd", 2), out("e", 1), out("", 0)))
    assert r.ok, r.error_detail
    assert r.output_tokens == 5 and r.prompt_tokens == 9
    assert len(r.event_ms) == 3 and r.ttft_ms == r.event_ms[0] < r.e2e_ms
    assert r.output_chars == 5


def test_a_count_given_as_a_one_element_list(scripted_server):
    r = run_client(scripted_server, stream(out("ab", [2]), out("c", [1])))  # type: ignore[arg-type]
    assert r.ok and r.output_tokens == 3


def test_a_stream_without_counts_is_malformed(scripted_server):
    r = run_client(scripted_server, stream(ev({"model_name": "m", "text_output": "a"})))
    assert not r.ok and r.error == "malformed" and "num_output_tokens" in r.error_detail


def test_triton_error_event_is_a_failure(scripted_server):
    r = run_client(scripted_server, stream(out("a", 1), ev({"error": "Stub process is not healthy."})))
    assert not r.ok and r.error == "server_error" and "not healthy" in r.error_detail


def test_stream_cut_is_a_disconnect(scripted_server):
    r = run_client(scripted_server, stream(out("a", 1), terminate=False))
    assert not r.ok and r.error == "disconnect"


def test_reference_engine_speaks_generate_stream(tmp_path):
    """The Triton client against the reference engine measures its known timing, like the OpenAI client."""
    stack = SimStack(DeploySettings(log_dir=tmp_path, options={"ttft_ms": 40, "itl_ms": 5}))
    with stack:
        stack.deploy()
        stack.wait_ready(30)
        ep = stack.endpoint()
        client = CLIENTS["triton"](ep.base_url, ep.model, max_tokens=12, timeout_s=30)

        async def go():
            conn = client.connection()
            return [await client.measure(conn, f"prompt {i} " * 8, RequestRecord(level=1, index=i)) for i in range(4)]

        recs = asyncio.run(go())
        truth = httpx.get(f"{ep.base_url}/sim/stats").json()
    assert all(r.ok for r in recs), [r.error_detail for r in recs]
    assert all(r.output_tokens == 12 and len(r.event_ms) == 12 for r in recs)
    assert all(r.prompt_tokens and r.prompt_tokens > 1 for r in recs)
    assert min(r.ttft_ms for r in recs) >= 40  # never earlier than the server's configured TTFT
    assert truth["ttft"]["n"] == 4
