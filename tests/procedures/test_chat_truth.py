"""Chats against the reference engine, whose answers are known: in an open loop each chat starts on its schedule
whatever the server does and each turn goes out its think time after the last answer ended; a trace's turn waits
for its chat's previous answer only where that answer ends after the turn's own time.
The segments of a replay are in test_trace_truth.py. Every assertion here is on times the client set, not on how
fast the host ran, so these run beside other tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.load.openloop import schedule
from harness.profile.loading import load_profile

pytestmark = [pytest.mark.slow, pytest.mark.cost(40)]

ENGINE = ["--opt", "ttft_ms=30", "--opt", "itl_ms=1"]


def _run(tmp_path: Path, write_profile, name: str, **fields) -> list[dict]:
    profile = write_profile(name, warmup_waves=0, warmup_sweep=False, client_procs=1, **fields)
    res = tmp_path / name
    assert main(["run", "--stack", "sim", "--profile", str(profile), "--results-dir", str(res), *ENGINE]) == 0
    run = next(res.iterdir())
    return [d for d in map(json.loads, (run / "requests.jsonl").read_text().splitlines()) if d["phase"] == "measure"]


def test_open_loop_chats_start_on_schedule_and_each_turn_follows_its_answer(tmp_path, write_profile):
    recs = _run(tmp_path, write_profile, "chats", seed=7, requests=30, input_tokens=40, output_tokens=8,
                sessions={"turns": 3, "think_time_s": 0.05, "rate": 4})
    assert len(recs) == 30 and all(d["ok"] and d["level"] == 12.0 for d in recs)  # 4 chats/s of 3 turns: 12 req/s
    chats: dict[int, list[dict]] = {}
    for d in recs:
        chats.setdefault(d["chat"], []).append(d)
    assert sorted(chats) == list(range(10))
    for turns in chats.values():
        turns.sort(key=lambda d: d["turn"])
        assert [d["turn"] for d in turns] == [0, 1, 2]
        for last, d in zip(turns, turns[1:], strict=False):
            assert d["t_due_ns"] == last["t_end_ns"] + 50_000_000  # its think time after the last answer
            assert d["t_task_ns"] >= d["t_due_ns"] and d["prompt_tokens"] > last["prompt_tokens"] + 8
    first = [chats[k][0]["t_due_ns"] for k in range(10)]
    assert [t - first[0] for t in first] == schedule(4.0, 10, "poisson", 7, 0, "measure")  # on schedule


def test_a_traces_turn_waits_for_its_chats_last_answer_only_when_it_ends_later(tmp_path, write_profile):
    # four chats whose turns follow 5 ms apart (each answer takes ~40 ms: held) and four 1.5 s apart (not held)
    rows = sorted((j * 100 + k * (5 if j % 2 == 0 else 1500), f"c{j}") for j in range(8) for k in range(3))
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps({"t_ms": t, "input_tokens": 40, "output_tokens": 8, "session": c}) + "\n"
                            for t, c in rows))
    recs = {d["index"]: d for d in _run(tmp_path, write_profile, "trace",
                                        trace={"path": str(path), "format": "jsonl", "sessions": True})}
    trace = load_profile(str(tmp_path / "trace.yaml")).replay()
    offsets = trace.offsets_ns()
    t0 = recs[0]["t_due_ns"]
    last: dict[str, dict] = {}
    held = 0
    for i, r in enumerate(trace.requests):
        d, before = recs[i], last.get(r.chat)  # type: ignore[arg-type]
        if before is not None and before["t_end_ns"] > t0 + offsets[i]:
            held += 1
            assert d["t_due_ns"] == before["t_end_ns"]
            assert d["held_ms"] == pytest.approx((before["t_end_ns"] - t0 - offsets[i]) / 1e6)
        else:
            assert d["t_due_ns"] == t0 + offsets[i] and "held_ms" not in d
        assert d["t_start_ns"] >= (before["t_end_ns"] if before else 0)  # never before the last answer ended
        last[r.chat] = d  # type: ignore[index]
    assert held == 8  # the second and third turns of the four quick chats
