"""What the README's first command can decide, from the times a real one took here (tests/fixtures/timings): the
quick plan on this host runs its minimum design whatever the budget, and its profiled windows never push a pair out
of the budget (harness.measure.budget's rules, run step by step by `simulate`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.measure.budget import MIN_PAIRS, Clock, SideTimes, simulate
from harness.measure.planning import Plan
from harness.profile.loading import load_profile

FIXTURE = Path(__file__).parents[1] / "fixtures" / "timings" / "quick-ray-2core.json"


def recorded() -> dict[str, SideTimes]:
    data = json.loads(FIXTURE.read_text())
    assert data["source"]  # where the figures were measured
    return {side: SideTimes(**t) for side, t in data["sides"].items()}


def quick_plan(budget_min: float | None = None) -> Plan:
    quick = load_profile("quick")
    minutes = budget_min if budget_min is not None else quick.budget_min
    return Plan(target=quick.target_mde, levels=len(quick.levels()), max_pairs=quick.max_pairs,
                budget_s=minutes * 60 if minutes else None, clock=Clock(prior=recorded(), source=FIXTURE.name),
                noise=None, noise_source="none stored")


def test_the_quick_plan_runs_its_minimum_design_and_says_whether_it_fits():
    for minutes in (None, 4, 8, 12, 30):
        p = quick_plan(minutes)
        line = p.minimum_line()
        assert f"the minimum, {MIN_PAIRS} pairs" in line
        took = p.pairs_s(MIN_PAIRS)
        assert took is not None
        if minutes is not None:
            assert ("runs anyway" in line) == (took > minutes * 60), line
        assert p.budget_pairs >= MIN_PAIRS
        got = simulate(recorded(), recorded(), p.budget_s, p.max_pairs, decided_after=None)
        assert got.pairs >= MIN_PAIRS, (minutes, got)


@pytest.mark.parametrize("decided_after", [2, 3, 4, None])
def test_the_profiled_windows_push_no_pair_out_of_the_budget(decided_after):
    truth = recorded()
    for minutes in range(6, 41):
        budget = minutes * 60.0
        without = simulate(truth, truth, budget, 8, decided_after, profiling=False)
        with_ = simulate(truth, truth, budget, 8, decided_after, profiling=True)
        assert with_.pairs == without.pairs, (minutes, with_, without)
        assert set(with_.profiled) <= {"baseline", "stack"}
        assert with_.end_s <= max(budget, without.end_s), (minutes, with_, without)  # never past the budget


def test_the_first_command_on_this_host_decides_in_two_pairs_and_is_diagnosed_within_twelve_minutes():
    """Ray, the slowest layer to start here, decided at the minimum: both sides profiled, all within quick's
    budget (the issue's bar for the README's first command: 12 min of compare)."""
    p = quick_plan()
    got = simulate(recorded(), recorded(), p.budget_s, p.max_pairs, decided_after=2)
    assert got.pairs == 2 and set(got.profiled) == {"baseline", "stack"}, got
    assert p.budget_s is not None and got.end_s <= p.budget_s <= 12 * 60, got
