"""How layerbench reacts to Ctrl-C, SIGTERM and SIGHUP: all mean "stop measuring, keep what was measured, tear
down". SIGTERM and SIGHUP take exactly Ctrl-C's path, so inside a level asyncio cancels the requests in flight and
they are recorded as `interrupted`. Teardown itself is shielded: a second signal during it is reported, not
obeyed, because an interrupted teardown is what leaves servers running (teardown has bounded timeouts)."""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _term_as_int(signum: int, frame: FrameType | None) -> None:
    handler = signal.getsignal(signal.SIGINT)  # asyncio's own while a level runs: it cancels the requests
    if not callable(handler):
        raise KeyboardInterrupt
    handler(signal.SIGINT, frame)  # raises, cancels the running level, or notes it during teardown


def install() -> None:
    """Once, at start-up, in the main thread. SIGHUP (a closed terminal or ssh session) tears down too,
    unless it was ignored on purpose (`nohup`): the servers run in sessions of their own and would outlive us."""
    signal.signal(signal.SIGTERM, _term_as_int)
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        signal.signal(signal.SIGHUP, _term_as_int)
    # A shell starts background jobs with SIGINT ignored and children inherit that; Ctrl-C must still
    # tear the deployment down, so restore Python's handler (asyncio.run only hooks it when it is default).
    signal.signal(signal.SIGINT, signal.default_int_handler)


class shielded:  # noqa: N801  (used as a `with` statement)
    """Runs a cleanup to its end. A signal received meanwhile is printed and, when the cleanup ran without
    an exception of its own, raised as KeyboardInterrupt afterwards."""

    def __init__(self, what: str):
        self.what = what
        self.pending: list[int] = []
        self._old: dict[int, object] = {}

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.pending.append(signum)
        try:  # after SIGHUP the terminal may be gone: saying so must not break the teardown
            print(f"layerbench: {self.what} in progress; finishing it first so that nothing is left running",
                  file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass

    def __enter__(self) -> shielded:
        if threading.current_thread() is threading.main_thread():
            self._old = {s: signal.signal(s, self._note) for s in _SIGNALS
                         if signal.getsignal(s) != signal.SIG_IGN}
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)  # type: ignore[arg-type]
        if self.pending and exc_type is None:
            raise KeyboardInterrupt
