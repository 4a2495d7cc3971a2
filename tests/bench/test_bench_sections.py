"""The harness benchmark's sections, from synthetic runs (no engine): per-round excess over the floor, the
vllm-bench/layerbench ratio, capacity ratios and CPU per event flagged when invalid, and run.main's assembly."""

import json

import pytest

from harness.bench import accuracy, capacity, cpu_per_event, run
from harness.bench.clients import ClientRun, rotated
from harness.bench.figures import Invalid, Spread
from harness.bench.section import SectionResult


def crun(client, c, ttft_err, true_p50=51.0, true_p99=55.0, events=64, wall=1.0):
    """A run whose TTFT p50/p99 error is ttft_err (all requests alike)."""
    return ClientRun(client, c, ttft=[true_p50 + ttft_err] * 5 + [true_p99 + ttft_err], e2e=[700.0] * 6,
                     itl=[10.0] * 6, events=events, wall_s=wall,
                     server={m: {"p50_ms": true_p50, "p99_ms": true_p50 + 0.05 * (true_p99 - true_p50)}
                             for m in ("ttft", "e2e", "itl")} | {"late_first": {"p50_ms": 0.3, "p99_ms": 1.5}})


def runs_at(c, floor, lb, vb):
    return {("floor", c): [crun("floor", c, e) for e in floor],
            ("layerbench", c): [crun("layerbench", c, e) for e in lb],
            ("vllm bench serve", c): [crun("vllm bench serve", c, e) for e in vb]}


def test_excess_pairs_each_round_with_its_floor():
    runs = runs_at(64, floor=[3.0, 8.0, 4.0], lb=[3.2, 8.1, 4.3], vb=[14.0, 19.0, 15.0])
    x = accuracy.excess(runs[("layerbench", 64)], runs[("floor", 64)])
    assert x.values == pytest.approx((0.2, 0.1, 0.3))  # pooled means would mix the drift into it


def test_verdicts_met_only_if_worst_round_meets():
    judged, data = accuracy.verdicts(runs_at(64, [3.0, 3.0, 3.0], [3.2, 3.1, 3.9], [14.0, 14.0, 14.0]), 64)
    p50 = judged[0]
    assert p50.met is False and "worst round +0.90" in p50.detail
    assert data["layerbench_excess_p50_ms"]["max"] == pytest.approx(0.9)


def test_ratio_counts_floor_level_excess_as_lower_bound():
    ratio, low = accuracy.excess_ratio(Spread.of([11.0, 10.0, 12.0]), Spread.of([-0.02, 0.5, 0.1]))
    assert low == [1, 3]
    assert ratio.values == pytest.approx((110.0, 20.0, 120.0))
    judged, _ = accuracy.verdicts(runs_at(64, [3.0] * 3, [2.98, 3.5, 3.05], [14.0, 13.0, 15.0]), 64)
    assert judged[2].met is True and "lower bounds" in judged[2].detail and "round(s) 1, 3" in judged[2].detail


def test_ratio_invalid_when_other_client_is_at_the_floor():
    ratio, _ = accuracy.excess_ratio(Spread.of([11.0, 0.05]), Spread.of([0.5, 0.5]))
    assert isinstance(ratio, Invalid) and "round(s) 2" in ratio.reason


def test_accuracy_markdown_shows_spread_and_verdicts():
    runs = runs_at(64, [3.0, 3.0, 3.0], [3.2, 3.1, 3.3], [14.0, 13.0, 15.0])
    judged, _ = accuracy.verdicts(runs, 64)
    md = "\n".join(accuracy.markdown(runs, judged, 3))
    assert "+0.20 (+0.10…+0.30)" in md
    assert "- target layerbench TTFT p50 excess over the floor at c=64 ≤ 0.5 ms: **met**" in md


def test_rotated_gives_each_client_each_place():
    names = ("a", "b", "c")
    assert [rotated(names, k)[0] for k in range(3)] == ["a", "b", "c"]
    assert rotated(names, 4) == ("b", "c", "a")


def test_cpu_per_event_negative_is_invalid_not_a_result():
    figs = cpu_per_event.figures({"floor": [31.0, 30.0, 33.0], "layerbench": [48.0, 47.0, 50.0],
                                  "vllm bench serve": [66.0, -31.2, 70.0]})
    md = "\n".join(cpu_per_event.markdown(figs, 3))
    assert "-31.2" in md and "fixed costs did not cancel" in md  # named as the reason, in the invalid cell
    assert "| vllm bench serve | invalid:" in md
    assert "×" not in md.split("By CPU cost")[1].split("invalid")[0]  # no ratio printed as a result
    assert "48.0 (47.0…50.0)" in md


