"""The verdict benchmark's sequential part, from fake compares (no deployment): the flags its compares pass, the
true delta's noiseless fixed compare, and the table of pairs used, stop reasons, verdicts and estimates."""

import json
import math
from types import SimpleNamespace

import pytest
from rich.console import Console
from rich.progress import Progress

from harness.bench import verdicts
from harness.bench.section import Context
from harness.errors import LayerbenchError
from harness.schemas import Decision, Stopping
from harness.schemas.verdicts import Verdict


def seq(pairs, stopped, *levels):
    """A compare as _sequential records it; levels: (level, verdict, throughput log ratio)."""
    return {"pairs": pairs, "stopped": stopped, "looks": list(range(2, pairs + 1)),
            "levels": [{"level": c, "verdict": v, "estimate": e, "decided_at": None} for c, v, e in levels]}


SLOW = math.log(0.9)
DATA = {
    "truth": {"aa": [0.0, 0.0], "slow": [math.log(0.889), math.log(0.902)]},
    "cases": {
        "aa": [seq(8, "max_pairs 8 reached", (1, "inconclusive", 0.02), (4, "inconclusive", -0.01)),
               seq(8, "max_pairs 8 reached", (1, "equivalent", 0.0), (4, "inconclusive", 0.03)),
               seq(5, "every judged level decided after 5 pairs", (1, "equivalent", 0.01), (4, "equivalent", -0.02))],
        "slow": [seq(6, "every judged level decided after 6 pairs", (1, "overhead", SLOW - 0.02),
                     (4, "overhead", SLOW)),
                 seq(8, "the budget (15 min) holds no further pair (~2.0 min each) after 8 pairs",
                     (1, "overhead", SLOW + 0.02), (4, "host-bound", None))],
    },
}


def test_figures_count_pairs_stop_reasons_and_verdicts_per_level():
    aa, slow = verdicts.sequential_figures(DATA)
    assert aa["pairs"] == [8, 8, 5] and aa["mean_pairs"] == pytest.approx(7.0)
    assert aa["stopped"] == {"max_pairs reached": 2, "every level decided": 1}
    assert [lv["verdicts"] for lv in aa["levels"]] == [{"equivalent": 2, "inconclusive": 1},
                                                      {"equivalent": 1, "inconclusive": 2}]
    assert aa["levels"][0]["estimate_pct"] == pytest.approx(100 * math.expm1(0.01))  # mean of the log ratios
    assert aa["levels"][0]["truth_pct"] == 0.0
    assert slow["stopped"] == {"every level decided": 1, "budget spent": 1}
    c1, c4 = slow["levels"]
    assert c1["estimate_pct"] == pytest.approx(-10.0) and c1["truth_pct"] == pytest.approx(-11.1)
    # a level without a verdict is counted by its reason, after the four verdicts; without an estimate it is left
    # out of the mean rather than read as 0
    assert list(c4["verdicts"]) == ["overhead", "host-bound"]
    assert c4["estimate_pct"] == pytest.approx(-10.0) and c4["truth_pct"] == pytest.approx(-9.8)


def test_table_shows_pairs_reasons_verdicts_and_the_truth_beside_the_estimate():
    md = verdicts.render_sequential(verdicts.sequential_figures(DATA), 400.0)
    assert md[0] == "## Sequential stopping on real deployments"
    rows = [line for line in md if line.startswith("| ")][1:]
    assert len(rows) == 2
    aa, slow = rows
    assert "| 3 | 8, 8, 5 (mean 7.0) | max_pairs reached ×2; every level decided ×1 |" in aa
    assert "c=1: 2 equivalent, 1 inconclusive; c=4: 1 equivalent, 2 inconclusive" in aa
    assert "c=1: +1.0% (true +0.0%); c=4: +0.0% (true +0.0%)" in aa  # never -0.0%
    assert "c=1: 2 overhead; c=4: 1 overhead, 1 host-bound" in slow
    assert "c=1: -10.0% (true -11.1%); c=4: -10.0% (true -9.8%)" in slow
    assert "`--max-pairs 8 --mde 10%`" in md[2] and "400 s" in md[2]


def test_a_level_no_compare_estimated_shows_a_dash_not_zero():
    data = {"truth": {"slow": [SLOW]}, "cases": {"slow": [seq(2, None, (1, "host-bound", None))]}}
    rows = verdicts.sequential_figures(data)
    assert rows[0]["stopped"] == {"no reason recorded": 1}
    table = "\n".join(verdicts.render_sequential(rows, 1.0))
    assert "c=1: — (true -10.0%)" in table


@pytest.mark.parametrize("text,kind", [
    ("every judged level decided after 3 pairs", "every level decided"),
    ("max_pairs 8 reached", "max_pairs reached"),
    ("the budget (15 min) holds no further pair (~1.2 min each) after 4 pairs", "budget spent"),
    ("something new", "something new"),  # a reason this benchmark does not know is shown as it is
    (None, "no reason recorded"),
])
def test_stop_kind(text, kind):
    assert verdicts.stop_kind(text) == kind


