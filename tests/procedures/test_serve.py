"""`layerbench serve` without an engine: bad input is one clear message before anything starts; the wait ends at
once on a signal and with its reason when a side stops serving; the live checks refuse what a compare refuses."""

from __future__ import annotations

import os
import signal
import threading
import time
from types import SimpleNamespace

import psutil
import pytest

from harness import signals
from harness.cli.main import main
from harness.errors import LayerbenchError
from harness.procedures import serve
from harness.schemas import AppliedConfig


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_unknown_stack_is_one_message_and_starts_nothing(tmp_path, capsys):
    before = children()
    assert main(["serve", "--stack", "nope", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "unknown stack 'nope'" in err and "sim" in err
    assert not any(tmp_path.iterdir()) and children() == before


def test_unknown_option_is_refused_before_anything_starts(tmp_path, capsys):
    before = children()
    assert main(["serve", "--stack", "sim", "--opt", "nope=1", "--results-dir", str(tmp_path)]) == 2
    assert "unknown option(s) for stack sim: nope" in capsys.readouterr().err
    assert not any(tmp_path.iterdir()) and children() == before


class Side:
    kind = "fake"

    def __init__(self, dies_after: float | None = None):
        self.t0, self.dies_after = time.monotonic(), dies_after

    def dead(self) -> str | None:
        if self.dies_after is not None and time.monotonic() - self.t0 > self.dies_after:
            return "exited with code 1"
        return None


class Writer:
    def __init__(self) -> None:
        self.meta: dict = {}

    def write_meta(self, **updates) -> None:
        self.meta.update(updates)


def test_a_side_that_stops_serving_ends_the_wait_with_its_reason(monkeypatch):
    monkeypatch.setattr(serve, "WATCH_S", 0.01)
    with pytest.raises(LayerbenchError, match="stack fake stopped serving: exited with code 1"):
        serve.hold([("baseline", Side()), ("stack", Side(dies_after=0.05))], Writer())


def test_sigterm_ends_the_wait_at_once_not_at_the_next_check(monkeypatch):
    """SIGTERM takes Ctrl-C's path (harness.signals) and interrupts the wait itself: with a check every 10
    minutes the wait still ends within seconds of the signal."""
    monkeypatch.setattr(serve, "WATCH_S", 600.0)
    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signals.install()
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM))
    writer = Writer()
    try:
        t0 = time.monotonic()
        timer.start()
        serve.hold([("stack", Side())], writer)
        waited = time.monotonic() - t0
    finally:
        timer.cancel()
        for s, h in old.items():
            signal.signal(s, h)
    assert 0.25 < waited < 5 and "signal" in writer.meta["phase"]


def ready(version: str, **applied) -> SimpleNamespace:
    return SimpleNamespace(summary=SimpleNamespace(engine_version=version, applied=AppliedConfig(**applied)))


def test_live_checks_refuse_two_versions_and_name_settings_that_differ():
    stack = SimpleNamespace(settings=SimpleNamespace(model=None))
    both = {"baseline": ready("0.32.0", max_model_len=1024), "stack": ready("0.31.0", max_model_len=1024)}
    with pytest.raises(LayerbenchError, match="live versions differ"):
        serve.verify_sides(both, stack, allow_mismatch=False)
    assert serve.verify_sides(both, stack, allow_mismatch=True) == [
        "kv_cache_tokens: not found (baseline)", "max_concurrency: not found (baseline)"]
    differ = {"baseline": ready("0.32.0", max_model_len=1024, kv_cache_tokens=10, max_concurrency=1.0),
              "stack": ready("0.32.0", max_model_len=2048, kv_cache_tokens=10, max_concurrency=1.0)}
    assert serve.verify_sides(differ, stack, allow_mismatch=False) == ["max_model_len: baseline 1024 vs stack 2048"]
    assert serve.verify_sides({"stack": ready("0.32.0")}, stack, allow_mismatch=False) == []
