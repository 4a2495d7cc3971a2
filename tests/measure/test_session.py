"""The baseline-then-stack loop that compare and audit share: sides a resumed compare measured completely are
handed back without deploying, and the caller hears of every side; an audit stops at the first failure."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from harness.errors import LayerbenchError
from harness.measure.run import Output, Run
from harness.measure.session import baseline_then_stack
from harness.schemas import AppliedConfig, RunSummary


def summary(label: str) -> RunSummary:
    return RunSummary(run_id="r", label=label, stack="sim", engine_version="1", applied=AppliedConfig(),
                      profile="p")


class Refuses:
    """A deployment that must not happen (a side already measured), or one that fails when it does."""

    kind = "sim"

    def __init__(self, fail: bool = False):
        self.fail, self.entered = fail, 0

    def __enter__(self):
        self.entered += 1
        if self.fail:
            raise LayerbenchError("cannot deploy")
        raise AssertionError("deployed a side that was measured before")

    def __exit__(self, *exc):
        return False


def test_sides_a_resume_measured_are_not_deployed_and_are_reported(tmp_path):
    prior = {"baseline": summary("baseline"), "stack": summary("stack")}
    plan = SimpleNamespace(prior=prior, side_done=lambda label: True, invocation=1)
    heard: list[set[str]] = []
    run = Run(None, None, Output.to(Console(file=io.StringIO())), 2, plan)  # type: ignore[arg-type]
    out = baseline_then_stack([("baseline", Refuses()), ("stack", Refuses())], run,
                              after_side=lambda s: heard.append(set(s.runs)))
    assert set(out.runs) == {"baseline", "stack"} and not out.failures
    assert heard == [{"baseline"}, {"baseline", "stack"}]  # the caller could write both sides
    assert all(r.status == "complete" for r in out.runs.values())


def test_keep_going_false_stops_at_the_first_failing_shape(tmp_path):
    plan = SimpleNamespace(prior={"baseline": summary("baseline")}, side_done=lambda label: label == "baseline",
                           invocation=1)
    failing, after = Refuses(fail=True), Refuses(fail=True)
    writer = SimpleNamespace(dir=tmp_path)
    run = Run(None, writer, Output.to(Console(file=io.StringIO())), 1, plan)  # type: ignore[arg-type]
    out = baseline_then_stack([("baseline", Refuses()), ("stack", failing), ("stack-2", after)], run,
                              keep_going=False)
    assert out.failures == {"stack": "cannot deploy"} and failing.entered == 1 and after.entered == 0
