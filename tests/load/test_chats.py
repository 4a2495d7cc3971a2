"""Chats in an open loop and a trace's chats: `sessions.rate` starts chats on a schedule (a level is the request rate
they offer), a trace with `sessions` keeps each chat's turns in one load process and after one another, and
`segments` cuts a replay into levels of equal time. What is read before anything is deployed, and what is refused."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.analysis.samples import SideReplay
from harness.errors import LayerbenchError
from harness.load.client import RequestRecord
from harness.load.openloop import RatePlan, schedule
from harness.profile.loading import load_profile
from harness.reporting.workload_report import minutes_table, trace_table

CHATS = {"turns": 3, "think_time_s": 0.5, "rate": [1, 0.5]}


def test_an_open_loop_of_chats_is_measured_at_the_request_rate_it_offers(write_profile):
    p = load_profile(str(write_profile(sessions=CHATS, input_tokens=40, output_tokens=8, requests=31)))
    assert p.open_loop and p.chats_open and p.sessions is not None and p.sessions.rate == [0.5, 1.0]
    assert p.levels() == [1.5, 3.0]  # rate x turns
    assert p.requests_for(1.5) == 33  # whole chats: 31 requests round up to 11 chats of 3
    assert "chats of 3 turns (0.5 s to think) starting at 0.5, 1 a second" in p.shape_text()
    moved = p.with_levels([6.0])
    assert moved.sessions is not None and moved.sessions.rate == [2.0] and moved.levels() == [6.0]
    closed = load_profile(str(write_profile("closed", sessions={"turns": 3}, concurrency=[2])))
    assert not closed.open_loop and closed.levels() == [2]


@pytest.mark.parametrize(("fields", "message"), [
    ({"rates": [2.0], "sessions": {"turns": 2}}, "set `sessions.rate`"),
    ({"concurrency": [4], "sessions": {"turns": 2, "rate": 1}}, "`sessions.rate` (open loop: chats started per "
                                                                "second), not both"),
    ({"sessions": {"turns": 2, "rate": 0}}, "positive number of chats started per second"),
    ({"sessions": {"turns": 2, "rate": []}}, "positive number of chats started per second"),
    ({"arrival": "constant"}, "set `rates` (req/s) or `sessions.rate` (chats/s) too"),
])
def test_a_chat_rate_that_cannot_run_is_refused_with_one_message(write_profile, fields, message):
    with pytest.raises(LayerbenchError) as e:
        load_profile(str(write_profile(**fields)))
    assert message in " ".join(str(e.value).split())


def test_a_plan_of_single_requests_keeps_its_schedule_and_one_of_chats_starts_chats():
    single = RatePlan(6.0, 40, repeat=1, seed="s")
    assert single.starts(40, "measure") == schedule(6.0, 40, "poisson", "s", 1, "measure")
    chats = RatePlan(6.0, 40, repeat=1, seed="s", turns=3)
    assert chats.starts(40, "measure") == schedule(2.0, math.ceil(40 / 3), "poisson", "s", 1, "measure")


def _jsonl(tmp_path: Path, rows: list[tuple[float, str | None]], name: str = "t") -> str:
    path = tmp_path / f"{name}.jsonl"  # a file of its own: a trace is read once per file and change
    path.write_text("".join(json.dumps({"t_ms": t, "input_tokens": 40, "output_tokens": 8,
                                        **({"session": c} if c else {})}) + "\n" for t, c in rows))
    return str(path)


def test_a_traces_chats_go_out_from_one_process_each_turn_after_the_last(tmp_path, write_profile):
    rows = [(0, "a"), (10, "b"), (20, None), (30, "a"), (40, "c"), (50, "b"), (60, "a"), (70, None)]
    p = load_profile(str(write_profile(trace={"path": _jsonl(tmp_path, [(t + 80 * k, c) for k in range(3)
                                                                        for t, c in rows]),
                                              "format": "jsonl", "sessions": True})))
    t = p.replay()
    mine = [t.share(k, 2, by_chat=True) for k in range(2)]
    assert sorted(mine[0] + mine[1]) == list(range(24))
    chats = [{t.requests[i].chat for i in part} - {None} for part in mine]
    assert chats[0] and chats[1] and not chats[0] & chats[1]  # a chat never spans two processes
    every = t.share(0, 1, by_chat=True)
    after = t.previous_turns(every)
    assert after[:8] == (-1, -1, -1, 0, -1, 1, 3, -1)  # a: 0 -> 3 -> 6; b: 1 -> 5; no chat: never waits
    assert t.share(1, 2, by_chat=False) == list(range(1, 24, 2))


@pytest.mark.parametrize(("trace", "message"), [
    ({"format": "mooncake", "sessions": True}, "mooncake traces carry no chat ids"),
    ({"format": "jsonl", "sessions": True, "arrivals": "even"}, "use one or the other"),
    ({"format": "jsonl", "sessions": True}, "names no chat in the window replayed"),
    ({"format": "jsonl", "segments": 0}, "greater than or equal to 1"),
    ({"format": "jsonl", "segments": 9}, "cut it in fewer segments"),
])
def test_a_trace_rule_that_cannot_hold_is_refused_with_one_message(tmp_path, write_profile, trace, message):
    path = _jsonl(tmp_path, [(i * 100, None) for i in range(60)])
    with pytest.raises(LayerbenchError) as e:
        load_profile(str(write_profile(trace={"path": path, **trace})))
    assert message in " ".join(str(e.value).split())


# 60 requests at 10 req/s, then 60 at 5 req/s: over 17.8 s, three segments of 5.93 s hold 60, 30 and 30
STRETCHES = [(i * 100, None) for i in range(60)] + [(6000 + i * 200, None) for i in range(60)]


def test_segments_cut_the_replay_into_levels_of_equal_time_in_the_traces_order(tmp_path, write_profile):
    p = load_profile(str(write_profile(trace={"path": _jsonl(tmp_path, STRETCHES), "format": "jsonl",
                                              "segments": 3})))
    levels = p.levels()
    assert len(levels) == 3 and levels[0] > levels[1] == pytest.approx(levels[2] - 0.01)  # one rate, told apart
    assert [p.requests_for(x) for x in levels] == [60, 30, 30]
    assert p.segment(levels[0]) == list(range(60)) and p.segment(99.0) == []
    assert levels[0] == pytest.approx(60 * (119 / 120) / (17.8 / 3), abs=0.01)
    whole = load_profile(str(write_profile("w", trace={"path": _jsonl(tmp_path, STRETCHES), "format": "jsonl"})))
    assert len(whole.levels()) == 1 and whole.requests_for(whole.levels()[0]) == 120


def test_the_replay_tables_show_segments_held_turns_and_each_minute(tmp_path, write_profile):
    p = load_profile(str(write_profile(trace={"path": _jsonl(tmp_path, STRETCHES), "format": "jsonl",
                                              "segments": 3})))
    (_, _, _, trows), = trace_table(p, {"baseline": {p.levels()[0]: 0.5}})
    got = {r[0]: r[1] for r in trows}
    assert got["segments (the levels, in the trace's order)"].startswith("3 stretches of 5.9 s")
    assert got["prefix-cache hits, baseline (its engines' counters)"] == "50% / — / —"
    one_chat = _jsonl(tmp_path, [(i * 100, "x") for i in range(30)], "x")
    chats = load_profile(str(write_profile("c", trace={"path": one_chat, "format": "jsonl", "sessions": True})))
    side = SideReplay(30, [12.0, 40.0, 8.0], [0.1] * 29 + [3.0], [(2.5, 2.49), (2.5, 2.47)])
    (_, _, _, trows), = trace_table(chats, {}, {"stack": side})
    got = {r[0]: r[1] for r in trows}
    assert got["chats"].startswith("1: a turn goes out at its own time")
    assert got["turns held for the previous answer, stack"] == "3 of 30, by 12 ms at p50 and 40 ms at most"
    assert got["sent on schedule, stack"].startswith("2.480 req/s sent against 2.500 scheduled (mean of 2 windows); "
                                                     "the client late by 0.10 / ")
    assert got["sent on schedule, stack"].endswith(" / 3.00 ms (p50 / p99 / max, its scheduling delay)")
    # a replay of 150 s: each request in the minute of the trace it is in (its offset, not when it went out),
    # TTFT and E2E counted from its scheduled send
    minutes = _jsonl(tmp_path, [(i * 2500, None) for i in range(61)], "long")
    long = load_profile(str(write_profile("long", trace={"path": minutes, "format": "jsonl"})))
    run = tmp_path / "run"
    run.mkdir()
    with (run / "requests.jsonl").open("w") as f:
        for n, i in enumerate((0, 10, 20, 24, 30, 50)):  # at 0, 25, 50, 60, 75 and 125 s
            due = 1_000_000_000 + n * 1_000_000
            rec = RequestRecord(level=2.0, index=i, ok=True, t_due_ns=due, t_task_ns=due, t_start_ns=due + 1_000_000,
                                t_end_ns=due + 50_000_000, ttft_ms=9.0 + n, e2e_ms=49.0)  # type: ignore[arg-type]
            f.write(json.dumps({**rec.to_json(), "label": "stack"}) + "\n")
    (_, _, head, mrows), = minutes_table(long, run, None)
    assert head[0] == "minute" and [r[:3] for r in mrows] == [["0–1", "stack", "3"], ["1–2", "stack", "2"],
                                                              ["2–3", "stack", "1"]]
    assert mrows[0][3] == "11" and mrows[2][6] == "50"  # TTFT p50 of 10, 11, 12 ms; E2E 49 + 1 ms late
    # a replay under 2 minutes (17.8 s) by 10 s stretches
    short = tmp_path / "short"
    short.mkdir()
    with (short / "requests.jsonl").open("w") as f:
        for i in (0, 5, 100):  # at 0, 0.5 and 14 s
            rec = RequestRecord(level=2.0, index=i, ok=True, t_due_ns=1, t_task_ns=1, t_start_ns=1, t_end_ns=2,
                                ttft_ms=5.0, e2e_ms=9.0)  # type: ignore[arg-type]
            f.write(json.dumps({**rec.to_json(), "label": "baseline"}) + "\n")
    (title, _, head, srows), = minutes_table(p, short, None)
    assert title == "The replay 10 s by 10 s" and head[0] == "seconds"
    assert [r[:3] for r in srows] == [["0–10 s", "baseline", "2"], ["10–20 s", "baseline", "1"]]
