"""vLLM's router as a stack: one worker (the bare vLLM behind it) or several, loopback on both of its ports, retries and
the circuit breaker off, its policy a typed option, its metrics port audited and its serving port declared
without /metrics, and its k8s form passing the validators."""

from __future__ import annotations

import json

import pytest

from harness.errors import LayerbenchError
from harness.profile.loading import load_profile
from harness.targets.k8s.plan import ClusterSettings
from harness.targets.k8s.render import render_plan
from harness.targets.k8s.render_load import LoadCommand
from harness.targets.k8s.validate import plan_problems
from stacks.base import DeploySettings, get_stack

RUN = "20261201-101010-compare-vllm-router-abc123"
PROFILE = load_profile("quick")


def router(**options):
    return get_stack("vllm-router")(DeploySettings(engine=PROFILE.engine, options=options))


def test_the_router_has_one_worker_and_binds_loopback_on_both_ports(tmp_path, monkeypatch):
    import stacks.vllm_router as mod

    exe = tmp_path / "bin" / "vllm-router"
    exe.parent.mkdir(parents=True)
    exe.write_text("")
    monkeypatch.setattr(mod, "ROUTER_VENV", tmp_path)
    s = router(policy="round_robin")
    cmd, _ = s.front_command("http://127.0.0.1:8123")
    assert cmd[0] == str(exe)
    flag = {a: cmd[i + 1] for i, a in enumerate(cmd) if a.startswith("--") and i + 1 < len(cmd)}
    assert flag["--worker-urls"] == "http://127.0.0.1:8123" and flag["--policy"] == "round_robin"
    assert flag["--host"] == flag["--prometheus-host"] == "127.0.0.1"
    assert {int(flag["--port"]), int(flag["--prometheus-port"])} == set(s.ports()) and len(set(s.ports())) == 2
    assert "--disable-retries" in cmd and "--disable-circuit-breaker" in cmd


def test_its_metrics_port_is_audited_and_its_serving_port_declared_without_metrics():
    s = router()
    ends = s.metric_endpoints()
    assert ends["router_metrics"] == f"http://127.0.0.1:{s.metrics_port}/metrics"
    assert ends["engine"] == f"{s.engine.endpoint().base_url}/metrics" and "api" not in ends
    assert s.metricless_endpoints() == {"api": f"{s.endpoint().base_url}/metrics"}
    assert s.options.policy == "cache_aware"  # the router's own default
    assert router(port=18123).port == 18123 and get_stack("vllm-router")(DeploySettings(), 18124).port == 18124


def test_cache_aware_gives_both_sides_engines_that_serve_the_render_endpoint_it_routes_with():
    from stacks.base.replicas import build_stack
    from stacks.vllm_router import VllmRouterStack

    def flags(policy: str) -> tuple[list[str], list[str]]:
        s = build_stack(VllmRouterStack, DeploySettings(engine=PROFILE.engine, options={"policy": policy}))
        return s.settings.engine.extra_args, s.baseline().settings.engine.extra_args

    assert flags("cache_aware") == (["--enable-scale-out"], ["--enable-scale-out"])  # one engine on both sides
    assert flags("round_robin") == ([], [])


@pytest.mark.parametrize(("option", "value", "why"), [("policy", "power_of_two", "needs at least two workers"),
                                                      ("policy", "kv_aware", "'round_robin'"), ("image", "", "")])
def test_bad_options_are_refused(option, value, why):
    with pytest.raises(LayerbenchError, match=f"stack vllm-router: option {option}.*{why}"):
        router(**{option: value})


def test_a_missing_install_names_the_setup_target(tmp_path, monkeypatch):
    import stacks.vllm_router as mod

    monkeypatch.setattr(mod, "ROUTER_VENV", tmp_path / "none")
    with pytest.raises(LayerbenchError, match="make setup-vllm-router"):
        router().front_command("http://127.0.0.1:1")


