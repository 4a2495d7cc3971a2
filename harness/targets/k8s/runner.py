"""Runs a K8sPlan on a cluster, one side after the other: preflight, then per side apply, wait until ready,
record the engine's version (both sides must run the same vLLM), run the side's load Job, unpack its results,
keep the pods' logs, delete everything and wait until it is gone, so the GPU is free before the next side.
Cleanup runs after every failure and after Ctrl-C; a failure to clean up is reported with what is left."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException
from rich.console import Console

from harness.errors import LayerbenchError
from harness.targets.k8s import dcgm, jobresults
from harness.targets.k8s.cluster import Cluster
from harness.targets.k8s.images import release
from harness.targets.k8s.kubeapi import RUN_LABEL, JobFailed
from harness.targets.k8s.plan import ClusterSettings, K8sPlan, Side
from harness.targets.k8s.preflight import preflight, uses_cache
from harness.targets.k8s.probes import probes, run_probes, version_problem
from harness.targets.k8s.render_load import fit_to_cache
from harness.targets.k8s.status import EngineVersion

DEFAULT_JOB_TIMEOUT_S = 6 * 3600.0  # a Job without activeDeadlineSeconds; one with it gets that plus a margin


def kubeapi_context(kubeconfig: str | Path | None) -> str | None:
    """The kubeconfig's current context's name, for the report's first lines; None where it cannot be read."""
    from harness.targets.k8s.kubeapi import current_context

    return current_context(kubeconfig)


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


def unpack_pods(logs: dict[str, str], side_dir: Path) -> list[Path]:
    """Each load pod's results: into the side's folder, or pod-<i>/ each when the load ran as several pods."""
    if len(logs) == 1:
        return jobresults.unpack(next(iter(logs.values())), side_dir)
    return [f for i, log in enumerate(logs.values()) for f in jobresults.unpack(log, side_dir / f"pod-{i}")]


def cache_modes(cluster: Cluster, claim: str) -> list[str]:
    """The HF cache PVC's access modes, as bound (status) or asked (spec); [] when it cannot be read."""
    try:
        resp = cluster.core.read_namespaced_persistent_volume_claim(claim, cluster.namespace, _preload_content=False,
                                                                    _request_timeout=cluster.timeout)
        pvc = json.loads(resp.data)
    except (ApiException, urllib3.exceptions.HTTPError, OSError, ValueError):  # preflight named a missing PVC
        return []
    return list((pvc.get("status") or {}).get("accessModes") or (pvc.get("spec") or {}).get("accessModes") or [])


@dataclass(frozen=True)
class _PlanRun:
    """What every side of a running plan shares: the cluster and its settings, the run's folder and console, the
    wait for a load Job (None: job_timeout's), the GPU exporter found, the HF cache PVC's access modes, and the
    engine version of each side run so far (filled in as the sides run)."""

    cluster: Cluster
    settings: ClusterSettings
    out_dir: Path
    console: Console
    job_timeout_s: float | None
    exporter: tuple[dcgm.Exporter | None, str]
    modes: list[str]
    versions: dict[str, EngineVersion]


def _run_side(run: _PlanRun, side: Side) -> dict[str, Any]:
    cluster, settings, console, versions = run.cluster, run.settings, run.console, run.versions
    side_dir = run.out_dir / side.label
    record: dict[str, Any] = {"stack": side.stack, "url": side.url, "images": side.engine_images}
    job_name = (side.load_job.get("metadata") or {}).get("name")
    failure: BaseException | None = None
    try:
        cluster.apply(side.objects)
        record["ready_s"] = round(cluster.wait_ready(side, settings.ready_timeout_s, console), 1)
        version = cluster.engine_version(side)
        record["engine_version"], record["engine_version_source"] = version.version, version.source
        record["nodes"] = sorted({str((p.get("spec") or {}).get("nodeName") or "?")
                                  for p in cluster.pods(side.engine_selector)})
        for label, other in versions.items():
            if release(other.version) != release(version.version):
                raise LayerbenchError(f"engine versions differ: {label} runs vLLM {other.version} ({other.source}), "
                                      f"{side.label} runs {version.version} ({version.source}); a compare needs "
                                      f"the same engine version on both sides")
        versions[side.label] = version
        console.print(f"{side.label}: {side.stack} ready in {record['ready_s']} s, vLLM {version.version}")
        gpus, record["gpu_telemetry"] = dcgm.on_nodes(cluster.core, *run.exporter, record["nodes"], cluster.timeout)
        dcgm.scrape_also(side.load_job, gpus)  # the exporter on the engine's node, beside the engine's metrics
        if placed := fit_to_cache(side.load_job, run.modes, record["nodes"]):
            record["load_placement"] = placed
            console.print(f"{side.label}: {placed}")
        try:
            job = cluster.run_job(side.load_job, run.job_timeout_s or job_timeout(side.load_job), console)
        except JobFailed as e:  # the Job packs its results also when the run failed: keep what it measured
            for text in e.logs.values():
                with contextlib.suppress(LayerbenchError):
                    files = jobresults.unpack(text, side_dir)
                    record["partial_results"] = [str(p.relative_to(side_dir)) for p in files]
            raise
        record["load_s"], record["job_pod"] = round(job.seconds, 1), job.pod
        record["results"] = [str(p.relative_to(side_dir)) for p in unpack_pods(job.logs, side_dir)]
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


