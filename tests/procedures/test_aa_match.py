"""An A/A floors a compare only when it measured the same system: the engine's version, the model and its revision,
the engines per side, the GPUs, the target and the profile's content (not the knobs that size or stop the design)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from harness.analysis.conclude import pair_order
from harness.procedures.compare import latest_aa, noise_key
from harness.profile.loading import load_profile
from harness.schemas import CompareSummary, Components
from harness.schemas.deploy import ServedModel


def stack(version: str = "0.32.0", revision: str = "abc", replicas: int = 1, devices: tuple[int, ...] = ()):
    model = ServedModel(source="hub", id="Qwen/Qwen2.5-1.5B-Instruct", revision=revision, config_digest="0123")
    settings = SimpleNamespace(model=model, engine=SimpleNamespace(replicas=replicas), devices=list(devices))
    return SimpleNamespace(settings=settings, engine_version=lambda: version)


def store_aa(results: Path, key: dict[str, str] | None, name: str = "20260101-000000-compare-vllm-aaaaaa") -> None:
    comp = Components(ms_pair=0.002, df_pair=3, ms_res=0.001, df_res=6, levels=3, pairs=4)
    s = CompareSummary(run_id=name, stack="vllm", baseline_stack="vllm", in_request_path=False, profile="quick",
                       repeats=1, versions={}, version_match=True, applied={}, settings_match=True,
                       settings_mismatches=[], options={}, status="complete", components={"throughput": comp},
                       order=pair_order(4), pairs=4, noise_key=key or {})
    (results / name).mkdir(parents=True)
    (results / name / "compare.json").write_text(s.model_dump_json())


def test_an_aa_floors_only_a_compare_of_the_same_system(tmp_path):
    quick = load_profile("quick")
    key = noise_key(stack(), quick)
    store_aa(tmp_path, key)
    assert latest_aa(tmp_path, "quick", key).run_id == "20260101-000000-compare-vllm-aaaaaa"
    # the budget and the effect it is sized for change the design, not one pair's noise
    assert noise_key(stack(), quick.model_copy(update={"budget_min": 30, "target_mde": 0.02})) == key
    others = [noise_key(stack(version="0.31.1"), quick), noise_key(stack(revision="def"), quick),
              noise_key(stack(replicas=2), quick), noise_key(stack(devices=(0,)), quick),
              noise_key(stack(), quick, target="k8s"), noise_key(stack(), quick.with_levels([1, 4, 16]))]
    assert len({tuple(sorted(k.items())) for k in others} | {tuple(sorted(key.items()))}) == len(others) + 1
    assert all(latest_aa(tmp_path, "quick", k) is None for k in others)


def test_an_aa_stored_without_its_key_matches_nothing(tmp_path):
    store_aa(tmp_path, None)
    assert latest_aa(tmp_path, "quick", noise_key(stack(), load_profile("quick"))) is None
    assert latest_aa(tmp_path, "quick", None) is None