def test_the_k8s_form_routes_to_the_engine_service_and_passes_the_validators():
    cs = ClusterSettings(model="Qwen/Qwen2.5-0.5B-Instruct", model_revision="main")
    s = get_stack("vllm-router")(DeploySettings(engine=PROFILE.engine, target="k8s", options={"policy": "random"}))
    p = render_plan(s, PROFILE, cs, RUN, LoadCommand("compare", 1))
    assert [x.stack for x in p.sides] == ["vllm", "vllm-router"]
    assert plan_problems(p, cs.k8s_version) == []
    side = p.sides[1]
    dep = next(o for o in side.objects if o["kind"] == "Deployment" and "vllm-router" in o["metadata"]["name"])
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--worker-urls") + 1] == "http://lb-stack-vllm-abc123.layerbench.svc.cluster.local:8000"
    assert args[args.index("--policy") + 1] == "random" and args[args.index("--host") + 1] == "0.0.0.0"
    job = json.dumps(side.load_job)  # the load Job scrapes the router's metrics port and the engine's
    assert "router_metrics=http://lb-stack-vllm-router-abc123.layerbench.svc.cluster.local:29000/metrics" in job
    assert "api=" not in job


class _RouterOverSims(get_stack("vllm-router")):  # type: ignore[misc, valid-type]
    """The real router in front of reference engines (an engine that starts in a second) instead of vLLM."""

    kind = "vllm-router-over-sim"

    def engine_behind(self, settings=None):
        from stacks.sim import SimStack

        s = settings or self.settings
        return SimStack(s.model_copy(update={"options": {"ttft_ms": 5, "itl_ms": 1}}))


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["round_robin", "cache_aware"])
def test_the_real_router_spreads_over_every_worker_by_its_policy(tmp_path, policy):
    import asyncio

    import httpx

    from harness.load.client import RequestRecord, StreamClient
    from harness.profile.schema import EngineSettings
    from stacks.vllm_router import ROUTER_VENV

    if not (ROUTER_VENV / "bin" / "vllm-router").exists():
        pytest.fail("vllm-router is not installed: make setup-vllm-router (make test installs it)")
    settings = DeploySettings(engine=EngineSettings(replicas=2), log_dir=tmp_path, options={"policy": policy})
    with _RouterOverSims(settings) as r:
        r.deploy()
        r.wait_ready(60)
        ep = r.endpoint()
        client = StreamClient(ep.base_url, ep.model, max_tokens=4)
        words = " one shared prefix of words" * 8
        a, b = f"a1b2c3d4e5f60718{words}", f"f7e6d5c4b3a29180{words}"  # two groups: their first blocks differ

        async def send(prompts: list[str]) -> list[RequestRecord]:
            conn = client.connection()
            recs = [RequestRecord(level=1, index=i) for i in range(len(prompts))]
            for p, rec in zip(prompts, recs, strict=True):
                await client.measure(conn, p, rec)
            conn.close()
            return recs

        recs = asyncio.run(send([f"{g} {i}" for i, g in enumerate((a, a, a, b, b, b, a, b))]))
        assert all(rec.ok and rec.output_tokens == 4 for rec in recs), recs
        stats = [httpx.get(f"{e.endpoint().base_url}/sim/stats").json() for e in r.engine.replicas]
        served, hits = sorted(x["requests"] for x in stats), sum(x["prefix_hits"] for x in stats)
        # round_robin: in turn, so each group reaches both workers and misses twice (4 hits of 8). cache_aware:
        # each group's first request a prefix miss, placed on the least-loaded worker (one request at a time: both
        # idle, so the first), and every later one a prefix hit on the worker that has its tokens (6 hits)
        assert (served, hits) == (([4, 4], 4) if policy == "round_robin" else ([0, 8], 6)), (served, hits)
        metrics = httpx.get(r.metric_endpoints()["router_metrics"]).text
        assert "vllm_router_" in metrics
        if policy == "cache_aware":  # it routed on the engines' token ids (their render endpoint), not by load alone:
            # without them each decision is counted outcome="missing_tokens" and placed by load, as measured in
            # front of vLLM started without --enable-scale-out
            decided = {o: sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                              if line.startswith("vllm_router_prefix_routing_decisions_total") and f'"{o}"' in line)
                       for o in ("prefix_hit", "prefix_miss", "missing_tokens")}
            assert decided == {"prefix_hit": 6, "prefix_miss": 2, "missing_tokens": 0}, metrics
