"""The profiler's parts that need no deployment: whether py-spy may attach here, a thread's busy share from
/proc schedstat, the layer's timing headers kept per request, and the commands that refuse before deploying."""

from __future__ import annotations

import asyncio
import os

import pytest

from harness.cli.inputs import cpu_profiling
from harness.cli.main import main
from harness.errors import LayerbenchError
from harness.load import profiler
from harness.load.client import RequestRecord, StreamClient
from harness.measure.sweep import header_dists
from tests.conftest import chunk
from tests.load.test_sse import DONE, USAGE, text_ev


def test_a_thread_always_on_a_cpu_or_waiting_for_one_is_busy_the_whole_window():
    before = {1: (0, 0), 2: (0, 0)}
    after = {1: (600, 400), 2: (100, 0), 3: (50, 0)}  # thread 3 started during the window
    assert profiler.busiest(before, after, 1000) == pytest.approx(1.0)
    assert profiler.busiest({}, {}, 1000) is None
    mine = profiler.schedstat(os.getpid())
    assert mine and all(run >= 0 and wait >= 0 for run, wait in mine.values())


def test_attaching_is_refused_with_the_setting_to_change(monkeypatch, tmp_path):
    status, scope = tmp_path / "status", tmp_path / "ptrace_scope"
    status.write_text("Name:\tpython\nCapEff:\t0000000000000000\n")
    scope.write_text("1\n")
    real = profiler.Path

    def fake(p, *a):
        return status if str(p) == "/proc/self/status" else scope if str(p).endswith("ptrace_scope") else real(p)

    monkeypatch.setattr(profiler, "Path", fake)
    why = profiler.attach_refused()
    assert why and "ptrace_scope is 1" in why and "SYS_PTRACE" in why
    status.write_text(f"CapEff:\t{1 << profiler.CAP_SYS_PTRACE:016x}\n")
    assert profiler.attach_refused() is None
    monkeypatch.setattr(profiler, "pyspy", lambda: None)
    monkeypatch.setenv("LAYERBENCH_CPU_PROFILE", "1")  # the default's own path, not the tests' off
    with pytest.raises(LayerbenchError, match="--cpu-profile: py-spy is not installed"):
        cpu_profiling(True, "sequential")
    on, why = cpu_profiling(None, "sequential")
    assert not on and why and "py-spy is not installed" in why
    assert cpu_profiling(False, "sequential") == (False, None)


def test_a_stack_that_starts_nothing_has_nothing_to_diagnose(tmp_path, capsys):
    assert main(["diagnose", "--stack", "endpoint", "--results-dir", str(tmp_path)]) == 2
    assert "declares no processes" in capsys.readouterr().err and not any(tmp_path.iterdir())


def test_the_layers_timing_header_is_kept_per_request(scripted_server):
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
            b"x-litellm-overhead-duration-ms: 3.25\r\nx-other: 1\r\nconnection: close\r\n\r\n")

    async def handler(reader, writer):
        writer.write(head)
        for part in (text_ev("a"), USAGE, DONE):
            writer.write(chunk(part))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def go(keep):
        async with scripted_server(handler) as srv:
            client = StreamClient(srv.url, "m", max_tokens=5, timeout_s=5)
            client.keep_headers = keep
            conn = client.connection()
            rec = await client.measure(conn, "p", RequestRecord(level=1, index=0))
            conn.close()
            return rec

    kept = asyncio.run(go(("x-litellm-overhead-duration-ms",)))
    assert kept.ok and kept.headers == {"x-litellm-overhead-duration-ms": "3.25"}
    assert kept.to_json()["headers"] == kept.headers
    plain = asyncio.run(go(()))
    assert plain.headers == {} and "headers" not in plain.to_json()  # records of other stacks keep their shape
    d = header_dists([kept.to_json(), {**kept.to_json(), "headers": {"x-litellm-overhead-duration-ms": "None"}}])
    assert d["x-litellm-overhead-duration-ms"].n == 1 and d["x-litellm-overhead-duration-ms"].p50 == 3.25
