"""Several engines per side, the parts that start nothing: the client's spread, the reference proxy's routes, the
engines' metrics read as one and each on its own, and what is refused before anything is deployed."""

from __future__ import annotations

import json

import pytest

from harness.analysis.replicas import imbalance, loads, merged
from harness.analysis.server_metrics import summarise
from harness.cli.main import main
from harness.load.client import StreamClient
from harness.load.spread import HASH_CHARS, SpreadClient
from harness.profile.schema import EngineSettings
from stacks.base import DeploySettings, get_stack
from stacks.base.replicas import ReplicaSet, build_stack
from stacks.refengine.http import Request
from stacks.refengine.proxy import ProxyConfig, Router


def _spread(by: str, n: int = 3) -> SpreadClient:
    return SpreadClient([StreamClient(f"http://127.0.0.1:{9000 + i}", "tiny") for i in range(n)], by)  # type: ignore[arg-type]


def test_the_client_spreads_in_turn_or_by_the_prompts_first_characters():
    rr = _spread("round_robin")
    assert [rr.pick("x") for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    by_hash = _spread("hash")
    group = "a1b2c3d4e5f60718" + " the quick brown fox" * 4
    picks = {by_hash.pick(group + f" request {i}") for i in range(20)}
    assert len(picks) == 1  # a group's requests share their first HASH_CHARS characters: one engine
    assert len(group) > HASH_CHARS
    assert len({by_hash.pick(f"{i:016x} filler") for i in range(60)}) == 3  # unique prompts land everywhere
    both = _spread("round_robin")
    both.keep_text, both.keep_headers = True, ("x-a",)
    assert all(c.keep_text and c.keep_headers == ("x-a",) for c in both.clients)
    conn = both.connection()
    assert [(c.host, c.port) for c in conn.parts] == [("127.0.0.1", 9000 + i) for i in range(3)]


def _post(prompt: str) -> Request:
    return Request("POST", "/v1/completions", {}, json.dumps({"prompt": prompt}).encode())


@pytest.mark.parametrize("route", ["round_robin", "hash", "cache_aware"])
def test_the_reference_proxy_routes_as_configured(route):
    router = Router(ProxyConfig(upstream_port=1, upstream_ports="1,2", route=route))
    groups = [f"{g:016x}" + " shared filler words" * 4 for g in range(6)]
    sent = [router.pick(_post(groups[i % 6] + f" {i}")) for i in range(60)]
    where = {g: {sent[i] for i in range(60) if i % 6 == k} for k, g in enumerate(groups)}
    if route == "round_robin":
        assert sent[:4] == [0, 1, 0, 1] and router.sent == [30, 30]
    else:  # a group always goes to one engine
        assert all(len(w) == 1 for w in where.values())
    if route == "cache_aware":  # new groups to the engine holding the fewest: three each
        assert sorted(next(iter(w)) for w in where.values()) == [0, 0, 0, 1, 1, 1]


def _scrape(endpoint: str, phase: str, t: float, **values: float) -> dict:
    names = {"requests": "vllm:request_success_total", "gen": "vllm:generation_tokens_total",
             "e2e": "vllm:e2e_request_latency_seconds_sum", "hits": "vllm:prefix_cache_hits_total",
             "queries": "vllm:prefix_cache_queries_total"}
    samples = {names[k] + "{engine=0,model_name=tiny}": v for k, v in values.items()}
    return {"t": t, "endpoint": endpoint, "ok": True, "samples": samples, "families": {}, "phase": phase,
            "level": 4.0, "reason": None, "dur_ms": 1.0}


def test_each_engine_is_read_on_its_own_and_all_as_one():
    scrapes = [_scrape("api@0", "start", 0.0, requests=10, gen=100, e2e=5.0, hits=0, queries=16),
               _scrape("api@1", "start", 0.1, requests=20, gen=200, e2e=9.0, hits=16, queries=32),
               _scrape("api@0", "end", 10.0, requests=40, gen=400, e2e=15.0, hits=160, queries=496),
               _scrape("api@1", "end", 10.1, requests=50, gen=500, e2e=39.0, hits=176, queries=512)]
    one = merged(scrapes)
    assert [s["endpoint"] for s in one] == ["api", "api"] and len(one[0]["samples"]) == 10
    per = loads(scrapes)
    assert [(r.replica, r.requests, r.output_tokens) for r in per] == [("api@0", 30, 300), ("api@1", 30, 300)]
    assert per[0].in_engine == pytest.approx(1.0) and per[1].in_engine == pytest.approx(3.0)
    assert imbalance([r.in_engine for r in per]) == pytest.approx(1.5)
    assert imbalance([1.0, None]) is None and imbalance([0.0, 0.0]) is None
    server = summarise(scrapes)
    # summed over both engines, each counted from its own first to its own last scrape
    assert server.generation_tokens == 600 and server.prefix_cache_hits == 320 and server.prefix_cache_queries == 960
    assert len(server.replicas) == 2


def _settings(tmp_path, **engine) -> DeploySettings:
    return DeploySettings(engine=EngineSettings(**engine), log_dir=tmp_path, options={"ttft_ms": 5})


def test_bare_engines_are_spread_by_the_client_and_a_router_fronts_them(tmp_path):
    bare = build_stack(get_stack("sim"), _settings(tmp_path, replicas=2, baseline_spread="hash"))
    assert isinstance(bare, ReplicaSet) and bare.kind == "sim" and bare.baseline() is bare
    ep = bare.endpoint()
    assert len(ep.spread) == 2 and ep.spread[0] == ep.base_url and ep.spread_by == "hash"
    assert list(bare.metric_endpoints()) == ["api@0", "api@1"]
    router = build_stack(get_stack("sim-proxy"), _settings(tmp_path, replicas=2))
    assert isinstance(router.engine, ReplicaSet) and list(router.metric_endpoints()) == ["api", "engine@0", "engine@1"]
    cmd, _ = router.front_commands(router.engine.endpoint().spread)
    ports = [str(r.engine.port) for r in router.engine.replicas]
    assert cmd[cmd.index("--upstream-ports") + 1] == ",".join(ports)
    base = router.baseline()
    assert isinstance(base, ReplicaSet) and len(base.replicas) == 2 and base.endpoint().spread_by == "round_robin"
    assert build_stack(get_stack("sim"), _settings(tmp_path)).kind == "sim"


def test_a_stack_that_cannot_front_several_engines_is_refused_before_anything_runs(tmp_path, write_profile, capsys):
    profile = write_profile(concurrency=[1], requests=20)
    rc = main(["compare", "--stack", "triton", "--profile", str(profile), "--replicas", "2",
               "--results-dir", str(tmp_path / "r"), "--reports-dir", str(tmp_path / "p")])
    assert rc == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "cannot front several engines (engine.replicas 2)" in err and "sim-proxy" in err, err
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_a_route_the_router_lacks_is_refused(tmp_path, write_profile, capsys):
    profile = write_profile(concurrency=[1], requests=20)
    rc = main(["compare", "--stack", "sim-proxy", "--profile", str(profile), "--replicas", "2",
               "--opt", "route=power_of_two", "--results-dir", str(tmp_path / "r")])
    assert rc == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "option route" in err and "power_of_two" in err, err


def test_fewer_prefix_groups_than_replicas_is_warned(tmp_path, write_profile, capsys):
    profile = write_profile(concurrency=[1], requests=20, prefix={"groups": 1, "shared_tokens": 32})
    rc = main(["compare", "--stack", "sim-proxy", "--profile", str(profile), "--replicas", "2", "--dry-run",
               "--results-dir", str(tmp_path / "r")])
    assert rc == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "1 shared-prefix group for 2 replicas" in err, err


@pytest.mark.parametrize("kind", ["vllm", "ray", "vllm-router", "litellm", "envoy", "smg"])
def test_a_router_and_its_n_bare_engines_plan_the_same_engine_settings(tmp_path, kind):
    from harness.procedures.dryrun import _differences, _side

    stack = build_stack(get_stack(kind), DeploySettings(engine=EngineSettings(replicas=2), log_dir=tmp_path))
    base = stack.baseline()
    assert isinstance(base, ReplicaSet) and len(base.replicas) == 2
    sides = [_side("baseline", base), _side("stack", stack)]
    assert sides[1]["engine"]["replicas"] == 2 and _differences(sides) == []


def test_n_bare_engines_and_their_baseline_are_n_single_engines(tmp_path):
    from stacks.vllm import VllmStack

    bare = build_stack(get_stack("vllm"), DeploySettings(engine=EngineSettings(replicas=2), log_dir=tmp_path))
    for side in (bare, bare.baseline(), bare.again(tmp_path / "again").baseline()):
        assert isinstance(side, ReplicaSet) and [type(r) for r in side.replicas] == [VllmStack, VllmStack]
        assert all(r.settings.engine.replicas == 1 for r in side.replicas)
        assert list(side.metric_endpoints()) == ["api@0", "api@1"]


def test_rounds_are_merged_by_their_tag_where_the_poller_and_the_edges_interleave():
    def tagged(endpoint: str, tag: str, phase: str | None, t: float, gen: float) -> dict:
        return {**_scrape(endpoint, phase or "start", t, gen=gen), "phase": phase, "round": tag}

    # the poller's round (p) and an edge round (e) written in between each other
    scrapes = [tagged("engine@0", "p", None, 1.0, 100), tagged("engine@0", "e", "end", 1.1, 110),
               tagged("engine@1", "p", None, 1.2, 200), tagged("engine@1", "e", "end", 1.3, 210)]
    one = merged(scrapes)
    assert [(s["round"], s["phase"], len(s["samples"])) for s in one] == [("p", None, 2), ("e", "end", 2)]


def test_a_layer_passing_one_engines_metrics_through_does_not_mix_with_every_engines_sum():
    api_s, api_e = _scrape("api", "start", 0.0, gen=100), _scrape("api", "end", 10.0, gen=400)  # engine 0's
    scrapes = [api_s, _scrape("engine@0", "start", 0.1, gen=100), _scrape("engine@1", "start", 0.2, gen=5000),
               api_e, _scrape("engine@0", "end", 10.1, gen=400), _scrape("engine@1", "end", 10.2, gen=5300)]
    server = summarise(scrapes)
    assert server.generation_tokens == 600  # 300 + 300: each engine from its own first scrape to its last
    assert server.scrapes == 6


def test_several_load_processes_start_their_turns_apart():
    first, second = _spread("round_robin", 2), SpreadClient(_spread("round_robin", 2).clients, "round_robin", 1)
    assert [first.pick("x") for _ in range(4)] == [0, 1, 0, 1] and [second.pick("x") for _ in range(4)] == [1, 0, 1, 0]


@pytest.mark.parametrize(("args", "message"), [
    (["--stack", "vllm", "--opt", "port=18001"], "each of the 2 engines listens on a free port of its own"),
    (["--stack", "vllm-router", "--target", "docker"], "the docker target deploys one engine a side"),
])
def test_replicas_that_cannot_be_deployed_as_asked_are_refused(tmp_path, write_profile, capsys, args, message):
    profile = write_profile(concurrency=[1], requests=20)
    rc = main(["compare", *args, "--profile", str(profile), "--replicas", "2", "--results-dir", str(tmp_path / "r")])
    assert rc == 2
    assert message in " ".join(capsys.readouterr().err.split())


def test_a_kv_cache_of_n_blocks_is_one_flag_for_the_bare_engine_and_one_keyword_for_a_layers_engine():
    from stacks.base.engine_env import engine_args, engine_kwargs, settings_from_args, settings_from_kwargs

    s = DeploySettings(engine=EngineSettings(kv_cache_blocks=24))
    flags = engine_args(s)
    assert flags[flags.index("--num-gpu-blocks-override") + 1] == "24"
    assert engine_kwargs(s, "ray")["num_gpu_blocks_override"] == 24
    # a plan reads both forms back alike, so the two sides are held to the same cache
    assert settings_from_args(flags)["num_gpu_blocks_override"] == settings_from_kwargs(engine_kwargs(s, "ray"))[
        "num_gpu_blocks_override"] == 24
    assert "--num-gpu-blocks-override" not in engine_args(DeploySettings())  # unset: the engine sizes its own
    assert settings_from_args(engine_args(DeploySettings()))["num_gpu_blocks_override"] is None
    with pytest.raises(ValueError):
        EngineSettings(kv_cache_blocks=0)
