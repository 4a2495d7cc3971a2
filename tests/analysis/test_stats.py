import numpy as np
import pytest

from harness.analysis.stats import is_good, level_stats, tpot
from harness.load.client import RequestRecord
from harness.profile.schema import SLO
from harness.schemas import Dist

MS = 1_000_000


def rec(i, ok=True, ttft=50.0, e2e=200.0, tokens=16, events=None, start_ms=0.0, error=None):
    events = events if events is not None else list(np.linspace(ttft, e2e, 4))
    t0 = int(start_ms * MS)
    return RequestRecord(level=4, index=i, ok=ok, error=error, ttft_ms=ttft if ok else None,
                         e2e_ms=e2e if ok else None, event_ms=events if ok else [],
                         output_tokens=tokens if ok else None, t_start_ns=t0, t_end_ns=t0 + int(e2e * MS), t_due_ns=t0)


def test_dist_matches_numpy_percentiles():
    rng = np.random.default_rng(7)
    data = rng.lognormal(3, 1, 1001)
    d = Dist.of(data)
    for p in (50, 90, 95, 99):
        assert getattr(d, f"p{p}") == pytest.approx(np.percentile(data, p))
    assert d.mean == pytest.approx(data.mean()) and d.max == pytest.approx(data.max()) and d.n == 1001
    assert Dist.of([]).p50 is None


def test_tpot_excludes_first_token():
    r = rec(0, ttft=100.0, e2e=400.0, tokens=31)
    assert tpot(r) == pytest.approx(10.0)
    assert tpot(rec(1, tokens=1)) is None


def test_goodput_counts_failures_in_the_denominator():
    slo = SLO(ttft_s=0.5, e2e_s=10)
    records = [rec(0), rec(1), rec(2, ttft=600.0, e2e=900.0),  # slow TTFT: not good
               rec(3, ok=False, error="http_500"), rec(4, ok=False, error="timeout")]
    s = level_stats(records, 4, slo)
    assert s.sent == 5 and s.succeeded == 3 and s.failed == 2
    assert s.goodput == pytest.approx(2 / 5)  # not 2/3: failures are misses
    assert s.errors == {"http_500": 1, "timeout": 1}
    assert not is_good(records[3], slo)


def test_throughput_uses_usage_tokens_and_wall_time():
    records = [rec(i, tokens=10, e2e=1000.0, start_ms=500.0 * i) for i in range(3)]  # spans 0..2000 ms
    s = level_stats(records, 2, SLO())
    assert s.wall_s == pytest.approx(2.0)
    assert s.throughput_tok_s == pytest.approx(30 / 2.0)
    assert s.good_rps == pytest.approx(3 / 2.0)


def test_chunk_itl_and_tokens_per_chunk():
    # 3 events carrying 12 tokens: chunk ITL are the event gaps, 4 tokens per chunk
    r = rec(0, ttft=10.0, e2e=40.0, tokens=12, events=[10.0, 25.0, 40.0])
    s = level_stats([r], 1, SLO())
    assert s.itl_ms.n == 2 and s.itl_ms.p50 == pytest.approx(15.0)
    assert s.tokens_per_chunk == pytest.approx(4.0)


def test_optional_tpot_slo():
    r = rec(0, ttft=100.0, e2e=400.0, tokens=31)  # tpot 10 ms
    assert is_good(r, SLO(tpot_s=0.011)) and not is_good(r, SLO(tpot_s=0.009))
