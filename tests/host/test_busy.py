"""The busy-host probe a local compare runs before deploying: a real busy loop beside it is measured and named,
and a busy host is refused with the probe's figures before anything is written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from harness.errors import LayerbenchError
from harness.host import busy
from harness.host.busy import Busy, HostLoad, check_host, probe


def test_a_busy_loop_beside_the_probe_is_measured_and_named():
    # started by a shell that exits, so the loop is no child of this process (the probe leaves its own children out)
    pid = int(subprocess.run(["sh", "-c", f"{sys.executable} -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True).stdout)
    try:
        load = probe(0.5)
    finally:
        os.kill(pid, signal.SIGKILL)
    assert load.other_cores >= 0.6  # one core spun; the loop may start a little into the window
    assert pid in [b.pid for b in load.busy]
    assert load.verdict() is not None and "cores" in load.verdict()


def test_the_probes_own_process_and_children_are_not_other_load():
    load = probe(0.3)
    assert all(b.pid != os.getpid() for b in load.busy)
    assert load.wake_p99_ms >= 0.0 and load.cores >= 1


def _load(other: float, wake: float = 0.1) -> HostLoad:
    return HostLoad(cores=2, other_cores=other, wake_p99_ms=wake, seconds=1.0,
                    busy=[Busy(4242, "spin", other)] if other >= busy.BUSY_WARN else [])


def test_a_busy_host_is_refused_with_the_figures_and_warned_when_asked():
    said: list[str] = []
    with pytest.raises(LayerbenchError, match=r"1.00 cores.*spin \(pid 4242\) 1.00.*--busy-host go"):
        check_host("refuse", said.append, _load(1.0))
    assert not said
    assert check_host("warn", said.append, _load(1.0)).other_cores == 1.0
    assert len(said) == 1 and "spin (pid 4242)" in said[0] and "going on" in said[0]


def test_a_late_wake_is_refused_and_light_load_is_named_without_refusing():
    with pytest.raises(LayerbenchError, match="ms late at p99"):
        check_host("refuse", print, _load(0.0, wake=busy.WAKE_REFUSE_MS + 1))
    said: list[str] = []
    check_host("refuse", said.append, _load(0.2))
    assert len(said) == 1 and "spin" in said[0] and "going on" not in said[0]
    quiet: list[str] = []
    check_host("refuse", quiet.append, _load(0.0))
    assert not quiet
    assert check_host("go", quiet.append) is None and not quiet
