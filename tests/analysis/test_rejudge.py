"""A report folder's summary (the compare without its windows) judged again by the current method: each level's
noise bounded by the stored variance components, exact where the other levels' pairs differed by nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.analysis.deltas import judged_levels
from harness.analysis.rejudge import rejudge_stored
from harness.reporting.rebuild import load_compare
from tests.reporting.test_report_decision import compare, pair

ROOT = Path(__file__).resolve().parents[2]


def stripped(base_windows, stack_windows):
    """(the compare judged from its windows, the same compare as a report folder stores it: no windows, its
    components kept)."""
    s = compare(base_windows, stack_windows)
    _, own = judged_levels(s.runs["baseline"], s.runs["stack"], [lv.level for lv in s.levels])
    s.components, s.order = own, [1, -1]
    stored = s.model_copy(deep=True)
    for run in stored.runs.values():
        run.levels = []
    return s, stored


def test_the_bound_is_the_levels_own_noise_where_the_other_levels_differed_by_nothing():
    # goodput at 100% on both sides at c=1 and c=4; at c=8 the stack's windows read 90% and 80%
    c8 = pair(8, 800)
    for lv, g in zip(c8, (0.9, 0.8), strict=True):
        lv.stats.goodput = g
    s, stored = stripped(pair(1, 100) + pair(4, 400) + pair(8, 800), pair(1, 100) + pair(4, 400) + c8)
    assert rejudge_stored(stored)
    own, again = s.levels[2].endpoints["goodput"], stored.levels[2].endpoints["goodput"]
    assert again.se == pytest.approx(own.se) and again.df == own.df == 1
    for a, b in zip(s.levels, stored.levels, strict=True):  # elsewhere no narrower than the windows' own
        assert b.endpoints["throughput"].se >= a.endpoints["throughput"].se * (1 - 1e-9)
        assert "judged again" in b.endpoints["throughput"].note


def test_a_compare_whose_windows_are_stored_is_left_as_it_judged_itself():
    s, _ = stripped(pair(1, 100) + pair(4, 400), pair(1, 100) + pair(4, 320))
    before = [lv.verdict for lv in s.levels]
    assert not rejudge_stored(s) and [lv.verdict for lv in s.levels] == before


def test_the_committed_two_replica_ray_compare_no_longer_calls_its_c16_goodput():
    # 20261204-224224: goodput 94% -> 98% at c=16 was a gain at Holm p 0.0025 on one residual pooled over three
    # levels, two of them at 100% on both sides; on that level's own noise (1 df) it is not
    s = load_compare(ROOT / "reports" / "examples" / "20261204-224224-compare-ray-5f88bd")
    c16 = next(lv for lv in s.levels if lv.concurrency == 16)
    assert c16.endpoints["goodput"].verdict == "inconclusive" and c16.verdict == "inconclusive"
    assert s.rejudged is not None and "c=16: gain (goodput) -> inconclusive" in s.rejudged
