"""A compare's report holds the run to the published measurement of the same shape, where one exists."""

from types import SimpleNamespace

from harness.reporting.report import _published
from harness.schemas import PublishedResult
from stacks.base import DeploySettings
from stacks.kserve import KServeStack
from stacks.ray import RayStack

STUDY = PublishedResult(concurrency=64, delta_pct=-2.2, verdict="within noise", source="The study")


def _summary(*levels):
    return SimpleNamespace(published=STUDY, levels=[SimpleNamespace(concurrency=c, delta_pct=d, verdict=v)
                                                    for c, d, v in levels])


def test_same_verdict_at_the_published_level_agrees():
    (line,) = _published(_summary((16, -30.0, "overhead"), (64, -4.0, "within noise")))
    assert "measured -2.2% at c=64 (within noise)" in line and "-4.0% (within noise), which agrees" in line


def test_another_verdict_does_not_agree_and_a_missing_level_is_said():
    assert "which does not agree" in _published(_summary((64, -40.0, "overhead")))[0]
    assert "no c=64 level" in _published(_summary((1, 1.0, "within noise"), (16, -3.0, "within noise")))[0]
    assert _published(SimpleNamespace(published=None, levels=[])) == []


def test_only_the_studied_shapes_carry_a_published_result(tmp_path):
    def settings(**options):
        return DeploySettings(log_dir=tmp_path, options=options)

    assert KServeStack(settings()).published().delta_pct == -2.2
    assert KServeStack(settings(mode="inprocess")).published() is None  # nothing published measures it
    assert RayStack(settings()).published().verdict == "overhead"
    assert RayStack(settings(ingress_replicas=1)).published() is None
