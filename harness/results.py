"""results/<run-id>/: run.json (status, versions, settings, host, git revision, profile), requests.jsonl,
scrapes.jsonl, summary.json. Lines are flushed as they are measured, so an interrupted or failed run keeps
what it measured, and run.json's status says it did not complete (never looks like a success).

A write that fails (disk full, file size limit) becomes one LayerbenchError naming the file; a request line
cut short by it is removed again, so every line already in requests.jsonl stays whole. At the end of every
run, whatever happened, summaries still marked `running` take the run's status and secrets found in the
environment are scrubbed from every file of the folder."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import platform
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.errors import LayerbenchError


def new_run_id(label: str = "run") -> str:
    """Time-ordered and random: two runs started in the same second still get different prefixes."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{label}-{secrets.token_hex(3)}"

RESULTS_DIR = Path("results")


def git_revision() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    dirty = subprocess.run(["git", "status", "--porcelain", "-uno"], capture_output=True, text=True, timeout=5)
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def host_info() -> dict[str, Any]:
    """The host a run measured on; `gpu` names its GPUs (model, count, driver, CUDA) and CUDA_VISIBLE_DEVICES."""
    import psutil

    from harness.host.gpus import host_gpus, no_gpu_reason

    gpus = host_gpus()
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpu": gpus.to_json() if gpus else {"count": 0, "why": no_gpu_reason(),
                                            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")},
    }


def failure_reason(failures: dict[str, str]) -> str:
    """Each failed side and its reason's first line: a run's one-line reason in run.json."""
    return "; ".join(f"{k}: {v.splitlines()[0]}" for k, v in failures.items())


def _cannot_write(path: Path, e: OSError) -> LayerbenchError:
    return LayerbenchError(f"cannot write {path}: {e.strerror or e} (is the disk full?); what was written "
                           "before is intact")


class RunWriter:
    def __init__(self, run_id: str, root: Path = RESULTS_DIR, meta: dict[str, Any] | None = None,
                 resume: bool = False):
        """resume: append to an existing run folder (`compare --resume`), keeping its run.json fields."""
        self.run_id = run_id
        self.dir = root / run_id
        try:
            self.dir.mkdir(parents=True, exist_ok=resume)
        except FileExistsError:
            raise LayerbenchError(f"results folder {self.dir} already exists") from None
        except OSError as e:
            raise LayerbenchError(f"cannot create the results folder {self.dir}: {e.strerror or e}") from None
        self._lock = _lock(self.dir)
        old = json.loads((self.dir / "run.json").read_text()) if resume else {}
        for stale in ("reason", "finished", "phase", "lost_request_lines"):  # the previous invocation's
            old.pop(stale, None)
        if resume:  # a line cut by a killed invocation would glue itself to the next one
            for name in ("requests.jsonl", "scrapes.jsonl"):
                _cut_partial_line(self.dir / name)
        self.meta: dict[str, Any] = {
            "run_id": run_id,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "git": git_revision(),
            "host": host_info(),
            **old,
            **(meta or {}),
            "status": "running",
        }
        try:
            # unbuffered: one write per record, so a failed one can be cut back to the last whole line
            self._requests = (self.dir / "requests.jsonl").open("ab", buffering=0)
            (self.dir / "scrapes.jsonl").touch()  # appended to by the scraper process
        except OSError as e:
            raise _cannot_write(self.dir, e) from None
        self.lost = 0  # request lines that could not be written
        self.write_meta()

    def write_meta(self, **updates: Any) -> None:
        self.meta.update(updates)
        self.write_json("run.json", self.meta)

    def request(self, record: dict) -> None:
        if self._requests.closed:
            self.lost += 1
            return
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        fd = self._requests.fileno()
        pos = os.fstat(fd).st_size
        try:
            if self._requests.write(line) != len(line):  # unbuffered: a short write is a full disk too
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as e:
            self.lost += 1
            try:  # drop the part of the line that did get out, then stop writing
                os.ftruncate(fd, pos)
            except OSError:
                pass
            self._requests.close()
            raise _cannot_write(self.dir / "requests.jsonl", e) from None

    def write_json(self, name: str, data: Any) -> Path:
        path = self.dir / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        try:
            tmp.write_text(json.dumps(data, indent=2, default=str))
            tmp.replace(path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise _cannot_write(path, e) from None
        return path

    def finish(self, status: str, reason: str | None = None) -> None:
        """status: complete | failed | interrupted. Always called, whatever happened; never raises."""
        try:
            self._requests.close()
        except OSError:
            pass
        self._lock.close()  # releases the flock: the folder may be resumed now
        try:
            for path in self.dir.glob("summary*.json"):  # a summary left `running` by a failed level
                d = json.loads(path.read_text())
                if isinstance(d, dict) and d.get("status") == "running":
                    self.write_json(path.name, {**d, "status": status})
            self.write_meta(status=status, reason=reason, finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                            **({"lost_request_lines": self.lost} if self.lost else {}))
        except (OSError, ValueError, LayerbenchError) as e:
            print(f"layerbench: could not mark {self.dir} {status}: {e}", file=sys.stderr)
        self.scrub()

    def scrub(self, *more: Path) -> None:
        """Remove secrets found in the environment from every file of the run folder (and `more` folders):
        servers' logs and anything written after `finish` included."""
        from harness.redact import redact_tree, secret_values

        secrets = secret_values(os.environ)
        for root in (self.dir, *more):
            try:
                redact_tree(root, secrets)
            except OSError as e:
                print(f"layerbench: could not scrub secrets from {root}: {e}", file=sys.stderr)


def read_jsonl(path: Path) -> list[dict]:
    """Every whole JSON line; a line cut short (a killed writer) is skipped."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _lock(run_dir: Path):
    """Held while a layerbench writes the folder (released by the OS if it is killed)."""
    f = (run_dir / "run.lock").open("w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        raise LayerbenchError(f"{run_dir} is being written by another layerbench") from None
    return f


def held_by_another(run_dir: Path) -> bool:
    try:
        with (run_dir / "run.lock").open("r") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return False


def _cut_partial_line(path: Path) -> None:
    if not path.exists():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        os.truncate(path, data.rfind(b"\n") + 1)
