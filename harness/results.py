"""results/<run-id>/: run.json (status, versions, settings, host, git revision, profile), requests.jsonl,
scrapes.jsonl, summary.json. Lines are flushed as they are measured, so an interrupted or failed run keeps
what it measured, and run.json's status says it did not complete (never looks like a success)."""

from __future__ import annotations

import json
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

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
    import os

    import psutil

    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
    }


class RunWriter:
    def __init__(self, run_id: str, root: Path = RESULTS_DIR, meta: dict[str, Any] | None = None):
        self.run_id = run_id
        self.dir = root / run_id
        self.dir.mkdir(parents=True, exist_ok=False)
        self.meta: dict[str, Any] = {
            "run_id": run_id,
            "status": "running",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "git": git_revision(),
            "host": host_info(),
            **(meta or {}),
        }
        self._requests = (self.dir / "requests.jsonl").open("a")
        (self.dir / "scrapes.jsonl").touch()  # appended to by the scraper process
        self.write_meta()

    def write_meta(self, **updates: Any) -> None:
        self.meta.update(updates)
        tmp = self.dir / "run.json.tmp"
        tmp.write_text(json.dumps(self.meta, indent=2, default=str))
        tmp.replace(self.dir / "run.json")

    def request(self, record: dict) -> None:
        self._requests.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._requests.flush()

    def write_json(self, name: str, data: Any) -> Path:
        path = self.dir / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, default=str))
        tmp.replace(path)
        return path

    def finish(self, status: str, reason: str | None = None) -> None:
        """status: complete | failed | interrupted. Always called, whatever happened."""
        self.write_meta(status=status, reason=reason, finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        self._requests.close()


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
