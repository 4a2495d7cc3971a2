"""The queueing rule on made-up windows: the time the layer adds to TTFT outside the engine, or a queue wait the
stack declares, growing with the level fires it at the highest level; flat or shrinking time, or growth that
stays small, does not. Its known truth on real processes is tests/analysis/test_diagnose_truth.py's capped
proxy."""

from __future__ import annotations

from harness.analysis.diagnose import QUEUEING, diagnose
from harness.schemas import CompareSummary, LevelDelta, LevelSummary
from tests.analysis.test_latency_split import level
from tests.analysis.test_latency_split_more import at, side_run

LEVELS = (1, 4, 16)


def window(c: int, outside_ttft_ms: float, queue_us: float | None = None) -> LevelSummary:
    """A window at c whose client TTFT is the engine's 50 ms plus outside_ttft_ms."""
    lv = at(level(50 + outside_ttft_ms, 500, 40, (50, 450, 40)), c=c)
    if queue_us is not None:
        lv.server.layer["queue µs/request"] = queue_us
    return lv


def summary(stack_outside: list[float], queue_us: list[float | None] | None = None) -> CompareSummary:
    """The bare API server adds 2 ms at every level; the stack adds stack_outside[i] at LEVELS[i]."""
    queue_us = queue_us or [None] * len(LEVELS)
    base = side_run("baseline", [window(c, 2.0) for c in LEVELS])
    stack = side_run("stack", [window(c, v, q) for c, v, q in zip(LEVELS, stack_outside, queue_us, strict=True)])
    deltas = [LevelDelta.model_construct(level=c, concurrency=c, verdict="inconclusive", baseline_tok_s=None,
                                         stack_tok_s=None, endpoints={}) for c in LEVELS]
    return CompareSummary(run_id="t", stack="triton", baseline_stack="vllm", in_request_path=True, profile="p",
                          repeats=1, versions={}, version_match=True, applied={}, settings_match=True,
                          settings_mismatches=[], options={}, runs={"baseline": base, "stack": stack}, levels=deltas)


def queueing(s: CompareSummary, queues: dict | None = None):
    return [f for f in diagnose(s, {QUEUEING: "x=1,2"}, queues).findings if f.rule == QUEUEING]


def test_time_outside_the_engine_growing_with_the_level_is_queueing_at_the_highest_level():
    [f] = queueing(summary([4.0, 30.0, 122.0]))
    assert f.level == 16 and f.figure == 120.0  # 122 ms outside, less the bare API server's 2 ms
    assert "from 2 ms at c=1 to 120 ms at c=16" in f.text and f.suggest == "make sweep STACK=triton OPT=x=1,2"
    assert f.evidence == ["the time the layer adds to TTFT outside the engine: 2 ms at c=1, 28 ms at c=4, "
                          "120 ms at c=16"]


def test_flat_small_or_falling_time_outside_the_engine_is_not_queueing():
    assert not queueing(summary([52.0, 60.0, 70.0]))  # a batching interval's 50 ms at every level: not growth
    assert not queueing(summary([3.0, 8.0, 16.0]))  # growing, but 14 ms at the top is under the 20 ms floor
    assert not queueing(summary([4.0, 200.0, 120.0]))  # the highest level is not the worst: no queue that grows
    assert not queueing(summary([200.0, 60.0, 10.0]))


def test_a_declared_queue_wait_that_grows_fires_where_the_outside_time_is_unknown():
    s = summary([4.0, 5.0, 6.0], queue_us=[100.0, 2_000.0, 9_000.0])
    [f] = queueing(s, {"queue µs/request": ("Triton's queue µs/request", 1e-3)})
    assert f.level == 16 and f.figure == 9.0 and "Triton's queue µs/request grows" in f.text
    assert not queueing(s)  # undeclared, the figure is not read
    assert not queueing(summary([4.0, 5.0, 6.0], queue_us=[100.0, 200.0, 4_000.0]),
                        {"queue µs/request": ("Triton's queue µs/request", 1e-3)})  # 4 ms: under the 5 ms floor


def test_the_layers_own_spans_split_the_time_outside_the_engine_hop_by_hop():
    from harness.reporting.diagnosis import diagnosis_tables
    from harness.schemas.profiles import Diagnosis

    s = summary([4.0, 30.0, 122.0])
    stack = s.runs["stack"]
    stack.layer_spans = {"proxy ms/request": 1.0, "ingress ms/request": 1.0, "LLMServer ms/request": 1.0}
    for lv in stack.levels:  # client E2E 500 ms, engine E2E 450: 50 ms outside, split 10 / 25 / 15
        lv.server.layer.update({"proxy ms/request": 490.0, "ingress ms/request": 465.0})
        if lv.stats.level != 16:
            lv.server.layer["LLMServer ms/request"] = 450.0 + 15.0
    s.diagnosis = Diagnosis(checked=[QUEUEING])
    [(title, _, header, rows)] = [t for t in diagnosis_tables(s) if t[0].startswith("Where the time outside")]
    assert "ray" not in title and "triton's own spans" in title
    assert header[1:] == ["client E2E", "proxy ms/request", "ingress ms/request", "LLMServer ms/request",
                          "engine E2E", "before proxy ms/request", "proxy ms/request outside ingress ms/request",
                          "ingress ms/request outside LLMServer ms/request", "LLMServer ms/request outside the engine"]
    assert rows[0] == ["c=1", "500.0", "490.0", "465.0", "465.0", "450.0", "+10.0", "+25.0", "+0.0", "+15.0"]
    # a span the layer did not report leaves the hops on either side of it unattributed, not guessed
    assert rows[2][4] == "—" and rows[2][8:] == ["unattributed", "unattributed"]
