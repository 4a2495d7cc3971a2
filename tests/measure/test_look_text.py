"""A look's line agrees with the verdict table: a level whose verdict one endpoint already made is named with it,
and each open level says which endpoints hold it open."""

from __future__ import annotations

from types import SimpleNamespace

from harness.measure.stopping import SequentialStop
from harness.schemas.verdicts import LevelDelta, Verdict


def level(c: int, verdict: str, **endpoints: str) -> LevelDelta:
    return LevelDelta.model_construct(concurrency=c, rate=None, verdict=verdict,
                                      endpoints={ep: Verdict.model_construct(verdict=v) for ep, v in endpoints.items()})


def look(*levels: LevelDelta) -> str:
    stop = SimpleNamespace(summary=SimpleNamespace(levels=list(levels)))
    return SequentialStop.look_text(stop, SequentialStop.open_levels(stop))


def test_a_level_decided_on_one_endpoint_is_named_with_its_verdict():
    # Ray on the 2-core host: TTFT p95 ×3.3 at c=1 is overhead after 2 pairs, its throughput still undecided
    text = look(level(1, "overhead", throughput="inconclusive", goodput="equivalent", ttft_p95="overhead"),
                level(2, "inconclusive", throughput="equivalent", goodput="equivalent", ttft_p95="inconclusive"),
                level(16, "equivalent", throughput="equivalent", goodput="equivalent", ttft_p95="equivalent"),
                level(64, "host-bound"))
    assert text == ("decided: c=16 equivalent; open: c=1 (overhead so far, throughput undecided), "
                    "c=2 (TTFT p95 undecided)")


def test_nothing_decided():
    text = look(level(1, "inconclusive", throughput="inconclusive", goodput="inconclusive", ttft_p95="inconclusive"))
    assert text == "no level fully decided yet; open: c=1 (throughput, goodput, TTFT p95 undecided)"
