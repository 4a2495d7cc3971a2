"""Where the latency went (harness/analysis/latency_split.py), beyond test_latency_split.py: the client's and the
engine's
means pair the same windows when some of them counted other requests, levels stopped early are left out, a side
is hidden or lagging (never both), and how the report's table marks each case."""

from __future__ import annotations

import pytest

from harness.analysis.latency_split import COUNT_TOLERANCE, LevelSplit, hidden, lagging, mean_of, side_split, split
from harness.reporting.report_tables import split_table
from harness.schemas import AppliedConfig, CompareSummary, LevelSummary, RunSummary
from tests.analysis.test_latency_split import level

OFF = 40 * (1 + 2 * COUNT_TOLERANCE)  # an engine count well outside the tolerance of the client's 40


def at(lv: LevelSummary, c: int | None = None, incomplete: str | None = None) -> LevelSummary:
    """The window moved to concurrency c, or marked as stopped early."""
    update: dict = {"incomplete": incomplete}
    if c is not None:
        update["stats"] = lv.stats.model_copy(update={"concurrency": c})
    return lv.model_copy(update=update)


def side_run(label: str, levels: list[LevelSummary]) -> RunSummary:
    return RunSummary(run_id="t", label=label, stack="vllm" if label == "baseline" else "ray",
                      engine_version="0.32.0", applied=AppliedConfig(), profile="p", levels=levels)


# --- mean_of --------------------------------------------------------------------------------------------------

def test_mean_of_ignores_none_but_not_zero():
    assert mean_of([None, 1.0, 3.0, None]) == pytest.approx(2.0)
    assert mean_of([0.0, None]) == 0.0
    assert mean_of([0.0, 10.0]) == pytest.approx(5.0)
    assert mean_of([None, None]) is None
    assert mean_of([]) is None
    assert isinstance(mean_of([1, 2]), float)


# --- side_split -----------------------------------------------------------------------------------------------

def test_lagging_repeats_are_left_out_of_the_client_mean_too():
    # repeat 2's histograms counted 48 requests for the client's 40: its client figures are left out as well
    side = side_split([level(100, 500, 40, (60, 450, 40)), level(300, 900, 40, (900, 9000, OFF))])
    assert side is not None and side.count_off
    assert side.client_ttft_ms == pytest.approx(100.0) and side.client_e2e_ms == pytest.approx(500.0)
    assert side.engine_ttft_ms == pytest.approx(60.0) and side.engine_e2e_ms == pytest.approx(450.0)
    assert side.outside_ttft_ms == pytest.approx(40.0) and side.outside_e2e_ms == pytest.approx(50.0)
    assert side.client_requests == pytest.approx(40.0) and side.engine_requests == pytest.approx(40.0)


def test_matched_repeats_are_averaged_on_both_sides():
    side = side_split([level(100, 500, 40, (60, 450, 40)), level(120, 540, 40, (70, 470, 41)),
                       level(900, 2000, 40, (10, 20, 20))])  # the third counted half the client's requests
    assert side is not None and side.count_off
    assert side.client_ttft_ms == pytest.approx(110.0) and side.engine_ttft_ms == pytest.approx(65.0)
    assert side.client_e2e_ms == pytest.approx(520.0) and side.engine_e2e_ms == pytest.approx(460.0)
    assert side.outside_ttft_ms == pytest.approx(45.0) and side.outside_e2e_ms == pytest.approx(60.0)
    assert side.engine_requests == pytest.approx(40.5)


def test_no_window_matched_keeps_the_clients_mean_over_every_repeat():
    side = side_split([level(100, 500, 40, (900, 9000, OFF)), level(300, 700, 40, (5, 50, 20))])
    assert side is not None and side.count_off
    assert side.client_ttft_ms == pytest.approx(200.0) and side.client_e2e_ms == pytest.approx(600.0)
    assert side.engine_ttft_ms is None and side.engine_e2e_ms is None
    assert side.outside_ttft_ms is None and side.outside_e2e_ms is None
    assert side.client_requests == pytest.approx(40.0)
    assert side.engine_requests == pytest.approx((OFF + 20) / 2)  # what the histograms did count


def test_count_tolerance_is_a_strict_bound_either_way():
    ok = 40
    edge = ok * COUNT_TOLERANCE
    for n, off in ((ok + edge, False), (ok - edge, False), (ok + edge + 1, True), (ok - edge - 1, True)):
        side = side_split([level(100, 500, ok, (60, 450, n))])
        assert side is not None and side.count_off is off, n
        assert (side.engine_ttft_ms is None) is off


def test_windows_without_an_engine_count_or_without_successes_are_not_counted_off():
    hidden_side = side_split([level(100, 500, 40, (None, None, None))])
    assert hidden_side is not None and not hidden_side.count_off and hidden_side.engine_ttft_ms is None
    assert hidden_side.client_ttft_ms == pytest.approx(100.0) and hidden_side.engine_requests is None
    nothing_ok = side_split([level(100, 500, 0, (60, 450, 5))])  # no successful request to compare with
    assert nothing_ok is not None and not nothing_ok.count_off and nothing_ok.engine_ttft_ms == pytest.approx(60.0)


def test_levels_stopped_early_are_ignored():
    done = level(100, 500, 40, (60, 450, 40))
    stopped = at(level(5000, 9000, 3, (4000, 8000, OFF)), incomplete="the deployment died")
    side = side_split([done, stopped])
    assert side is not None and not side.count_off  # the stopped window's count is not looked at
    assert (side.client_ttft_ms, side.engine_ttft_ms, side.client_requests) == (100.0, 60.0, 40.0)
    assert side_split([stopped]) is None
    assert side_split([]) is None


