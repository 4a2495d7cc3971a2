"""Reading results/ folders robustly, for `make report`: one damaged, partial or foreign folder never hides
the others, and nothing wrong is passed off as a success.

Each folder with a readable run.json becomes a RunEntry (a row of the report), whatever its status; anything
wrong with a folder becomes one problem line naming it: folders without a readable run.json are skipped, runs
whose other files are damaged are listed without those figures and flagged. Only reads, never repairs."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from harness.reporting.rebuild import fill_from_stored
from harness.results import held_by_another
from harness.schemas import AuditResult, CompareSummary

M = TypeVar("M", bound=BaseModel)

# What each command writes when it completes; a complete run without it is flagged.
EXPECTED = {"run": "summary.json", "compare": "compare.json", "audit": "audit.json"}


class RunMeta(BaseModel):
    """The parts of run.json the catalog reads (results.RunWriter); other fields are ignored."""

    status: str = "?"
    reason: str | None = None
    command: str | None = None
    # run.json of earlier layerbench versions held the stack side's description here (a dict)
    stack: str | dict[str, Any] | None = None


class LastLevelStats(BaseModel):
    goodput: float
    ttft_p95_ms: float | None = None


class SingleSummary(BaseModel):
    """What the report shows of a single run's summary.json (sweep.RunSummary). Only these fields are checked,
    so a summary written by an older or newer layerbench still shows as long as they mean the same."""

    stack: str
    engine_version: str | None = None
    status: str | None = None
    last: LastLevelStats | None = None  # the highest level measured

    @classmethod
    def from_summary(cls, d: dict[str, Any]) -> SingleSummary:
        levels = d.get("levels") or []
        if not isinstance(levels, list):
            raise ValueError("levels is not a list")
        stats = levels[-1].get("stats") if levels and isinstance(levels[-1], dict) else None
        last = None
        if stats is not None:
            if not isinstance(stats, dict) or not isinstance(stats.get("ttft_ms", {}), dict):
                raise ValueError("levels[-1].stats has the wrong shape")
            last = LastLevelStats(goodput=stats.get("goodput"), ttft_p95_ms=stats.get("ttft_ms", {}).get("p95"))
        return cls(stack=d.get("stack"), engine_version=d.get("engine_version"), status=d.get("status"), last=last)


class RunEntry(BaseModel):
    run_id: str  # the folder's name
    command: str | None = None  # run | compare | audit (None: an older run.json)
    stack: str
    status: str  # run.json's status, then (read_results) with the flags appended: "complete (... truncated)"
    reason: str | None = None  # run.json's reason (why it failed or was interrupted)
    problems: list[str] = []  # sentences for the report's problem list
    flags: list[str] = []  # the same, short, for the status column
    compare: CompareSummary | None = None
    summary: SingleSummary | None = None
    audit: AuditResult | None = None


_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def _load(path: Path, model: type[M], convert: Callable[[dict], M] | None = None) -> tuple[M | None, str | None]:
    """(the file as `model`, None) or (None, why it cannot be used)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        return None, f"{path.name} cannot be read ({getattr(e, 'strerror', None) or e})"
    if not text.strip():
        return None, f"{path.name} is empty"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"{path.name} is not valid JSON (line {e.lineno} column {e.colno}: {e.msg})"
    if not isinstance(data, dict):
        return None, f"{path.name} holds a JSON {_JSON_TYPES.get(type(data), 'null')}, not an object"
    try:
        return (convert(data) if convert else model.model_validate(data)), None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "top level"
        return None, (f"{path.name} does not match this version of layerbench ({e.error_count()} error(s); "
                      f"first: {where}: {first['msg']})")
    except (ValueError, TypeError, AttributeError, IndexError) as e:
        return None, f"{path.name} has the wrong shape ({e})"


def requests_problem(path: Path, live: bool = False) -> str | None:
    """Why requests.jsonl cannot be trusted (a line cut mid-write, a line that is not a JSON object), or None.
    A live run may be mid-write, so its unterminated last line is not held against it."""
    try:
        lines = path.read_bytes().split(b"\n")
    except FileNotFoundError:
        return "requests.jsonl is missing"
    except OSError as e:
        return f"requests.jsonl cannot be read ({e.strerror})"
    bad: list[str] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            ok = isinstance(json.loads(line), dict)
        except ValueError:  # JSONDecodeError and UnicodeDecodeError
            ok = False
        if not ok:
            unterminated = n == len(lines)  # every record RunWriter writes ends with a newline
            if unterminated and live:
                continue
            bad.append(f"line {n} truncated" if unterminated else f"line {n} is not a JSON record")
    if not bad:
        return None
    return "requests.jsonl: " + bad[0] + (f" (and {len(bad) - 1} more bad lines)" if len(bad) > 1 else "")


