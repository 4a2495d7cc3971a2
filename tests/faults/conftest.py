"""The fault suite's tools: layerbench as a separate process (signals reach it as they reach a user's run),
polling of the run folder it writes, and checks that what it started is gone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from stacks.base import PROJECT_ROOT
from stacks.base.procs import holders


class Layerbench:
    """`python -m harness ...` in its own session, as a terminal would run it; output kept in files."""

    def __init__(self, args: list[str], out: Path, preexec: Callable[[], None] | None = None):
        self.out = out
        self.stdout, self.stderr = out / "stdout.txt", out / "stderr.txt"
        with self.stdout.open("w") as so, self.stderr.open("w") as se:
            self.proc = subprocess.Popen([sys.executable, "-m", "harness", *args], stdout=so, stderr=se,
                                         cwd=PROJECT_ROOT, start_new_session=True, preexec_fn=preexec,
                                         env={**os.environ, "COLUMNS": "200"})

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def signal_group(self, sig: int) -> None:
        """What Ctrl-C in a terminal or `timeout` does: the signal goes to the whole foreground group."""
        os.killpg(self.proc.pid, sig)

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"layerbench did not exit within {timeout:.0f} s:\n{self.output()}")

    def kill(self) -> None:
        for p in [psutil.Process(self.proc.pid), *self.descendants()]:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass

    def output(self) -> str:
        return self.stdout.read_text(errors="replace")[-3000:] + "\n--- stderr ---\n" + \
            self.stderr.read_text(errors="replace")[-3000:]


def wait_for(what: str, check: Callable[[], object], lb: Layerbench | None = None, timeout: float = 120):
    """Poll `check` until it returns something true; fail with layerbench's output if it exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := check():
            return got
        if lb is not None and lb.proc.poll() is not None:
            pytest.fail(f"layerbench exited ({lb.proc.returncode}) before {what}:\n{lb.output()}")
        time.sleep(0.1)  # polling interval; the condition is the readiness check
    pytest.fail(f"timed out waiting for {what}" + (f":\n{lb.output()}" if lb else ""))


def run_dir(results: Path) -> Path | None:
    dirs = [d for d in results.glob("*") if (d / "run.json").exists()] if results.exists() else []
    return dirs[0] if len(dirs) == 1 else None


def meta(run: Path) -> dict:
    try:
        return json.loads((run / "run.json").read_text())
    except (OSError, ValueError):
        return {}


def phase_is(results: Path, prefix: str) -> Callable[[], Path | None]:
    def check() -> Path | None:
        run = run_dir(results)
        return run if run is not None and str(meta(run).get("phase", "")).startswith(prefix) else None
    return check


def lines(path: Path) -> list[dict]:
    """Every line of a JSONL file, parsed: a line that is not whole JSON fails the test."""
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def gone_within(procs: list[psutil.Process], seconds: float) -> list[str]:
    """Processes still running after `seconds` (zombies count as gone)."""
    _, alive = psutil.wait_procs(procs, timeout=seconds)
    return [f"{p.pid} {p.name()}" for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def shm_and_tmp() -> set[str]:
    return {str(p) for pat in ("/dev/shm/*", "/tmp/vllm_dist_*", "/tmp/lb-ray-*") for p in
            Path("/").glob(pat.lstrip("/"))}


def left_behind(before: set[str]) -> set[str]:
    """What appeared in /dev/shm and /tmp since `before` and no running process holds (mapped, open, bound or as
    its working directory): a dead run's leftovers. Another test's vLLM starting meanwhile (make test runs slow
    tests side by side) holds its own files, so they are not counted against this run."""
    appeared = shm_and_tmp() - before  # listed before the processes are read, as stacks.base.procs.Leftovers does
    held = holders()
    return {p for p in appeared if not held.hold(Path(p))}


@pytest.fixture
def quick_profile(write_profile) -> Callable[..., Path]:
    def make(**fields) -> Path:
        base = dict(concurrency=[1, 4], requests=20, requests_per_concurrency=0, output_tokens=8, input_tokens=32,
                    warmup_sweep=False)
        return write_profile(**{**base, **fields})
    return make


SIGNALS = [signal.SIGINT, signal.SIGTERM]
