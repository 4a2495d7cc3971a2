"""`compare --resume <run-id>`: continue an interrupted or failed compare after its last complete level and
repeat, on the same engine version, profile, stack options, repeats and host; refused with the reason when
any of them changed. What each side measured so far is read back from its summary; levels an invocation left
incomplete are measured again, and every level records which invocation measured it."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from pydantic import BaseModel, ValidationError

from harness.errors import LayerbenchError
from harness.measure.sweep import summary_file
from harness.profile.schema import LoadProfile
from harness.results import git_revision, held_by_another
from harness.schemas import SIDES, RunSummary


class ResumeRefused(LayerbenchError):
    """A resumed side no longer matches what the first invocation measured: the whole resume stops."""


class ResumePlan(BaseModel):
    run_id: str
    stack: str
    profile: LoadProfile
    options: dict
    repeats: int
    invocation: int  # 1 for the first resume
    prior: dict[str, RunSummary]  # side -> what earlier invocations measured
    history: list[dict]  # run.json's `invocations`, this one included (when, layerbench's git revision, why)
    allow_version_mismatch: bool = False  # as the first invocation was told

    def deployment_done(self, label: str, pair: int, repeats: int) -> bool:
        """Every level of this side's deployment in `pair` was measured completely (its windows are numbered
        pair * repeats onwards)."""
        run = self.prior.get(label)
        want = {(r, x) for r in range(pair * repeats, (pair + 1) * repeats) for x in self.levels(label)}
        return run is not None and want <= {(lv.stats.repeat, lv.stats.level) for lv in run.levels
                                            if lv.incomplete is None}

    def levels(self, label: str) -> list:
        """The levels a side measures: the profile's, or those the first deployment's calibration kept."""
        cal = self.prior["baseline"].calibration if "baseline" in self.prior else None
        return list(cal.kept) if cal is not None else self.profile.levels()

    def side_done(self, label: str) -> bool:
        run = self.prior.get(label)
        want = {(r, x) for r in range(self.repeats) for x in self.profile.levels()}
        return run is not None and want <= {(lv.stats.repeat, lv.stats.level) for lv in run.levels
                                            if lv.incomplete is None}


def _read(path: Path) -> dict:
    try:
        d = json.loads(path.read_text())
    except OSError as e:
        raise LayerbenchError(f"cannot resume: cannot read {path}: {e.strerror or e}") from None
    except ValueError:
        raise LayerbenchError(f"cannot resume: {path} is not valid JSON") from None
    if not isinstance(d, dict):
        raise LayerbenchError(f"cannot resume: {path} is not a JSON object")
    return d


def plan_resume(results: Path, run_id: str, stack: str | None, profile: LoadProfile | None,
                options: dict, repeats: int | None) -> ResumePlan:
    """Everything given on the command line must match the run being resumed (or be left out)."""
    run_dir = results / run_id
    if not run_dir.is_dir():
        raise LayerbenchError(f"cannot resume: no run {run_id!r} under {results}")
    meta = _read(run_dir / "run.json")
    if meta.get("command") != "compare":
        raise LayerbenchError(f"cannot resume {run_id}: only compares can be resumed (it is a "
                              f"{meta.get('command')!r} run)")
    status = meta.get("status")
    if status == "complete":
        raise LayerbenchError(f"cannot resume {run_id}: it is already complete")
    if held_by_another(run_dir):
        raise LayerbenchError(f"cannot resume {run_id}: another layerbench is still writing it (pid "
                              f"{meta.get('pid')})")
    missing = [k for k in ("stack", "profile", "options", "repeats") if k not in meta]
    if missing:
        raise LayerbenchError(f"cannot resume {run_id}: its run.json does not record {', '.join(missing)} "
                              "(written by a layerbench without resume support)")
    try:
        recorded = LoadProfile.model_validate(meta["profile"])
        n_repeats = int(meta["repeats"])
    except (ValidationError, TypeError, ValueError) as e:
        raise LayerbenchError(f"cannot resume {run_id}: its recorded profile cannot be read ({e})") from None
    changed = []
    if stack is not None and stack != meta.get("stack"):
        changed.append(f"stack: was {meta.get('stack')}, now {stack}")
    if profile is not None and profile.model_dump() != recorded.model_dump():
        changed.append(f"profile: was {recorded.name!r} with other settings, now {profile.name!r}")
    if options and options != meta["options"]:
        changed.append(f"stack options: were {meta['options']}, now {options}")
    if repeats is not None and repeats != n_repeats:
        changed.append(f"repeats: were {n_repeats}, now {repeats}")
    host = meta.get("host", {})
    if (host.get("hostname"), host.get("cpus")) != (platform.node(), os.cpu_count()):
        changed.append(f"host: was {host.get('hostname')} with {host.get('cpus')} CPUs, now {platform.node()} "
                       f"with {os.cpu_count()}")
    if changed:
        raise LayerbenchError(f"cannot resume {run_id}: " + "; ".join(changed) + " (leave them out to reuse "
                              "the recorded ones)")
    prior = {}
    for label in SIDES:
        path = run_dir / summary_file(label, str(meta["stack"]))
        if path.exists():
            try:
                prior[label] = RunSummary.model_validate(_read(path))
            except ValidationError:
                raise LayerbenchError(f"cannot resume {run_id}: {path} was written by another version of "
                                      "layerbench") from None
    history = [*meta.get("invocations", []), {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                             "git": git_revision(), "previous_status": status,
                                             "previous_reason": meta.get("reason")}]
    return ResumePlan(run_id=run_id, stack=str(meta["stack"]), profile=recorded, options=meta["options"],
                      repeats=n_repeats, invocation=len(history), prior=prior, history=history,
                      allow_version_mismatch=bool(meta.get("allow_version_mismatch")))