def open_by_some_process(paths: list[Path]) -> set[str] | None:
    """Real paths among `paths` that some process holds open; None when no process could be inspected.
    Older layerbench versions kept requests.jsonl open from start to finish, so a run.json that says running while
    nobody holds that file was killed without finishing (SIGKILL, OOM, power loss). Processes of other users
    cannot be inspected; their runs would show as running (no process)."""
    import psutil

    want = {os.path.realpath(p) for p in paths}
    found: set[str] = set()
    inspected = False
    for proc in psutil.process_iter():
        try:
            files = proc.open_files()
        except psutil.Error:  # gone, a zombie, or another user's
            continue
        inspected = True
        found |= {f.path for f in files if f.path in want}
    return found if inspected else None


def _stack_name(meta: RunMeta) -> str:
    if isinstance(meta.stack, dict):
        return str(meta.stack.get("stack", "?"))
    return meta.stack or "?"


def read_run(run_dir: Path) -> tuple[RunEntry | None, list[str]]:
    """(the run, what is wrong with it), or (None, [why it is skipped]) when there is no run to list.
    Each problem is a sentence for the report's problem list; the status gets a short flag for the table."""
    if not any(run_dir.iterdir()):
        return None, ["empty folder; skipped"]
    if not (run_dir / "run.json").exists():
        return None, ["no run.json (not a layerbench run, or one that never started); skipped"]
    meta, why = _load(run_dir / "run.json", RunMeta)
    if meta is None:
        return None, [f"{why}; skipped"]
    entry = RunEntry(run_id=run_dir.name, command=meta.command, stack=_stack_name(meta), status=meta.status,
                     reason=meta.reason)
    command = meta.command if meta.command in EXPECTED else next(
        (c for c, f in EXPECTED.items() if (run_dir / f).exists()), None)
    name = EXPECTED.get(command or "")
    if name and (run_dir / name).exists():
        if command == "compare":
            entry.compare, why = _load(run_dir / name, CompareSummary)
            if entry.compare is not None:
                fill_from_stored(entry.compare, run_dir)
        elif command == "run":
            entry.summary, why = _load(run_dir / name, SingleSummary, SingleSummary.from_summary)
        else:
            entry.audit, why = _load(run_dir / name, AuditResult)
        if why:
            entry.problems.append(f"{why}; listed without its figures")
            entry.flags.append(f"{name} unreadable")
    elif name and meta.status == "complete":
        entry.problems.append(f"run.json says complete but {name} is missing; listed without figures")
        entry.flags.append(f"{name} missing")
    if entry.compare:  # the summaries name the stack that actually ran
        entry.stack = entry.compare.stack
    elif entry.summary:
        entry.stack = entry.summary.stack
    # a running run's last line may be mid-write: checked once we know whether it is still live
    if meta.status != "running" and (trouble := requests_problem(run_dir / "requests.jsonl")):
        entry.problems.append(trouble)
        entry.flags.append(trouble)
    return entry, list(entry.problems)


def read_results(results: Path) -> tuple[list[RunEntry], list[str]]:
    """Every run under results/ (sorted by folder name, i.e. by start time), and one line per folder that was
    skipped or flagged, naming it: "results/x: compare.json is not valid JSON (...); listed without its
    figures"."""
    entries: list[RunEntry] = []
    problems: dict[Path, list[str]] = {}
    try:
        dirs = sorted(p for p in results.iterdir() if p.is_dir())
    except FileNotFoundError:
        return [], [f"{results}: no such folder"]
    except OSError as e:
        return [], [f"{results}: cannot be listed ({e.strerror})"]
    for run_dir in dirs:
        try:
            entry, found = read_run(run_dir)
        except OSError as e:  # an unreadable folder, or one removed while we read it
            entry, found = None, [f"cannot be read ({e.strerror}); skipped"]
        if entry is not None:
            entries.append(entry)
        if found:
            problems[run_dir] = found
    _check_running(results, entries, problems)
    for e in entries:
        if "?" in e.flags:  # processes could not be inspected: cannot tell whether it still runs
            e.status += "?"
        if flags := [f for f in e.flags if f != "?"]:
            e.status += f" ({'; '.join(flags)})"
    return entries, [f"{d}: {'; '.join(p)}" for d, p in sorted(problems.items())]


def _check_running(results: Path, entries: list[RunEntry], problems: dict[Path, list[str]]) -> None:
    """A run.json that says running: still running if a layerbench holds the folder's lock (results.RunWriter;
    the OS releases it when the process dies), or, for folders written before the lock existed, if some
    process holds its requests.jsonl open. Otherwise the harness died without marking it, which is flagged."""
    running = [e for e in entries if e.status == "running"]
    if not running:
        return
    paths = [results / e.run_id / "requests.jsonl" for e in running]
    lockless = [p for p in paths if not (p.parent / "run.lock").exists()]
    held = open_by_some_process(lockless) if lockless else set()
    for e, path in zip(running, paths, strict=True):
        if path not in lockless:
            live = held_by_another(path.parent)
        else:
            live = held is None or os.path.realpath(path) in held
        if held is None and path in lockless:
            e.flags.append("?")
        elif not live:
            e.problems.append("run.json says running but no process is writing it (killed?); listed")
            e.flags.append("no process")
        if trouble := requests_problem(path, live=live):
            e.problems.append(trouble)
            e.flags.append(trouble)
        if e.problems:
            problems[results / e.run_id] = list(e.problems)