def fake_summary(flags, pairs=3):
    """What _run returns, enough for _compare and _sequential: levels c=1, 4 with a throughput endpoint."""
    ep = {"throughput": Verdict(estimate=SLOW, lo=SLOW - 0.05, hi=SLOW + 0.05, se=0.02, df=4.0, p=0.01,
                                verdict="overhead")}
    levels = [SimpleNamespace(level=c, verdict="overhead", endpoints=ep) for c in (1, 4)]
    if "--pairs" in flags:
        return SimpleNamespace(pairs=int(flags[flags.index("--pairs") + 1]), stopping=None, levels=levels)
    stopping = Stopping(max_pairs=8, target_mde=0.1, looks=[2, 3], stopped="every judged level decided after 3 pairs",
                        decided={name: {1.0: Decision(verdict="overhead", pairs=2), 4.0: Decision(verdict="overhead",
                                                                                               pairs=3)}
                                 for name in ("throughput", "goodput", "ttft_p95")})
    return SimpleNamespace(pairs=pairs, stopping=stopping, levels=levels)


def test_sequential_compare_passes_no_pairs_and_records_its_stop(monkeypatch, tmp_path):
    calls = []

    def run(tmp, name, stack, opts, flags):
        calls.append(flags)
        return fake_summary(flags)

    monkeypatch.setattr(verdicts, "_run", run)
    got = verdicts._sequential(tmp_path, "x", "sim-proxy", [])
    assert calls == [["--max-pairs", "8", "--mde", "10%"]]
    assert got["pairs"] == 3 and got["stopped"].startswith("every judged level decided")
    assert [(lv["level"], lv["decided_at"]) for lv in got["levels"]] == [(1, 2), (4, 3)]
    assert got["levels"][0]["estimate"] == pytest.approx(SLOW)


def test_sequential_compare_refuses_a_fixed_design(monkeypatch, tmp_path):
    monkeypatch.setattr(verdicts, "_run", lambda *a: SimpleNamespace(pairs=4, stopping=None, levels=[]))
    with pytest.raises(LayerbenchError, match="fixed design"):
        verdicts._sequential(tmp_path, "x", "sim", [])


def test_truth_is_a_noiseless_fixed_compare_and_the_cases_carry_the_mid_noise(monkeypatch, tmp_path):
    calls = []

    def run(tmp, name, stack, opts, flags):
        calls.append((name, stack, opts, flags))
        return fake_summary(flags)

    monkeypatch.setattr(verdicts, "_run", run)
    with Progress(console=Console(quiet=True)) as progress:
        out = verdicts.measure_sequential(Context(tmp_path, progress))
    name, stack, opts, flags = calls[0]
    assert (stack, flags) == ("sim-proxy", ["--pairs", "2"]) and "request_delay_ms=7" in opts
    assert not any("sigma" in o for o in opts)  # the true delta is measured without noise
    rest = calls[1:]
    assert len(rest) == 2 * verdicts.SEQ_COMPARES
    assert all(f == ["--max-pairs", "8", "--mde", "10%"] for *_, f in rest)
    assert all({"deployment_sigma=0.05", "window_sigma=0.03"} <= set(o) for _, _, o, _ in rest)
    assert {s for _, s, _, _ in rest} == {"sim", "sim-proxy"}
    assert not any("request_delay_ms=7" in o for _, s, o, _ in rest if s == "sim")
    assert out["truth"] == {"aa": [0.0, 0.0], "slow": [pytest.approx(SLOW)] * 2}
    assert [len(v) for v in out["cases"].values()] == [verdicts.SEQ_COMPARES] * 2


def test_one_verdicts_section_renders_both_parts_and_its_data_is_json(monkeypatch, tmp_path):
    monkeypatch.setattr(verdicts, "_run", lambda tmp, name, stack, opts, flags: fake_summary(flags))
    with Progress(console=Console(quiet=True)) as progress:
        result = verdicts.section(Context(tmp_path, progress))
    assert result.key == "verdicts"
    headings = [line for line in result.markdown if line.startswith("## ")]
    assert headings == ["## Verdicts on real deployments", "## Sequential stopping on real deployments"]
    assert f"{verdicts.COMPARES} real compares per case, {verdicts.PAIRS} deployment pairs" in "\n".join(
        result.markdown)
    back = json.loads(json.dumps(result.data))  # harness-bench.json holds it
    assert [r["case"] for r in back["sequential"]["figures"]] == ["aa", "slow"]
    assert back["sequential"]["figures"][1]["pairs"] == [3] * verdicts.SEQ_COMPARES


def test_each_self_check_says_the_rate_it_can_detect_at_its_sample_size():
    from harness.bench.verdicts import can_detect, verdicts, wilson

    # 6 A/A compares: 1 of 6 (95% 3-56%) is no evidence against 8%, 2 of 6 (10-70%) is
    assert wilson(1, 6)[0] < 0.08 < wilson(2, 6)[0]
    assert can_detect(6, 0.0, 0.08) == "fails at 2 or more of 6, which a true rate of 42% reaches 80% of the time"
    text = {v.target: v.detail for v in verdicts({"t1_compare": (0, 60), "t3_cover": (24, 24)})}
    assert any("fails at 9 or more of 60" in d for d in text.values())  # more compares, a smaller rate found
    assert can_detect(24, 0.93, 0.97) == ("fails at 19 or fewer of 24, which a true rate of 74% reaches 80% of the "
                                          "time")  # 24 intervals cannot tell 90% coverage from 95%