def test_cpu_per_event_ratio_per_round():
    figs = cpu_per_event.figures({"layerbench": [50.0, 40.0], "vllm bench serve": [100.0, 100.0]})
    md = "\n".join(cpu_per_event.markdown(figs, 2))
    assert "2.2× (2.0×…2.5×)" in md  # median of the per-round ratios


@pytest.mark.parametrize("lb,vb,limited,words,met", [
    ((3000.0, False), (2000.0, False), False, "1.5×", True),
    ((3000.0, True), (2000.0, False), True, "≥ 1.5×", True),
    ((3000.0, True), (2900.0, True), True, "not established", None),
    ((3000.0, False), (0.0, False), False, "invalid", None),
    ((2000.0, False), (2000.0, True), True, "≤ 1.0×", False),
])
def test_capacity_ratio_flags_what_is_not_established(lb, vb, limited, words, met):
    got, ok = capacity.capacity_ratio(lb, vb, limited)
    assert got.startswith(words) and ok is met


def test_main_runs_a_list_of_sections(tmp_path):
    def fake(ctx):
        assert ctx.tmp.is_dir()
        return SectionResult("fake", ["## Fake", "", "body"], {"x": 1})

    path = run.main(tmp_path, sections=[fake])
    assert "## Fake" in path.read_text()
    assert json.loads((tmp_path / "harness-bench.json").read_text()) == {"targets": [], "fake": {"x": 1}}


def test_busy_rounds_are_named_in_the_verdicts():
    runs = runs_at(64, [3.0] * 3, [3.2, 3.1, 3.3], [14.0, 13.0, 15.0])
    runs[("floor", 64)][1].other_cores = 0.9
    runs[("layerbench", 64)][1].other_cores = 0.1
    judged, data = accuracy.verdicts(runs, 64)
    assert data["busy_rounds"] == {2: 0.9}
    assert all("machine busy in round(s) 2 (other processes 0.90 cores)" in v.detail for v in judged)


def with_delivery(run, sent_ns, arrived_ns):
    run.server["first_sent_ns"] = list(sent_ns)
    run.first_ns = list(arrived_ns)
    return run


def test_delivery_pairs_sorted_absolute_times():
    sent = [1_000_000_000 + k * 1_000_000 for k in range(10)]
    r = with_delivery(crun("floor", 64, 3.0), sent, [s + 50_000 for s in reversed(sent)])  # 0.05 ms each
    assert accuracy.delivery(r, 50) == pytest.approx(0.05)
    assert accuracy.delivery(crun("floor", 64, 3.0), 50) is None  # the server did not report its send times
    assert accuracy.delivery(with_delivery(crun("floor", 64, 3.0), sent, sent[:-1]), 50) is None


def test_own_excess_uses_delivery_and_ignores_the_intake_noise():
    sent = [k * 1_000_000 for k in range(10)]
    runs = runs_at(64, floor=[3.0, 8.0, 4.0], lb=[6.0, 2.0, 4.5], vb=[14.0, 19.0, 15.0])  # TTFT errors: noisy
    for k in range(3):
        with_delivery(runs[("floor", 64)][k], sent, [s + 60_000 for s in sent])
        with_delivery(runs[("layerbench", 64)][k], sent, [s + 90_000 for s in sent])
        with_delivery(runs[("vllm bench serve", 64)][k], sent, [s + 200_000 for s in sent])
    x, basis = accuracy.own_excess(runs[("layerbench", 64)], runs[("floor", 64)])
    assert basis == "delivery" and x.values == pytest.approx((0.03, 0.03, 0.03))
    judged, data = accuracy.verdicts(runs, 64)
    assert [v.met for v in judged] == [True, True, True]
    assert data["vllm_bench_excess_p50_ms"]["rounds"] == pytest.approx([11.0, 11.0, 11.0])  # its TTFT error
    assert "lower bounds" in judged[2].detail
    assert "`vllm bench serve` ttft error, layerbench delivery" in judged[2].detail
    x, basis = accuracy.own_excess(runs[("layerbench", 64)][:1] + [crun("layerbench", 64, 2.0)] * 2,
                                   runs[("floor", 64)])
    assert basis == "ttft error"


def test_other_load_is_measured_around_a_run():
    from harness.bench.clients import OtherLoad

    class NoDeployment:
        def processes(self):
            return {}

    run = OtherLoad(NoDeployment()).run(lambda url, c, n, tokens: crun("floor", c, 1.0), "http://x", 4, 8, 16)
    assert run.other_cores is not None and run.other_cores >= 0.0
