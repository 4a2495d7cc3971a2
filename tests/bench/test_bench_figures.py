"""harness.bench.figures and render: spreads over rounds, worst-round verdicts, impossible values flagged."""

import pytest

from harness.bench.figures import Invalid, Spread, at_least, at_most, positive, ratio
from harness.bench.render import page, spread, verdict_line
from harness.bench.section import SectionResult


def test_spread_summary():
    s = Spread.of([0.3, -0.1, 0.1])
    assert s.mean == pytest.approx(0.1) and s.median == pytest.approx(0.1)
    assert (s.lo, s.hi) == (-0.1, 0.3)
    assert s.to_json()["rounds"] == [0.3, -0.1, 0.1]
    with pytest.raises(ValueError):
        Spread.of([])


def test_spread_format_mean_and_range():
    assert spread(Spread.of([0.3, -0.1, 0.1])) == "+0.10 (-0.10…+0.30)"
    assert spread(Spread.of([1.0, 3.0, 8.0]), "{:.1f}".format, "median") == "3.0 (1.0…8.0)"
    assert spread(Spread.of([2.0])) == "+2.00"
    assert spread(Invalid("why")) == "invalid"


def test_at_most_judges_the_worst_round():
    assert at_most("x ≤ 0.5 ms", Spread.of([0.1, 0.2, 0.4]), 0.5).met is True
    v = at_most("x ≤ 0.5 ms", Spread.of([-1.0, 0.0, 0.6]), 0.5)  # mean -0.13 meets it; one round does not
    assert v.met is False and "worst round +0.60" in v.detail
    assert "NOT MET" in verdict_line(v)


def test_at_least_judges_the_worst_round():
    assert at_least("r ≥ 10×", Spread.of([12.0, 50.0]), 10).met is True
    assert at_least("r ≥ 10×", Spread.of([9.0, 50.0]), 10).met is False
    v = at_least("r ≥ 10×", Invalid("no ratio"), 10)
    assert v.met is None and v.word == "not judged" and "no ratio" in v.detail


def test_positive_flags_impossible_rounds():
    assert isinstance(positive([48.0, 50.0], "CPU per event", "r"), Spread)
    bad = positive([66.0, -31.2, 70.0], "CPU per event", "fixed costs did not cancel")
    assert isinstance(bad, Invalid)
    assert "round 2: -31.2" in bad.reason and "fixed costs did not cancel" in bad.reason
    assert isinstance(positive([float("nan")], "CPU per event", "r"), Invalid)


def test_ratio_round_by_round_and_invalid_propagates():
    r = ratio(Spread.of([60.0, 90.0]), Spread.of([30.0, 30.0]))
    assert r.values == (2.0, 3.0)
    assert isinstance(ratio(Invalid("negative"), Spread.of([1.0])), Invalid)
    assert "negative" in ratio(Spread.of([1.0]), Invalid("negative")).reason


def test_page_lists_targets_first_and_every_section():
    v = at_most("x ≤ 1 ms", Spread.of([0.5]), 1.0)
    md = page([SectionResult("a", ["## A", "", "body a"], {}, [v]), SectionResult("b", ["## B"], {})], 3.0, ["intro"])
    assert md.index("## Targets") < md.index("## A") < md.index("## B")
    assert "- target x ≤ 1 ms: **met**" in md and "intro" in md
