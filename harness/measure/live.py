"""What a running deployment shows from outside: where its logs are and which sockets it listens on, read while
it is up (the audit judges them in harness/analysis/audit.py)."""

from __future__ import annotations

from pathlib import Path

import psutil

from harness.analysis.audit import is_loopback
from harness.host.netns import loopback_only
from harness.schemas import LiveFacts
from stacks.base import Stack


def refresh_logs(facts: LiveFacts, stack: Stack) -> None:
    """After teardown: a stack may have moved its logs next to the results (Ray's temp dir is removed)."""
    facts.logs = {k: str(v) for k, v in stack.log_locations().items()}
    facts.logs_exist = {k: Path(v).exists() for k, v in facts.logs.items()}


def live_facts(stack: Stack) -> LiveFacts:
    """Read from the running deployment: its engine log location and its listening sockets."""
    logs = {k: str(v) for k, v in stack.log_locations().items()}
    pids = {p.pid: label for label, procs in stack.processes().items() for p in procs}
    listening = []
    non_loopback = []
    private = loopback_only()  # in a namespace with only loopback, 0.0.0.0 reaches no farther than 127.0.0.1
    try:
        conns = psutil.net_connections(kind="inet")
    except psutil.AccessDenied:
        conns = []
    for c in conns:
        if c.status != psutil.CONN_LISTEN or c.pid not in pids:
            continue
        try:
            pname = psutil.Process(c.pid).name()
        except psutil.NoSuchProcess:
            pname = "?"
        desc = f"{c.laddr.ip}:{c.laddr.port} ({pids[c.pid]}/{pname})" + (
            " (private network namespace)" if private and not is_loopback(c.laddr.ip) else "")
        listening.append(desc)
        if not is_loopback(c.laddr.ip) and not private:
            non_loopback.append(desc)
    return LiveFacts(logs=logs, logs_exist={k: Path(v).exists() for k, v in logs.items()},
                     listening=sorted(set(listening)), non_loopback=sorted(set(non_loopback)))