def settle_versions(cluster: Cluster, plan: K8sPlan, settings: ClusterSettings, console: Console,
                    allow_mismatch: bool, rerender: Rerender | None) -> tuple[K8sPlan, dict[str, str]]:
    """Preflight's probes, before any engine is started: every engine image's vLLM. A baseline whose version was
    provisional (the stack's image was not known to bundle one) is rendered again for the measured version and
    its image probed in turn; a plan whose engines still differ is refused with the table, unless allowed."""
    objects = [o for s in plan.sides for o in [*s.objects, s.load_job]]
    versions = run_probes(cluster, probes(plan, settings, uses_cache(objects, settings)), settings, console)
    cluster.delete(settings.delete_timeout_s, console)  # the probes' Jobs: gone before anything is deployed
    stack_image = plan.engine.get("stack_image")
    if plan.engine.get("provisional") and rerender and stack_image in versions and \
            release(versions[stack_image]) != plan.engine.get("version"):
        measured = release(versions[stack_image])
        console.print(f"{stack_image} bundles vLLM {measured}: the baseline runs bare vLLM {measured}")
        plan = rerender(measured)
        extra = [p for p in probes(plan, settings, False) if p.what == "version" and p.image not in versions]
        versions.update(run_probes(cluster, extra, settings, console))
        cluster.delete(settings.delete_timeout_s, console)
    problem = version_problem(plan, versions)
    if problem and not allow_mismatch:
        raise LayerbenchError(f"{problem}\nleave vllm_version unset in the cluster config (bare vLLM then runs the "
                              "stack image's), or choose images of one vLLM; --allow-version-mismatch compares anyway")
    return plan, versions


Rerender = Callable[[str], K8sPlan]  # the plan again, for a measured engine version


@dataclass(frozen=True)
class RunOptions:
    """How run_plan reaches the cluster and what it allows: a cluster the caller already holds (tests), else the
    kubeconfig it connects with (None: the default one); a fixed wait for each load Job (None: its own deadline and
    a margin, job_timeout); engines of different vLLM versions compared anyway; and how to render the plan again
    for the engine version the probes measured."""

    cluster: Cluster | None = None
    kubeconfig: str | Path | None = None
    job_timeout_s: float | None = None
    allow_version_mismatch: bool = False
    rerender: Rerender | None = None


def run_plan(plan: K8sPlan, settings: ClusterSettings, out_dir: Path, console: Console | None = None,
             options: RunOptions | None = None) -> int:
    """Runs every side of `plan` in order, after preflight and its probes; 0 when all completed. Failures raise
    LayerbenchError (exit 2) after cleanup."""
    console = console or Console(stderr=True)
    options = options or RunOptions()
    kubeconfig = options.kubeconfig
    settings = plan.settings or settings
    own = options.cluster is None
    cluster = options.cluster or Cluster.connect(plan.namespace, plan.run_id, kubeconfig)
    out_dir.mkdir(parents=True, exist_ok=True)
    versions: dict[str, EngineVersion] = {}
    summary: dict[str, Any] = {"run_id": plan.run_id, "namespace": plan.namespace, "server": cluster.host,
                               "context": kubeapi_context(kubeconfig), "sides": {}}
    try:
        objects = [o for s in plan.sides for o in [*s.objects, s.load_job]]
        for warning in preflight(cluster, settings, {s.stack for s in plan.sides}, objects,
                                 max((s.gpus for s in plan.sides), default=0),
                                 [i for s in plan.sides for i in s.engine_images]):
            console.print(f"[yellow]warning:[/] {warning}")
        plan, images = settle_versions(cluster, plan, settings, console, options.allow_version_mismatch,
                                       options.rerender)
        summary["images"] = images
        exporter = dcgm.find(cluster.core, cluster.timeout)
        console.print(f"GPU telemetry: dcgm-exporter {exporter[0]}" if exporter[0] else exporter[1])
        run = _PlanRun(cluster, settings, out_dir, console, options.job_timeout_s, exporter,
                       cache_modes(cluster, settings.hf_cache_pvc), versions)
        for side in plan.sides:
            try:
                summary["sides"][side.label] = _run_side(run, side)
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
