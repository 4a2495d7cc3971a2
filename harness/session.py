"""One deployment's session: place the client, deploy, wait, verify, warn about ports beyond loopback, sweep.
`run`, `compare` (both sides), `audit` and `compare --resume` all go through `deploy_and_measure`."""

from __future__ import annotations

from rich.console import Console

from harness.profile import LoadProfile
from harness.results import RunWriter
from harness.resume import ResumeRefused
from harness.sweep import RunSummary, measure
from stacks.base import Stack


def place(profile: LoadProfile) -> dict:
    """Client priority and cores before anything is deployed (deployments inherit neither); for run.json."""
    from harness.placement import apply

    p = apply(profile.client_nice, profile.client_cpus)
    return {**p.model_dump(), "sentence": p.sentence()}


def exposure(stack: Stack) -> list[str]:
    """Listening sockets of the deployment beyond 127.0.0.1 / ::1, as 'address:port (process)'."""
    from harness.audit import live_facts

    return live_facts(stack).non_loopback


def deploy_and_measure(stack: Stack, profile: LoadProfile, writer: RunWriter, label: str, console: Console,
                       repeats: int | None = None, prior: RunSummary | None = None,
                       invocation: int = 0) -> RunSummary:
    """Deploy (if needed), wait, verify, sweep. The caller owns teardown via the stack's context manager.
    prior: what an earlier invocation measured on this side; its complete levels are kept and skipped, and
    the deployment must report the same engine version and applied settings."""
    writer.write_meta(phase=f"{label}: deploying {stack.kind}")
    stack.deploy()
    waited = stack.wait_ready(stack.settings.startup_timeout_s)
    console.print(f"[green]{label}: {stack.kind} ready[/] in {waited:.1f}s at {stack.endpoint().base_url}")
    if open_ports := exposure(stack):
        console.print(f"[bold yellow]warning:[/] {label} {stack.kind} listens beyond loopback: "
                      f"{', '.join(open_ports)}" + (f". {stack.exposure_hint}" if stack.exposure_hint else ""))
    summary = RunSummary(run_id=writer.run_id, label=label, stack=stack.kind,
                         engine_version=stack.engine_version(), applied=stack.verify_config(),
                         profile=profile.name, exposed_ports=open_ports)
    skip: frozenset[tuple[int, int]] = frozenset()
    if prior is not None:
        changed = [f"{what}: was {a}, now {b}" for what, a, b in (
            ("engine version", prior.engine_version, summary.engine_version),
            ("applied settings", prior.applied.model_dump(), summary.applied.model_dump())) if a != b]
        if changed:
            raise ResumeRefused(f"cannot resume: {label} {stack.kind} differs from the first invocation: "
                                + "; ".join(changed))
        for lv in prior.levels:  # levels stopped early stay as history and are measured again
            summary.add(lv)
        summary.scrapes, summary.scrape_gaps = prior.scrapes, prior.scrape_gaps
        summary.scrape_gap_reasons = dict(prior.scrape_gap_reasons)
        skip = frozenset((lv.stats.repeat, lv.stats.concurrency) for lv in prior.levels if lv.incomplete is None)
    deployments = {**writer.meta.get("deployments", {}), label: {
        **stack.describe(), "engine_version": summary.engine_version, "applied": summary.applied.model_dump(),
        "startup_s": round(waited, 1), "pids": sorted(p.pid for ps in stack.processes().values() for p in ps),
        "logs": {k: str(v) for k, v in stack.log_locations().items()}}}
    writer.write_meta(deployments=deployments)
    return measure(stack, profile, writer, summary, console, repeats, skip=skip, invocation=invocation)