# --- hidden and lagging ---------------------------------------------------------------------------------------

SHOWN = level(100, 500, 40, (60, 450, 40))
DARK = level(150, 600, 40, (None, None, None))
LAGGED = level(150, 600, 40, (900, 9000, OFF))


def rows(*stack: LevelSummary) -> list[LevelSplit]:
    """One row per window given, each at its own level, the baseline exposing the engine's histograms."""
    return [LevelSplit(level=i + 1, baseline=side_split([SHOWN]), stack=side_split([lv])) for i, lv in enumerate(stack)]


def test_a_side_that_lags_everywhere_is_lagging_not_hidden():
    r = rows(LAGGED, LAGGED)
    assert lagging(r, "stack") and not hidden(r, "stack")
    assert all(x.layer_ttft_ms is None for x in r)


def test_a_side_without_histograms_is_hidden_not_lagging():
    r = rows(DARK, DARK)
    assert hidden(r, "stack") and not lagging(r, "stack")


def test_a_side_with_one_level_measured_is_neither_hidden_nor_lagging():
    for r in (rows(SHOWN), rows(SHOWN, LAGGED), rows(LAGGED, SHOWN), rows(SHOWN, DARK)):
        assert not hidden(r, "stack") and not lagging(r, "stack")
    # a level lagging in one of its windows only still has engine figures
    partial = [LevelSplit(level=4, baseline=None, stack=side_split([SHOWN, LAGGED]))]
    assert not hidden(partial, "stack") and not lagging(partial, "stack")
    assert not hidden(rows(SHOWN), "baseline") and not lagging(rows(SHOWN), "baseline")


def test_a_side_that_measured_nothing_is_neither():
    none_rows = [LevelSplit(level=1, baseline=side_split([SHOWN]), stack=None)]
    for r in ([], none_rows):
        assert not hidden(r, "stack") and not lagging(r, "stack")


def test_rows_where_the_side_is_absent_do_not_decide():
    # the stack died after c=1 (lagging there); c=4 has the baseline only
    r = rows(LAGGED) + [LevelSplit(level=4, baseline=side_split([SHOWN]), stack=None)]
    assert lagging(r, "stack") and not hidden(r, "stack")
    r = rows(DARK) + [LevelSplit(level=4, baseline=side_split([SHOWN]), stack=None)]
    assert hidden(r, "stack") and not lagging(r, "stack")


# --- split over a compare's runs ------------------------------------------------------------------------------

def test_split_has_a_row_per_level_either_side_measured():
    base = side_run("baseline", [at(level(100, 500, 40, (60, 450, 40)), c=1), at(level(120, 520, 40, (62, 455, 40)),
                                                                                c=4)])
    stack = side_run("stack", [at(level(200, 640, 40, (63, 460, 40)), c=4),
                               at(level(999, 999, 40, (1, 1, 40)), c=8, incomplete="died")])
    got = split({"baseline": base, "stack": stack})
    assert [r.level for r in got] == [1, 4, 8]
    assert got[0].stack is None and got[0].baseline is not None and got[0].layer_ttft_ms is None
    assert got[1].layer_ttft_ms == pytest.approx((200 - 63) - (120 - 62))
    assert got[1].layer_e2e_ms == pytest.approx((640 - 460) - (520 - 455))
    assert got[2].baseline is None and got[2].stack is None  # stopped early: no figures
    assert split({}) == []


def test_layer_share_pairs_the_windows_that_matched():
    # the stack's second window lagged: its much slower client figures must not inflate the layer's share
    base = side_run("baseline", [at(level(100, 500, 40, (60, 450, 40)), c=4)])
    stack = side_run("stack", [at(level(180, 600, 40, (62, 455, 40)), c=4),
                               at(level(1000, 3000, 40, (900, 2900, OFF)), c=4)])
    (r,) = split({"baseline": base, "stack": stack})
    assert r.stack is not None and r.stack.count_off
    assert r.layer_ttft_ms == pytest.approx((180 - 62) - (100 - 60))
    assert r.layer_e2e_ms == pytest.approx((600 - 455) - (500 - 450))


def test_split_table_marks_lagging_hidden_and_partial_cells():
    def summary(stack_levels: list[LevelSummary]) -> CompareSummary:
        runs = {"baseline": side_run("baseline", [at(SHOWN, c=4)]), "stack": side_run("stack", stack_levels)}
        return CompareSummary(run_id="t", stack="ray", baseline_stack="vllm", in_request_path=True, profile="p",
                              repeats=2, versions={}, version_match=True, applied={}, settings_match=True,
                              settings_mismatches=[], options={}, runs=runs)

    def table(stack_levels: list[LevelSummary]) -> tuple[str, list[str]]:
        (_, caption, header, body), = split_table(summary(stack_levels))
        assert header[5] == "ray engine"
        return caption, body[0]

    caption, row = table([at(LAGGED, c=4)])
    assert row[5] == "lagging" and row[6] == "—" and row[7] == "—" and "Marked *" in caption
    assert "does not expose" not in caption
    caption, row = table([at(DARK, c=4)])
    assert row[5] == "hidden" and "ray does not expose the engine's TTFT and E2E histograms" in caption
    assert "Marked *" not in caption
    caption, row = table([at(SHOWN, c=4), at(LAGGED, c=4)])
    assert row[5] == "60.0*" and row[4] == "100.0" and row[6] == "40.0*" and row[7] == "+0"
    caption, row = table([at(SHOWN, c=4)])
    assert row[5] == "60.0" and "*" not in "".join(row) and "Marked *" not in caption
