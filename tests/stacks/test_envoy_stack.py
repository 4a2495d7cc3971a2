"""Envoy, the null hop: its configuration (every engine in one round-robin cluster, nothing that buffers or times a
stream out), and a real Envoy from .venv-envoy in front of two reference engines, streaming byte-identical answers
and spreading requests between them."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from harness.errors import LayerbenchError
from harness.load.client import RequestRecord, StreamClient
from harness.profile.schema import EngineSettings
from stacks.base import DeploySettings, get_stack
from stacks.base.replicas import ReplicaSet, build_stack
from stacks.envoy import ENVOY_VENV, EnvoyStack
from stacks.sim import SimStack


class _SimBehindEnvoy(EnvoyStack):
    """Envoy in front of reference engines instead of vLLM (the same front; an engine that starts in a second)."""

    kind = "envoy-over-sim"

    def engine_behind(self, settings: DeploySettings | None = None):
        return SimStack((settings or self.settings).model_copy(update={"options": {"ttft_ms": 5, "itl_ms": 1}}))


def test_every_engine_is_one_clusters_endpoint_and_no_stream_is_timed_out(tmp_path):
    s = build_stack(get_stack("envoy"), DeploySettings(engine=EngineSettings(replicas=2), log_dir=tmp_path))
    assert isinstance(s.engine, ReplicaSet)
    cfg = s.config(["http://127.0.0.1:8001", "http://127.0.0.1:8002"])
    (cluster,) = cfg["static_resources"]["clusters"]
    assert cluster["lb_policy"] == "ROUND_ROBIN"
    ends = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
    assert [e["endpoint"]["address"]["socket_address"]["port_value"] for e in ends] == [8001, 8002]
    manager = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    assert manager["stream_idle_timeout"] == "0s" and [f["name"] for f in manager["http_filters"]] == \
        ["envoy.filters.http.router"]
    assert manager["route_config"]["virtual_hosts"][0]["routes"][0]["route"]["timeout"] == "0s"
    assert cluster["circuit_breakers"]["thresholds"][0]["max_requests"] > 10_000
    assert cfg["admin"]["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": s.admin_port}
    assert list(s.metric_endpoints()) == ["envoy_admin", "engine@0", "engine@1"]
    base = s.baseline()
    assert isinstance(base, ReplicaSet) and base.kind == "vllm" and len(base.replicas) == 2


def test_a_missing_install_names_the_setup_target(tmp_path, monkeypatch):
    import stacks.envoy as mod

    monkeypatch.setattr(mod, "ENVOY_VENV", tmp_path / "none")
    with pytest.raises(LayerbenchError, match="make setup-envoy"):
        get_stack("envoy")(DeploySettings(log_dir=tmp_path)).front_command("http://127.0.0.1:1")


@pytest.mark.slow
@pytest.mark.skipif(not (ENVOY_VENV / "bin" / "envoy").exists(), reason="make setup-envoy")
def test_a_real_envoy_streams_through_and_spreads_over_two_engines(tmp_path):
    settings = DeploySettings(engine=EngineSettings(replicas=2), log_dir=tmp_path)
    with _SimBehindEnvoy(settings) as envoy:
        envoy.deploy()
        envoy.wait_ready(60)
        ep = envoy.endpoint()
        client = StreamClient(ep.base_url, ep.model, max_tokens=8)

        async def eight() -> list[RequestRecord]:
            conns = [client.connection() for _ in range(2)]
            recs = [RequestRecord(level=1, index=i) for i in range(8)]
            for i, rec in enumerate(recs):
                await client.measure(conns[i % 2], f"{i:016x} through envoy", rec)
            for c in conns:
                c.close()
            return recs

        recs = asyncio.run(eight())
        assert all(r.ok and r.output_tokens == 8 and len(r.event_ms) == 8 for r in recs), recs
        served = [httpx.get(f"{r.endpoint().base_url}/sim/stats").json()["requests"] for r in envoy.engine.replicas]
        assert sorted(served) == [4, 4], served  # round robin over the two
        stats = httpx.get(f"http://127.0.0.1:{envoy.admin_port}/stats/prometheus").text
        assert "envoy_cluster_upstream_rq_total" in stats
        procs = envoy.processes()
        assert "envoy" in procs and {"sim@0", "sim@1"} <= set(procs)
