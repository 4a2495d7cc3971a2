"""The engine's prefix-cache hit rate per level from its own counters, and the flag when a unique-prefix run
reused prompt tokens anyway."""

from __future__ import annotations

from types import SimpleNamespace

from harness.analysis.prefix_cache import UNIQUE_MAX, hit_rates, reused


def _run(*windows: tuple[int, float | None, float | None], shared: bool = False) -> SimpleNamespace:
    return SimpleNamespace(shared_prefix=shared, levels=[SimpleNamespace(stats=SimpleNamespace(level=c),
                                                   server=SimpleNamespace(prefix_cache_hits=h, prefix_cache_queries=q))
                                   for c, h, q in windows])


def test_hit_rate_sums_the_windows_of_a_level_and_skips_levels_without_counters():
    run = _run((1, 0.0, 1000.0), (1, 100.0, 1000.0), (4, 0.0, 4000.0), (8, None, None), (16, 5.0, 0.0))
    assert hit_rates(run) == {1: 0.05, 4: 0.0}  # c=8: no counters; c=16: nothing queried
    assert hit_rates(None) == {}


def test_a_level_reusing_more_than_the_bound_is_flagged():
    rates = {1: 0.0, 8: UNIQUE_MAX, 16: 0.18}  # the bound itself is not a reuse; 18% is
    assert reused(rates) == {16: 0.18}


def test_the_compare_report_shows_both_sides_and_warns_only_above_the_bound(tmp_path):
    from harness.reporting.report import reuse_warning
    from harness.reporting.report_tables import prefix_table

    s = SimpleNamespace(runs={"baseline": _run((16, 0.0, 1000.0)), "stack": _run((16, 180.0, 1000.0))},
                        levels=[SimpleNamespace(level=16, level_text="c=16")], open_loop=False, stack="x",
                        baseline_stack="vllm", shape=None, is_aa=False)
    (name, caption, header, rows), = prefix_table(s)
    assert rows == [["c=16", "0%", "18%"]] and "unique prefix did not hold" in caption
    assert reuse_warning("baseline", s.runs["baseline"], False) == []
    (line,) = reuse_warning("stack", s.runs["stack"], False)
    assert "unique prefix did not hold" in line and "18% at c=16" in line


def test_a_profile_that_shares_prefixes_on_purpose_is_not_warned():
    from harness.reporting.report import reuse_warning
    from harness.reporting.report_tables import prefix_table

    run = _run((16, 900.0, 1000.0), shared=True)
    s = SimpleNamespace(runs={"baseline": run, "stack": run}, levels=[SimpleNamespace(level=16, level_text="c=16")],
                        open_loop=False, stack="x", baseline_stack="vllm", shape=None, is_aa=False)
    assert reuse_warning("stack", run, False) == []
    (_, caption, _, rows), = prefix_table(s)
    assert rows == [["c=16", "90%", "90%"]] and "share prefixes in groups" in caption
