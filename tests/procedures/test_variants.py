"""`make sweep` against the reference engine and the known-overhead proxy, where each answer is known by
construction: more engine slots help the bare engine but not behind a proxy that forwards two requests at once
(the layer caps the engine); a proxy delay costs in the shape that has it; a setting the engine refuses fails
its own point with the engine's log, and the other points are measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.errors import LayerbenchError
from harness.procedures.variants import parse_values

KEY = {"engine": "test", "model": "tiny", "replicas": "1", "devices": "none", "target": "local", "profile": "t"}


@pytest.fixture(autouse=True)
def one_noise_key(monkeypatch):
    """The host's A/A below matches the sweeps' noise key (harness.procedures.compare.noise_key, tested on its own
    in tests/procedures/test_aa_match.py)."""
    monkeypatch.setattr("harness.procedures.compare.noise_key", lambda stack, profile, target="local": KEY)


def host_aa(results: Path, profile: str = "t") -> None:
    """A complete A/A compare of the profile on this 'host' (its pairs differed by ~3%): a sweep deploys each value
    once, so its intervals come from the host's A/A."""
    from harness.schemas import CompareSummary, Components

    noise = Components(ms_pair=0.002, df_pair=3, ms_res=0.001, df_res=3, levels=2, pairs=4)
    s = CompareSummary(run_id="20260101-000000-compare-vllm-aaaaaa", stack="vllm", baseline_stack="vllm",
                       in_request_path=False, profile=profile, repeats=1, versions={}, version_match=True, applied={},
                       settings_match=True, settings_mismatches=[], options={}, status="complete",
                       components={"throughput": noise, "goodput": noise, "ttft_p95": noise}, noise_key=KEY)
    d = results / s.run_id
    d.mkdir(parents=True)
    (d / "compare.json").write_text(s.model_dump_json())


def sweep(tmp_path: Path, write_profile, *args: str, concurrency=(8,)) -> tuple[int, dict, Path]:
    profile = write_profile(concurrency=list(concurrency), requests=20, requests_per_concurrency=0,
                            output_tokens=16, input_tokens=32, warmup_sweep=False)
    host_aa(tmp_path / "results")
    rc = main(["sweep", "--stack", "sim-proxy", "--profile", str(profile), "--results-dir", str(tmp_path / "results"),
               "--reports-dir", str(tmp_path / "reports"), "--opt", "ttft_ms=5", "--opt", "itl_ms=5", *args])
    runs = [r for r in (tmp_path / "results").iterdir() if "-sweep-" in r.name]
    assert len(runs) == 1
    return rc, json.loads((runs[0] / "summary.json").read_text()), tmp_path / "reports" / runs[0].name


@pytest.mark.slow  # four deployments of the reference engine
@pytest.mark.alone
def test_setting_that_helps_the_bare_engine_is_capped_by_the_layer(tmp_path, write_profile, monkeypatch):
    monkeypatch.setenv("GPU_HOURLY_USD", "2.29")
    rc, s, report = sweep(tmp_path, write_profile, "--setting", "max_num_seqs=2,8", "--opt", "max_ongoing=2")
    assert rc == 0, s["failures"]
    bare, layer = s["effects"][-1]["baseline"], s["effects"][-1]["stack"]
    # 2 -> 8 slots at c=8: the bare engine serves four times the requests at once; the proxy still forwards 2
    assert bare["delta_pct"] > 150 and bare["verdict"] == "gain"
    assert abs(layer["delta_pct"]) < 40
    assert "max_num_seqs 2 → 8 at c=8" in s["conclusion"] and "the layer caps the engine" in s["conclusion"]
    md = (report / "report.md").read_text()
    assert s["conclusion"] in md and "per million output tokens" not in md  # cost per level is a column
    assert "$ / M out tok" in md and "this run $" in md
    assert "KV cache: config.json" not in md  # the reference engine loads no model: no config.json to size
    assert (report / "sweep.png").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.alone
def test_shapes_of_the_layer_each_against_one_baseline(tmp_path, write_profile):
    rc, s, report = sweep(tmp_path, write_profile, "--option", "request_delay_ms=0,40", "--repeats", "2",
                          concurrency=(4,))
    assert rc == 0
    no_delay, delay = (p["levels"][-1] for p in s["points"])
    assert s["points"][0]["baseline_label"] == s["points"][1]["baseline_label"] == "baseline"
    assert delay["verdict"] == "overhead" and delay["delta_pct"] < no_delay["delta_pct"] - 15
    assert any(k.startswith("proxy:") for k in delay["stack_cpu_cores"])  # per-process CPU for each shape
    assert "least costly: request_delay_ms=0 (request_delay_ms=0 against request_delay_ms=40 head to head: +" \
        in s["conclusion"] and "(gain)" in s["conclusion"]
    assert "Where the CPU went (cores), request_delay_ms=40" in (report / "report.md").read_text()


