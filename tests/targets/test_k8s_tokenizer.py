"""The k8s and docker targets' load counts prompt lengths with the served model's tokenizer: the load (the
endpoint stack in the harness image, which has no model of its own) mounts the HF cache the engines read and is
pointed at the model's snapshot (`--opt tokenizer=DIR`); a snapshot without tokenizer.json is refused, by the
load and before that by preflight's model probe; and every run's summary, and so its report, says what counted.

The HF cache here is laid out as huggingface_hub writes it: hub/models--<org>--<name>/snapshots/<commit>/ and
refs/<branch> holding the commit (https://huggingface.co/docs/huggingface_hub/guides/manage-cache)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.errors import LayerbenchError
from harness.host import gpus
from harness.load.prompts import NO_TOKENIZER, PromptGenerator
from harness.profile.loading import load_profile
from harness.targets.k8s import probes
from harness.targets.k8s.docker import command_problems, render_docker
from harness.targets.k8s.plan import ClusterSettings
from harness.targets.k8s.render import render_plan
from harness.targets.k8s.render_load import LoadCommand
from stacks.base import DeploySettings, get_stack
from stacks.endpoint import EndpointStack
from stacks.sim import SimStack

ROOT = Path(__file__).resolve().parents[2]
RUN = "20261201-101010-compare-vllm-abc123"
REPO = "Qwen/Qwen2.5-0.5B-Instruct"
COMMIT = "7ae557604adf67be50417f59c2c2f167def9a775"
PROFILE = load_profile("quick")
CS = ClusterSettings(model=REPO, model_revision="main", load_image="registry.test/layerbench:1")
WORDS = ["the", "served", "model", "counts", "these"]


def hf_cache(root: Path, tokenizer: bool = True) -> Path:
    """An HF cache root holding REPO at COMMIT, refs/main pointing at it; a word-level tokenizer.json (one
    token per word: far from 4 characters a token)."""
    snap = root / "hub" / f"models--{REPO.replace('/', '--')}" / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text(COMMIT)
    if tokenizer:
        from tokenizers import Tokenizer, models, pre_tokenizers

        tok = Tokenizer(models.WordLevel({"[UNK]": 0, **{w: i + 1 for i, w in enumerate(WORDS)}}, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        tok.save(str(snap / "tokenizer.json"))
    return snap


def opt(args: list[str], key: str) -> str | None:
    found = [a.split("=", 1)[1] for i, a in enumerate(args) if i and args[i - 1] == "--opt"
             and a.startswith(f"{key}=")]
    return found[0] if found else None


# --- what the targets render ----------------------------------------------------------------------------------
def test_the_docker_load_client_mounts_the_cache_read_only_and_names_the_snapshot(monkeypatch):
    monkeypatch.setattr(gpus, "host_gpus", lambda: None)
    stack = get_stack("vllm")(DeploySettings(engine=PROFILE.engine, target="docker"))
    plan = render_docker(stack, PROFILE, CS, RUN, "compare")
    assert command_problems(plan, CS) == []
    for side in plan.sides:
        options = side.load[:side.load.index(CS.load_image)]
        assert "$HF_CACHE:/hf-cache:ro" in options  # the cache the engines read, as their -v names it
        assert any(a.startswith("$HF_CACHE:") for a in side.run)
        assert opt(side.load, "tokenizer") == "/hf-cache/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/main"


def test_a_kserve_run_that_fetches_the_model_itself_has_no_cache_to_count_with():
    """KServe's raw mode with hf:// storage and no baseline: nothing mounts the PVC, so the load does not either
    (it counts 4 characters a token, and its summary says so)."""
    stack = get_stack("kserve")(DeploySettings(engine=PROFILE.engine, target="k8s"))
    (side,) = render_plan(stack, PROFILE, CS, RUN, LoadCommand("run")).sides
    pod = side.load_job["spec"]["template"]["spec"]
    assert all(v["name"] != "hf-cache" for v in pod["volumes"])
    assert opt(pod["containers"][0]["args"], "tokenizer") is None
    (with_pvc,) = render_plan(stack, PROFILE, CS.model_copy(update={"kserve_storage": "pvc"}), RUN,
                              LoadCommand("run")).sides
    assert opt(with_pvc.load_job["spec"]["template"]["spec"]["containers"][0]["args"], "tokenizer") is not None


# --- the load's side: the endpoint stack and the prompt generator -----------------------------------------------
def endpoint(tokenizer: str) -> EndpointStack:
    return EndpointStack(DeploySettings(url="http://127.0.0.1:9", options={"tokenizer": tokenizer}))


def test_the_snapshot_named_by_its_branch_is_the_commit_refs_holds(tmp_path):
    snap = hf_cache(tmp_path)
    by_branch = snap.parent / "main"
    assert endpoint(str(by_branch)).settings.model_path == snap
    assert endpoint(str(snap)).settings.model_path == snap
    assert endpoint(str(snap / "tokenizer.json")).settings.model_path == snap


def test_a_snapshot_without_tokenizer_json_is_refused(tmp_path):
    snap = hf_cache(tmp_path, tokenizer=False)
    with pytest.raises(LayerbenchError, match=r"no tokenizer\.json in .*" + COMMIT + r".*hf download"):
        endpoint(str(snap.parent / "main"))
    with pytest.raises(LayerbenchError, match="no tokenizer.json"):
        endpoint(str(tmp_path / "elsewhere"))


def test_the_prompt_generator_counts_with_the_given_tokenizer(tmp_path):
    snap = hf_cache(tmp_path)
    stack = endpoint(str(snap.parent / "main"))
    gen = PromptGenerator("r", "", 24, stack.settings.model_path / "tokenizer.json")
    text = "the served model counts these words"
    assert gen.count_tokens(text) == 6 != len(text) // 4  # one per word, [UNK] included
    assert gen.counted_with("the served model's") == f"{snap}/tokenizer.json (the served model's)"
    prompt = gen.prompt(1, 0)
    assert gen.count_tokens(prompt) >= 24 and len(prompt) // 4 != gen.count_tokens(prompt)
    without = PromptGenerator("r", "", 24, None)
    assert without.counted_with("the served model's") == NO_TOKENIZER
    assert without.count_tokens(text) == len(text) // 4


def test_a_run_records_which_tokenizer_counted(tmp_path, write_profile):
    """`layerbench run --stack endpoint --opt tokenizer=...` as the load Job runs it: its summary and its report
    name the served model's tokenizer.json."""
    snap = hf_cache(tmp_path / "cache")
    prof = write_profile(name="tok", concurrency=[1], requests=20, requests_per_concurrency=0, output_tokens=4,
                         input_tokens=32, warmup_sweep=False, scrape="none")
    sim = SimStack(DeploySettings(log_dir=tmp_path / "sim", options={"ttft_ms": 1, "itl_ms": 1}))
    sim.deploy()
    try:
        sim.wait_ready(30)
        rc = main(["run", "--stack", "endpoint", "--url", sim.endpoint().base_url, "--profile", str(prof),
                   "--opt", f"tokenizer={snap.parent / 'main'}", "--results-dir", str(tmp_path / "results")])
    finally:
        sim.teardown()
    assert rc == 0
    (run,) = (tmp_path / "results").iterdir()
    said = f"{snap}/tokenizer.json (the served model's)"
    assert json.loads((run / "summary.json").read_text())["tokenizer"] == said
    assert f"- prompt lengths counted with {said}" in (run / "summary.md").read_text()


