"""Helper processes of the load client (the metric scraper, the core sampler): how they are told to stop and
how they react to signals.

A multiprocessing Event is a lock shared with the child: a child killed while holding it (SIGTERM to the
whole process group, `timeout 60 make run`) left the parent blocked in Event.set() for minutes. The stop
flag here is a lock-free shared byte. A child ignores Ctrl-C (the terminal sends it to the whole group; the
parent decides when its helpers stop), ends its loop on SIGTERM, and ends by itself if its parent is gone."""

from __future__ import annotations

import os
import signal
import threading
import time
from multiprocessing.context import SpawnContext

_SLICE_S = 0.05  # how often a waiting child looks at the flag and its parent


class StopFlag:
    """Set by the parent, polled by the child; never blocks either side."""

    def __init__(self, ctx: SpawnContext):
        self._v = ctx.RawValue("b", 0)
        self._parent = os.getpid()

    def set(self) -> None:
        self._v.value = 1

    def is_set(self) -> bool:
        if not self._v.value and os.getppid() != self._parent and os.getpid() != self._parent:
            self._v.value = 1  # orphaned (the parent was SIGKILLed): nobody will read what we write
        return bool(self._v.value)

    def wait(self, timeout: float) -> bool:
        """Sleep up to `timeout` s, returning early (True) once the flag is set."""
        end = time.monotonic() + timeout
        while not self.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(_SLICE_S, left))
        return True


def child_signals(flag: StopFlag) -> None:
    """Call first thing in a helper process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: flag.set())


def start_child(proc) -> None:
    """Start with Ctrl-C ignored from the first instruction: the terminal sends it to the whole group, and a
    child still importing would die with a KeyboardInterrupt traceback (Python keeps an inherited SIG_IGN)."""
    main = threading.current_thread() is threading.main_thread()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        proc.start()
    finally:
        if main:
            signal.signal(signal.SIGINT, old)


def stop_child(proc, flag: StopFlag, timeout: float) -> None:
    """Ask, wait, then kill: a helper never outlives the command that started it."""
    flag.set()
    if proc.pid is None:
        return
    proc.join(timeout=timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
