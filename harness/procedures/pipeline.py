"""Every deploying command is one pipeline: prepare (the CLI: profile, stack, run id, settings) -> `open_run` (the
run folder and its run.json, the client placed, one `Run` handed down) -> the procedure (measure) -> conclude
(harness.analysis) -> outputs (reports) -> `Outcome.exit_code`. The steps every command repeated live here once:
the run folder's first record, the outcome that always marks it, and the one-line reason a run failed."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import LayerbenchError
from harness.measure.resume import ResumePlan
from harness.measure.run import Output, Run
from harness.measure.session import place
from harness.profile.schema import LoadProfile
from harness.results import RunWriter, failure_reason

__all__ = ["Outcome", "Prepared", "failure_reason", "open_run", "recorded"]
from stacks.base import Stack


@dataclass
class Prepared:
    """What a deploying command has settled before anything is deployed or written."""

    profile: LoadProfile
    stack: Stack
    run_id: str
    results: Path
    cost: Any  # harness.analysis.cost.Price | None
    name: str  # the stack as the command named it (--stack)


def open_run(p: Prepared, command: str, out: Output, meta: dict[str, Any] | None = None,
             plan: ResumePlan | None = None) -> Run:
    """The run folder with its first run.json (the command, the stack, the client's placement, this process and
    the command's own `meta`), the client placed on its cores, and the Run every step is handed. plan: a resumed
    compare's; its folder is reopened."""
    placement = place(p.profile)
    writer = RunWriter(p.run_id, p.results, meta={"command": command, "stack": p.name, **(meta or {}),
                                                  "placement": placement, "pid": os.getpid()},
                       resume=plan is not None)
    return Run(profile=p.profile, writer=writer, out=out, plan=plan, placement=placement,
               target=p.stack.settings.target)


class Outcome:
    """How a command's deployments ended; `recorded` fills it and always marks the run folder."""

    def __init__(self) -> None:
        self.status, self.reason = "failed", None

    def exit_code(self, writer: RunWriter, warn: Callable[[str], None]) -> int:
        """130 after Ctrl-C (`warn` says what was kept); LayerbenchError (exit 2) when failed; 0 when complete."""
        if self.status == "interrupted":
            warn(f"{self.reason}; measured so far is kept in {writer.dir}")
            return 130
        if self.status != "complete":
            raise LayerbenchError(f"{self.reason}\n(run marked {self.status}: {writer.dir}/run.json)")
        return 0


@contextmanager
def recorded(writer: RunWriter) -> Iterator[Outcome]:
    """Runs the body; Ctrl-C/SIGTERM and LayerbenchError become the outcome (teardown has already run in the
    body's `with stack`); run.json is marked complete / failed / interrupted whatever happened."""
    out = Outcome()
    try:
        yield out
        if out.status == "failed" and out.reason is None:
            out.status = "complete"
    except KeyboardInterrupt:
        out.status, out.reason = "interrupted", "interrupted by the user (Ctrl-C / SIGTERM); deployments torn down"
    except LayerbenchError as e:
        out.status, out.reason = "failed", str(e)
    finally:
        writer.finish(out.status, out.reason)