# --- preflight's model probe ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("tokenizer", "found"), [(True, "found"), (False, "no-tokenizer")])
def test_the_model_probe_says_whether_the_snapshot_has_its_tokenizer(tmp_path, monkeypatch, tokenizer, found):
    """The probe's own command, run here against a cache at the mount point it expects."""
    hf_cache(tmp_path, tokenizer=tokenizer)
    monkeypatch.setattr(probes, "CACHE_MOUNT", str(tmp_path))
    for revision, said in (("main", found), (COMMIT, found), ("v9", "missing")):
        command = probes.model_probe_command(REPO, revision)
        out = subprocess.run([sys.executable, *command[1:]], cwd=ROOT, capture_output=True, text=True, check=True)
        assert out.stdout.split() == [probes.MODEL_MARKER, said, f"{REPO}@{revision}"]


def test_a_snapshot_without_its_tokenizer_fails_preflight_with_the_download_to_run():
    probe = probes.Probe("model", CS.load_image, {})
    with pytest.raises(LayerbenchError, match=f"no tokenizer.json .* hf download {REPO} tokenizer.json --revision"):
        probes.judge(probe, f"{probes.MODEL_MARKER} no-tokenizer {REPO}@main\n", None, CS)
    assert probes.judge(probe, f"{probes.MODEL_MARKER} found {REPO}@main\n", None, CS) == "found"


def test_the_report_says_what_counted_and_flags_four_characters_a_token():
    from harness.reporting.report import context_bullets, decision
    from harness.schemas import AppliedConfig, CompareSummary, RunSummary
    from harness.targets.remote_compare import cluster_model

    def summary(*notes: str | None) -> CompareSummary:
        runs = {label: RunSummary(run_id="t", label=label, stack="vllm", engine_version="0.32.0",
                                  applied=AppliedConfig(), profile="p", tokenizer=note)
                for label, note in zip(("baseline", "stack"), notes, strict=True)}
        return CompareSummary(run_id="t", stack="vllm", baseline_stack="vllm", in_request_path=True, profile="p",
                              repeats=1, versions={}, version_match=True, applied={}, settings_match=True,
                              settings_mismatches=[], options={}, target="k8s", runs=runs,
                              model=cluster_model(REPO, COMMIT))

    served = f"/hf-cache/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/{COMMIT}/tokenizer.json (the served model's)"
    lines = context_bullets(summary(served, served))  # after the lead and the chart, what was served first
    assert lines[0].startswith("served: **") and lines[1] == f"prompt lengths counted with {served}"
    assert f"**prompt lengths counted with {NO_TOKENIZER}**" in decision(summary(NO_TOKENIZER, NO_TOKENIZER))
    assert not any("prompt lengths" in line for line in decision(summary(None, None)))  # recorded before this
