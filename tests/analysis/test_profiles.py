"""Sampled stacks into CPU per request, and the differential between the sides (harness.analysis.profiles)."""

from __future__ import annotations

import pytest

from harness.analysis.profiles import differential, frame_name, parse_collapsed, process_profile, speedscope
from harness.schemas.profiles import ProcessProfile, ProfiledLevel

# py-spy 0.4.3's raw format, as it wrote it here for a process busy half its time in `hot`
RAW = """<module> (burn2.py:10);hot (burn2.py:5) 85
<module> (burn2.py:10);hot (burn2.py:6) 5
<module> (burn2.py:10);idle (burn2.py:8) 10
not a stack line
"""


def measured(pid: int, label: str, cpu_s: float, stacks, completed: int = 10, **more) -> ProcessProfile:
    return process_profile(ProcessProfile(pid=pid, label=label, cpu_s=cpu_s, cores=cpu_s, **more), stacks, completed)


def test_lines_of_one_function_add_up_and_junk_is_skipped():
    stacks = parse_collapsed(RAW)
    assert stacks[("<module> (burn2.py)", "hot (burn2.py)")] == 90
    assert sum(stacks.values()) == 100
    assert frame_name("process 12:\"python x\"") == "process 12:\"python x\""  # py-spy's --subprocesses root
    assert frame_name("_run_once (asyncio/base_events.py:1922)") == "_run_once (asyncio/base_events.py)"


def test_measured_cpu_is_split_by_samples_per_request():
    p = measured(7, "proxy:x", 2.0, parse_collapsed(RAW), completed=100)
    assert p.ms_per_request == pytest.approx(20.0) and p.samples == 100
    top = {f.frame: f for f in p.top}
    assert top["hot (burn2.py)"].self_ms == pytest.approx(18.0)  # 90% of 20 ms
    assert top["<module> (burn2.py)"].self_ms == 0 and top["<module> (burn2.py)"].total_ms == pytest.approx(20.0)
    assert p.top[0].frame == "hot (burn2.py)"
    none = measured(8, "x", 1.0, None, completed=0, why_not="not a Python process")
    assert none.ms_per_request == 0 and none.top == [] and none.why_not


def test_the_differential_is_what_the_stack_spends_beyond_the_baseline():
    engine = parse_collapsed("serve (engine.py:1);step (engine.py:2) 50\n")
    proxy = parse_collapsed("loop (proxy.py:1);per_chunk_work (proxy.py:9) 80\nloop (proxy.py:1) 20\n")
    stack = ProfiledLevel(level=4, window_s=1, completed=10, tok_s=100, processes=[
        measured(1, "sim:server", 0.1, engine), measured(2, "proxy:proxy", 0.5, proxy),
        measured(3, "load client", 0.9, parse_collapsed("send (client.py:3) 9\n"))])
    base = ProfiledLevel(level=4, window_s=1, completed=10, tok_s=110, processes=[
        measured(4, "sim:server", 0.1, engine),
        measured(5, "load client", 0.9, parse_collapsed("send (client.py:3) 9\n"))])
    d = differential(stack, base)
    assert [x.frame for x in d] == ["per_chunk_work (proxy.py)", "loop (proxy.py)"]  # the engine's cancels out
    assert d[0].extra_ms == pytest.approx(40.0) and d[0].baseline_ms == 0  # 80% of 50 ms per request
    assert all("client" not in x.frame for x in d)


def test_speedscope_names_each_frame_once_and_weighs_each_stack():
    doc = speedscope({"proxy (2)": parse_collapsed(RAW)}, "c4-stack")
    names = [f["name"] for f in doc["shared"]["frames"]]
    assert len(names) == len(set(names)) == 3
    [prof] = doc["profiles"]
    assert prof["type"] == "sampled" and prof["endValue"] == sum(prof["weights"]) == 100
    assert [names[i] for i in prof["samples"][0]] == ["<module> (burn2.py)", "hot (burn2.py)"]
