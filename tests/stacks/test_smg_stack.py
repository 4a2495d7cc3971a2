"""The SGLang Model Gateway as a stack: its command line (every engine a worker, loopback on both of its ports,
retries and the circuit breaker off), its policy a typed option, its metrics port audited and its serving port
declared without /metrics; and a real smg from .venv-smg in front of reference engines, streaming an answer through
byte for byte, event by event, and spreading requests over two of them by its policy."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from harness.errors import LayerbenchError
from harness.load.client import RequestRecord, StreamClient
from harness.profile.schema import EngineSettings
from stacks.base import DeploySettings, get_stack
from stacks.sim import SimStack
from stacks.smg import SMG_VENV, SmgStack


def gateway(**options) -> SmgStack:
    return get_stack("smg")(DeploySettings(options=options))  # type: ignore[return-value]


def test_every_engine_is_a_worker_and_both_ports_bind_loopback(tmp_path, monkeypatch):
    import stacks.smg as mod

    exe = tmp_path / "bin" / "smg"
    exe.parent.mkdir(parents=True)
    exe.write_text("")
    monkeypatch.setattr(mod, "SMG_VENV", tmp_path)
    s = gateway(policy="round_robin")
    cmd, _ = s.front_commands(["http://127.0.0.1:8123", "http://127.0.0.1:8124"])
    assert cmd[:2] == [str(exe), "launch"]
    at = cmd.index("--worker-urls")
    assert cmd[at + 1:at + 3] == ["http://127.0.0.1:8123", "http://127.0.0.1:8124"]
    flag = {a: cmd[i + 1] for i, a in enumerate(cmd) if a.startswith("--") and i + 1 < len(cmd)}
    assert flag["--policy"] == "round_robin" and flag["--host"] == flag["--prometheus-host"] == "127.0.0.1"
    assert {int(flag["--port"]), int(flag["--prometheus-port"])} == set(s.ports()) and len(set(s.ports())) == 2
    assert "--disable-retries" in cmd and "--disable-circuit-breaker" in cmd
    assert "--backend" not in cmd  # its openai backend is the proxy to a cloud API, not a router over workers


def test_its_metrics_port_is_audited_and_its_serving_port_declared_without_metrics():
    s = gateway()
    ends = s.metric_endpoints()
    assert ends == {"smg_metrics": f"http://127.0.0.1:{s.metrics_port}/metrics",
                    "engine": f"{s.engine.endpoint().base_url}/metrics"}
    assert s.metricless_endpoints() == {"api": f"{s.endpoint().base_url}/metrics"}
    assert s.options.policy == "cache_aware"  # the gateway's own default
    assert [m.family for m in s.layer_metrics()] == ["smg_router_request_duration_seconds_sum"]


@pytest.mark.parametrize("policy", ["manual", "consistent_hashing", "passthrough", "bucket"])
def test_a_policy_it_cannot_use_in_front_of_vllm_is_refused_with_one_message(policy):
    with pytest.raises(LayerbenchError) as e:
        gateway(policy=policy)
    msg = str(e.value)
    assert msg.startswith("stack smg: option policy: ") and "'cache_aware'" in msg and repr(policy) in msg
    assert "\n" not in msg


def test_power_of_two_is_refused_in_front_of_one_engine_as_smg_refuses_it():
    with pytest.raises(LayerbenchError, match="stack smg: option policy power_of_two needs at least two workers"):
        gateway(policy="power_of_two")
    two = get_stack("smg")(DeploySettings(engine=EngineSettings(replicas=2), options={"policy": "power_of_two"}))
    assert list(two.metric_endpoints()) == ["smg_metrics", "engine@0", "engine@1"]


def test_a_missing_install_names_the_setup_target(tmp_path, monkeypatch):
    import stacks.smg as mod

    monkeypatch.setattr(mod, "SMG_VENV", tmp_path / "none")
    with pytest.raises(LayerbenchError, match="make setup-smg"):
        gateway().front_command("http://127.0.0.1:1")


class _SmgOverSims(SmgStack):
    """The real gateway in front of reference engines (an engine that starts in a second) instead of vLLM."""

    kind = "smg-over-sim"

    def engine_behind(self, settings: DeploySettings | None = None):
        return SimStack((settings or self.settings).model_copy(update={"options": {"ttft_ms": 5, "itl_ms": 10}}))


def _installed() -> None:
    if not (SMG_VENV / "bin" / "smg").exists():
        pytest.fail("smg is not installed: make setup-smg (make test installs it)")


def _raw_stream(base_url: str, model: str) -> bytes:
    body = {"model": model, "prompt": "one two three four", "max_tokens": 6, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0.0}
    with httpx.stream("POST", f"{base_url}/v1/completions", json=body, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        return b"".join(r.iter_raw())


@pytest.mark.slow
def test_a_real_gateway_streams_one_engines_answer_through_byte_for_byte(tmp_path):
    _installed()
    with _SmgOverSims(DeploySettings(log_dir=tmp_path)) as g:  # cache_aware, its default
        g.deploy()
        g.wait_ready(60)
        ep, engine = g.endpoint(), g.engine.endpoint()
        direct, through = _raw_stream(engine.base_url, ep.model), _raw_stream(ep.base_url, ep.model)
        # the engine numbers its answers and stamps them with the second they were made: all else is the same bytes
        for pattern, same in ((rb'"id":"cmpl-sim\d+"', b'"id":"cmpl-sim"'), (rb'"created":\d+', b'"created":0')):
            direct, through = re.sub(pattern, same, direct), re.sub(pattern, same, through)
        assert through == direct and through.endswith(b"data: [DONE]\n\n")
        client = StreamClient(ep.base_url, ep.model, api="chat", max_tokens=8)

        async def one() -> RequestRecord:
            conn, rec = client.connection(), RequestRecord(level=1, index=0)
            await client.measure(conn, "streamed, not buffered", rec)
            conn.close()
            return rec

        rec = asyncio.run(one())
        assert rec.ok and rec.output_tokens == 8 and len(rec.event_ms) == 8, rec
        assert rec.event_ms[-1] - rec.event_ms[0] > 40  # 10 ms between tokens: each event came as it was made
        metrics = httpx.get(g.metric_endpoints()["smg_metrics"]).text
        assert "smg_router_request_duration_seconds_count" in metrics
        assert httpx.get(g.metricless_endpoints()["api"]).status_code == 404
        assert "smg" in g.processes()


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["round_robin", "cache_aware"])
def test_a_real_gateway_spreads_over_two_engines_by_its_policy(tmp_path, policy):
    _installed()
    settings = DeploySettings(engine=EngineSettings(replicas=2), log_dir=tmp_path, options={"policy": policy})
    with _SmgOverSims(settings) as g:
        g.deploy()
        g.wait_ready(60)
        ep = g.endpoint()
        client = StreamClient(ep.base_url, ep.model, max_tokens=4)
        group = "a1b2c3d4e5f60718 " + "one shared prefix of words " * 8

        async def eight() -> list[RequestRecord]:
            conn = client.connection()
            recs = [RequestRecord(level=1, index=i) for i in range(8)]
            for i, rec in enumerate(recs):
                await client.measure(conn, f"{group} {i}", rec)
            conn.close()
            return recs

        recs = asyncio.run(eight())
        assert all(r.ok and r.output_tokens == 4 for r in recs), recs
        served = sorted(httpx.get(f"{e.endpoint().base_url}/sim/stats").json()["requests"] for e in g.engine.replicas)
        # round_robin: in turn over both workers; cache_aware: one prefix stays where it went first
        assert served == ([4, 4] if policy == "round_robin" else [0, 8]), served
        assert {"smg", "sim@0", "sim@1"} <= set(g.processes())