@pytest.mark.slow
@pytest.mark.alone
def test_a_setting_the_engine_refuses_fails_its_point_and_the_sweep_goes_on(tmp_path, write_profile):
    rc, s, report = sweep(tmp_path, write_profile, "--setting", "max_model_len=1024,99999", concurrency=(2,))
    assert rc == 2  # a point failed: said, not hidden
    ok, refused = s["points"]
    assert ok["levels"][-1]["delta_pct"] is not None and not ok["failed"]
    why = refused["failed"]["baseline@max_model_len=99999"]
    assert "exited during startup" in why and "max_position_embeddings" in why  # the engine's own log tail
    assert "stack@max_model_len=99999" in refused["failed"]  # its layer side was tried too, and failed alike
    assert "**failed**" in (report / "report.md").read_text()


def test_a_shape_that_cannot_be_built_is_refused_before_anything_runs(tmp_path, capsys):
    rc = main(["sweep", "--stack", "sim-proxy", "--option", "request_delay_ms=0,-5", "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "request_delay_ms=-5 cannot be built" in err and not any(tmp_path.iterdir())


@pytest.mark.parametrize("args, message", [
    (["--setting", "bogus=1,2"], "unknown engine setting 'bogus'"),
    (["--option", "bogus=1,2"], "has no option 'bogus'"),
    (["--setting", "max_num_seqs"], "takes key=value1,value2"),
    (["--setting", "max_num_seqs=4,4"], "names a value twice"),
    (["--setting", "max_num_seqs=x,4"], "max_num_seqs=x is not a valid engine setting"),
    (["--setting", "max_num_seqs=4", "--option", "rechunk=1"], "exactly one of"),
    ([], "exactly one of"),
    (["--option", "rechunk=1,2", "--shapes", "32x8,32x16"], "exactly one of"),
])
def test_bad_sweeps_get_one_clear_message(tmp_path, capsys, args, message):
    assert main(["sweep", "--stack", "sim-proxy", "--results-dir", str(tmp_path), *args]) == 2
    assert message in capsys.readouterr().err and not any(tmp_path.iterdir())


def test_values_are_parsed_once():
    assert parse_values("max-num-seqs=4, 32", "SETTING") == ("max_num_seqs", ["4", "32"])
    with pytest.raises(LayerbenchError):
        parse_values("=4", "OPT")


@pytest.mark.slow  # four deployments of the reference engine
@pytest.mark.alone
def test_a_per_request_cost_shrinks_with_longer_answers_across_shapes(tmp_path, write_profile):
    """A proxy holding each request 20 ms costs a 20 ms share of an 8-token answer (~40 ms at 5 ms per token) and a
    small one of a 64-token answer (~320 ms): the shape sweep must show the first costlier, and say why."""
    rc, s, report = sweep(tmp_path, write_profile, "--shapes", "32x8,32x64", "--opt", "request_delay_ms=20",
                          concurrency=(4,))
    assert rc == 0, s["failures"]
    assert s["kind"] == "shape" and s["values"] == ["32x8", "32x64"]
    short, long = (p["levels"][-1] for p in s["points"])
    assert short["delta_pct"] < long["delta_pct"] - 10 < 0
    assert "from " in s["conclusion"] and "at 32/8 to" in s["conclusion"]
    assert "longer answers dilute it" in s["conclusion"]
    assert (report / "heatmap.png").stat().st_size > 0 and "heatmap.png" in (report / "report.md").read_text()
    # each shape's two deployments sent that shape: the engine's usage confirms it
    results = next(r for r in (tmp_path / "results").iterdir() if "-sweep-" in r.name)
    outs = {}
    for line in (results / "requests.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d.get("phase") == "measure" and d.get("ok"):
            outs.setdefault(d["label"], set()).add(d["output_tokens"])
    assert outs == {"baseline@32x8": {8}, "stack@32x8": {8}, "baseline@32x64": {64}, "stack@32x64": {64}}


@pytest.mark.parametrize("shapes, message", [
    ("128", "takes input x output token pairs"),
    ("128x64,128x64", "names a shape twice"),
    ("128x64", "takes 2 to"),
    ("128x64,4000x200", "shape 4000x200: a request of up to 4000 + 200 tokens is beyond engine.max_model_len"),
    ("8x64,128x64", "shape 8x64: field 'input_tokens': input_tokens 8 goes below 17 tokens"),
])
def test_bad_shapes_are_refused_before_anything_runs(tmp_path, capsys, shapes, message):
    assert main(["sweep", "--stack", "sim-proxy", "--results-dir", str(tmp_path), "--shapes", shapes]) == 2
    assert message in capsys.readouterr().err and not any(tmp_path.iterdir())
