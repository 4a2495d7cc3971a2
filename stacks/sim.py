"""The reference engine as stacks: `sim` (the engine of known timing) and `sim-proxy` (the known-overhead
proxy in front of it, whose baseline is `sim` with the same settings). Both start in seconds, so the whole
deploy -> measure -> compare path runs without vLLM; they calibrate the harness, never replace vLLM.

Options (`--opt key=value`): any SimConfig field (ttft_ms, itl_ms, tokens_per_chunk, jitter_ms, max_num_seqs,
fail_500, fail_429, cut_stream, metrics_delay_ms, ...) goes to the engine; any ProxyConfig field
(request_delay_ms, chunk_delay_ms, rechunk, metrics) to the proxy."""

from __future__ import annotations

import copy
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from pydantic import BaseModel, create_model
from rich.console import Console

from harness.schemas import AppliedConfig
from stacks.base import PROJECT_ROOT, DeploySettings, Endpoint, Stack, StackOptions, register
from stacks.base.fronted import FrontedEngineStack
from stacks.base.procs import ManagedProcess, ensure_port_free, free_port, stop_and_verify, wait_http_ready
from stacks.refengine.proxy import ProxyConfig
from stacks.refengine.server import SimConfig

SIM_KEYS = set(SimConfig.model_fields) - {"model", "max_model_len"}
PROXY_KEYS = set(ProxyConfig.model_fields) - {"upstream_host", "upstream_port", "upstream_ports"}


def _fields(model: type[BaseModel], keys: set[str]) -> dict[str, Any]:
    """The servers' own field definitions (type, bounds, default), so an option is checked exactly as the
    server will check it, and a field added there becomes an option here."""
    return {k: (f.annotation, copy.copy(f)) for k, f in model.model_fields.items() if k in keys}


SimOptions = create_model("SimOptions", __base__=StackOptions, **_fields(SimConfig, SIM_KEYS))
SimProxyOptions = create_model("SimProxyOptions", __base__=SimOptions, **_fields(ProxyConfig, PROXY_KEYS))


def _flags(options: dict, keys: set[str]) -> list[str]:
    return [a for k, v in options.items() if k in keys for a in (f"--{k.replace('_', '-')}", str(v))]


class _LocalServer:
    """One refengine process on a free port of 127.0.0.1."""

    def __init__(self, name: str, module: str, log_dir: Path, flags: list[str], port: int | None = None):
        self.name, self.port = name, port or free_port()
        self.log_path = log_dir / f"{name}-{self.port}.log"
        cmd = [sys.executable, "-m", module, "--port", str(self.port), *flags]
        self.proc = ManagedProcess(name, cmd, self.log_path, env={"PYTHONPATH": str(PROJECT_ROOT)})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        ensure_port_free(self.port)
        self.proc.start()

    def wait(self, timeout: float, console: Console | None) -> float:
        return wait_http_ready(f"{self.url}/v1/models", timeout, self.name, self.proc, console)

    def stop(self) -> None:
        stop_and_verify(self.proc, [self.port], self.name)


@register
class SimStack(Stack):
    kind = "sim"
    replicas_by = "client"
    loads_model = False
    in_request_path = False
    description = "reference engine of known timing (calibration, fast tests)"
    Options = SimOptions

    def __init__(self, settings: DeploySettings):
        super().__init__(settings)
        e = settings.engine
        flags = ["--model", settings.served_model_name, "--max-model-len", str(e.max_model_len),
                 "--max-num-seqs", str(e.max_num_seqs), *_flags(settings.options, SIM_KEYS)]
        self.engine = _LocalServer("sim", "stacks.refengine.server", settings.log_dir, flags, self.options.port)
        self._up = False

    def deploy(self) -> None:
        self._up = True
        self.engine.start()

    def wait_ready(self, timeout: float, console: Console | None = None) -> float:
        return self.engine.wait(timeout, console)

    def teardown(self) -> None:
        if self._up:
            self._up = False
            self.engine.stop()

    def endpoint(self) -> Endpoint:
        return Endpoint(base_url=self.engine.url, model=self.settings.served_model_name)

    def engine_version(self) -> str:
        try:
            return httpx.get(f"{self.engine.url}/version", timeout=5).json()["version"]
        except (httpx.HTTPError, ValueError, KeyError):
            return SimConfig.model_fields["version"].default

    def baseline(self) -> Stack:
        return self

    def verify_config(self) -> AppliedConfig:
        cfg = super().verify_config()
        cfg.kv_cache_tokens = SimConfig.model_fields["kv_capacity_tokens"].default
        cfg.max_concurrency = cfg.kv_cache_tokens / self.settings.engine.max_model_len
        cfg.max_concurrency_at_tokens = self.settings.engine.max_model_len
        return cfg

    def crash_and_restart(self, timeout: float = 60.0) -> float:
        """SIGKILL the engine's process group (a crash: nothing is flushed, nothing said goodbye) and start it
        again on the same port; returns seconds until it serves again (`make soak`'s engine restart)."""
        t0 = time.monotonic()
        proc = self.engine.proc
        if proc.pid is not None and proc.alive():
            os.killpg(proc.pid, signal.SIGKILL)
            proc.proc.wait()  # type: ignore[union-attr]
        self.engine.start()
        self.engine.wait(timeout, Console(quiet=True))
        return time.monotonic() - t0

    def dead(self) -> str | None:
        return self.engine.proc.exit_reason() if self._up else None

    def processes(self) -> dict[str, list[psutil.Process]]:
        return {"sim": self.engine.proc.tree()}

    def log_locations(self) -> dict[str, Path]:
        return {"engine": self.engine.log_path}


@register
class SimProxyStack(FrontedEngineStack):
    kind = "sim-proxy"
    replicas_by = "layer"  # --upstream-ports: the proxy routes over every engine (`route`)
    in_request_path = True
    loads_model = False
    description = "known-overhead proxy in front of the reference engine"
    server_name = "sim-proxy"
    front_role = "proxy"
    Options = SimProxyOptions

    def engine_behind(self, settings: DeploySettings | None = None) -> Stack:
        """The reference engine with this stack's engine options (the proxy's own go to the front)."""
        settings = settings or self.settings
        opts = {k: v for k, v in settings.options.items() if k in SIM_KEYS}
        return SimStack(settings.model_copy(update={"options": opts}))

    def front_command(self, upstream: str) -> tuple[list[str], dict[str, str]]:
        return self.front_commands([upstream])

    def front_commands(self, upstreams: list[str]) -> tuple[list[str], dict[str, str]]:
        ports = ",".join(u.rsplit(":", 1)[1] for u in upstreams)
        return ([sys.executable, "-m", "stacks.refengine.proxy", "--port", str(self.port), "--upstream-port",
                 ports.split(",")[0], *(["--upstream-ports", ports] if len(upstreams) > 1 else []),
                 *_flags(self.settings.options, PROXY_KEYS)], {"PYTHONPATH": str(PROJECT_ROOT)})

    def tuning(self) -> dict[str, str]:
        return {"batched streaming": "batch_interval_ms=0,50", "holds requests back": "max_ongoing=0,2",
                "saturated process": "chunk_cpu_us=0,500"}

    def metric_aliases(self) -> tuple[str, ...]:
        opts = self.settings.options
        return (str(opts.get("rename_prefix", ProxyConfig.model_fields["rename_prefix"].default)),) \
            if opts.get("metrics") == "rename" else ()
