"""`layerbench serve` as a user runs it: a process of its own (and its own process group), the URL lines read from
its stdout, a real OpenAI request to what it printed, then a signal. Exit code 0 is the one expected: a signal is
how a serve ends once everything is up (130 is only for a signal before every side was ready). Afterwards no
process it started remains (its process group, and every process that was its child while it served) and every
printed port is closed. The reference engine (`sim`) starts in under a second, so these take seconds."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psutil
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
READY = "serving until Ctrl-C or SIGTERM"
UP_S = 60.0  # the sim is up in about a second; this bounds a test that would otherwise hang


class Serving:
    """`layerbench serve ARGS` in its own session (so its process group is its own), its output read line by
    line on a thread so that a wait for a line has a deadline."""

    def __init__(self, tmp_path: Path, *args: str):
        self.results = tmp_path / "results"
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.cli.main", "serve", *args, "--results-dir",
                                      str(self.results)], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._q.put(line.rstrip("\n"))
        self._q.put(None)

    def until(self, text: str, timeout: float = UP_S) -> list[str]:
        """Every line up to the first that contains `text` (fails with the output so far if it never comes)."""
        while True:
            try:
                line = self._q.get(timeout=timeout)
            except queue.Empty:
                pytest.fail(f"no {text!r} within {timeout} s:\n" + "\n".join(self.lines))
            if line is None:
                pytest.fail(f"serve exited ({self.proc.wait()}) before {text!r}:\n" + "\n".join(self.lines))
            self.lines.append(line)
            if text in line:
                return self.lines

    def printed(self, side: str, key: str) -> list[str]:
        """The values printed as '<side> <kind> <key>: value'."""
        return [m.group(1) for line in self.lines if (m := re.match(rf"\s*{side} \S+ {key}: (\S+)$", line))]

    def stop(self, signum: int) -> int:
        self.proc.send_signal(signum)
        try:
            rc = self.proc.wait(timeout=UP_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            pytest.fail("serve did not exit after the signal:\n" + "\n".join(self.lines))
        while (line := self._q.get(timeout=10)) is not None:  # the rest of its output, up to its end
            self.lines.append(line)
        return rc

    def processes(self) -> list[psutil.Process]:
        """What it runs now: itself, its process group and every descendant (servers run in sessions of their own,
        so the group alone would miss them)."""
        me = psutil.Process(self.proc.pid)
        return [me, *me.children(recursive=True), *in_group(self.proc.pid)]


def in_group(pgid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def alive(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
        except psutil.NoSuchProcess:
            continue
    return out


def port_open(url: str) -> bool:
    parts = urlsplit(url)
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((parts.hostname, parts.port)) == 0


def complete(base_url: str, model: str) -> str:
    """A streamed OpenAI completion through the printed URL and model: the text the server sent."""
    text = []
    with httpx.stream("POST", f"{base_url}/completions", timeout=30, json={
            "model": model, "prompt": "Hello", "max_tokens": 8, "stream": True}) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                text += [c["text"] for c in json.loads(line[6:])["choices"]]
    return "".join(text)


def check_stopped(serving: Serving, before: list[psutil.Process], urls: list[str]) -> dict:
    """No process left, every printed port closed, run.json marked complete; returns run.json."""
    assert not alive(before) and not alive(in_group(serving.proc.pid)), alive(before)
    assert not [u for u in urls if port_open(u)]
    meta = json.loads(next(serving.results.glob("*/run.json")).read_text())
    assert meta["command"] == "serve" and meta["status"] == "complete", meta.get("reason")
    return meta


def test_serve_sim_answers_at_the_printed_url_and_stops_cleanly_on_sigint(tmp_path):
    serving = Serving(tmp_path, "--stack", "sim")
    serving.until(READY)
    [base], [model], [server] = (serving.printed("stack", k) for k in ("OpenAI base URL", "model", "server"))
    metrics = serving.printed("stack", r"metrics \(\w+\)")
    assert base == f"{server}/v1" and model == "tiny" and metrics == [f"{server}/metrics"]
    assert complete(base, model)
    assert "vllm:" in httpx.get(metrics[0], timeout=10).text  # the engine's /metrics, as the scraper reads it
    before = serving.processes()
    assert len(alive(before)) >= 2  # layerbench and the engine it started
    assert serving.stop(signal.SIGINT) == 0, "\n".join(serving.lines)
    assert "torn down" in serving.lines[-1], serving.lines[-3:]
    meta = check_stopped(serving, before, [server])
    assert meta["serving"]["stack"]["url"] == server and meta["deployments"]["stack"]["engine_version"]


def test_serve_both_sides_on_their_own_ports_stops_on_sigterm(tmp_path):
    serving = Serving(tmp_path, "--stack", "sim", "--both")
    serving.until(READY)
    servers = {side: serving.printed(side, "server") for side in ("baseline", "stack")}
    assert all(len(s) == 1 for s in servers.values()) and servers["baseline"] != servers["stack"], servers
    for side in servers:
        [base], [model] = serving.printed(side, "OpenAI base URL"), serving.printed(side, "model")
        assert complete(base, model), side
    before = serving.processes()
    assert serving.stop(signal.SIGTERM) == 0, "\n".join(serving.lines)
    meta = check_stopped(serving, before, [s[0] for s in servers.values()])
    assert set(meta["deployments"]) == {"baseline", "stack"} and meta["settings_mismatches"] == []
