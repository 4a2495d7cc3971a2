"""Runs a K8sPlan on a cluster, one side after the other: preflight, then per side apply, wait until ready,
record the engine's version (both sides must run the same vLLM), run the side's load Job, unpack its results,
keep the pods' logs, delete everything and wait until it is gone, so the GPU is free before the next side.
Cleanup runs after every failure and after Ctrl-C; a failure to clean up is reported with what is left."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from harness.errors import LayerbenchError
from stacks.k8s import jobresults
from stacks.k8s.cluster import Cluster, EngineVersion
from stacks.k8s.kubeapi import RUN_LABEL, JobFailed
from stacks.k8s.plan import ClusterSettings, K8sPlan, Side
from stacks.k8s.preflight import preflight

DEFAULT_JOB_TIMEOUT_S = 6 * 3600.0  # a Job without activeDeadlineSeconds; one with it gets that plus a margin


def job_timeout(job: dict[str, Any]) -> float:
    deadline = ((job.get("spec") or {}).get("activeDeadlineSeconds"))
    return float(deadline) + 120.0 if deadline else DEFAULT_JOB_TIMEOUT_S


def _save_logs(cluster: Cluster, side: Side, job_name: str | None, dest: Path, console: Console) -> None:
    """Every log of the side's pods (engine, layer, load Job) into dest; best effort: a run that failed
    still gets whatever logs there are, and a log that cannot be read does not hide the failure."""
    selectors = [side.engine_selector, f"{RUN_LABEL}={cluster.run_label}"]
    if job_name:
        selectors.append(f"job-name={job_name}")
    logs: dict[str, str] = {}
    for selector in selectors:
        try:
            logs.update(cluster.pod_logs(selector))
        except LayerbenchError as e:
            console.print(f"[yellow]warning:[/] {side.label}: pod logs ({selector}) not saved: {e}")
    dest.mkdir(parents=True, exist_ok=True)
    for key, text in logs.items():
        (dest / (key.replace("/", ".") + ".log")).write_text(text)


def _run_side(cluster: Cluster, side: Side, settings: ClusterSettings, out_dir: Path, console: Console,
              versions: dict[str, EngineVersion], job_timeout_s: float | None) -> dict[str, Any]:
    side_dir = out_dir / side.label
    record: dict[str, Any] = {"stack": side.stack, "url": side.url}
    job_name = (side.load_job.get("metadata") or {}).get("name")
    failure: BaseException | None = None
    try:
        cluster.apply(side.objects)
        record["ready_s"] = round(cluster.wait_ready(side, settings.ready_timeout_s, console), 1)
        version = cluster.engine_version(side)
        record["engine_version"], record["engine_version_source"] = version.version, version.source
        for label, other in versions.items():
            if other.version != version.version:
                raise LayerbenchError(f"engine versions differ: {label} runs vLLM {other.version} ({other.source}), "
                                      f"{side.label} runs {version.version} ({version.source}); a compare needs "
                                      f"the same engine version on both sides")
        versions[side.label] = version
        console.print(f"{side.label}: {side.stack} ready in {record['ready_s']} s, vLLM {version.version}")
        try:
            job = cluster.run_job(side.load_job, job_timeout_s or job_timeout(side.load_job), console)
        except JobFailed as e:  # the Job packs its results also when the run failed: keep what it measured
            for text in e.logs.values():
                with contextlib.suppress(LayerbenchError):
                    files = jobresults.unpack(text, side_dir)
                    record["partial_results"] = [str(p.relative_to(side_dir)) for p in files]
            raise
        record["load_s"], record["job_pod"] = round(job.seconds, 1), job.pod
        record["results"] = [str(p.relative_to(side_dir)) for p in jobresults.unpack(job.log, side_dir)]
        return record
    except BaseException as e:
        failure = e
        raise
    finally:
        _save_logs(cluster, side, job_name, side_dir / "logs", console)
        t0 = time.monotonic()
        try:
            cluster.delete(settings.delete_timeout_s, console)
            record["deleted_s"] = round(time.monotonic() - t0, 1)
        except LayerbenchError as cleanup:
            record["cleanup_error"] = str(cleanup)
            if failure is None:
                raise
            if isinstance(failure, LayerbenchError):  # both, the first failure first
                raise LayerbenchError(f"{failure}\nand then {cleanup}") from None
            console.print(f"[red]{cleanup}[/]")  # an interrupt goes on; what is left has been named
        finally:
            (side_dir / "k8s-side.json").write_text(json.dumps(record, indent=2) + "\n")


def run_plan(plan: K8sPlan, settings: ClusterSettings, out_dir: Path, console: Console | None = None, *,
             cluster: Cluster | None = None, kubeconfig: str | Path | None = None,
             job_timeout_s: float | None = None) -> int:
    """Runs every side of `plan` in order; 0 when all completed. Failures raise LayerbenchError (exit 2) after
    cleanup; `cluster` is for callers that already hold one (tests, a CLI that ran preflight itself)."""
    console = console or Console(stderr=True)
    own = cluster is None
    cluster = cluster or Cluster.connect(plan.namespace, plan.run_id, kubeconfig)
    out_dir.mkdir(parents=True, exist_ok=True)
    versions: dict[str, EngineVersion] = {}
    summary: dict[str, Any] = {"run_id": plan.run_id, "namespace": plan.namespace, "server": cluster.host,
                               "sides": {}}
    try:
        objects = [o for s in plan.sides for o in [*s.objects, s.load_job]]
        for warning in preflight(cluster, settings, {s.stack for s in plan.sides}, objects):
            console.print(f"[yellow]warning:[/] {warning}")
        for side in plan.sides:
            try:
                summary["sides"][side.label] = _run_side(cluster, side, settings, out_dir, console, versions,
                                                         job_timeout_s)
            except LayerbenchError as e:
                raise LayerbenchError(f"{side.label} ({side.stack}): {e}") from None
        summary["status"] = "complete"
        return 0
    except BaseException as e:
        summary["status"], summary["error"] = "failed", str(e) or type(e).__name__
        raise
    finally:
        (out_dir / "k8s-run.json").write_text(json.dumps(summary, indent=2) + "\n")
        if own:
            cluster.close()
