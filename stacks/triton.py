"""Triton Inference Server, local target: the real `tritonserver` 2.51 (from the nvidia-pytriton wheel, see
scripts/setup_triton.sh) with layerbench's Python-backend model modelled on NVIDIA's vLLM backend
(scripts/triton_vllm_model.py), or a user's copy of NVIDIA's backend (`TRITON_VLLM_MODEL=path/to/model.py`, see
stacks/base/triton_repo.py), running vLLM's async engine inside Triton's stub process, decoupled, streaming through
`generate_stream`. The model repository is generated per deployment with exactly the baseline's engine settings.
HTTP, gRPC and metrics ports bind to 127.0.0.1. Baseline: bare vLLM from the Triton environment (the engine
environment's vLLM, same files). The report names the model that served; the study of Triton's vLLM backend is
set beside a run only when NVIDIA's backend served it.

Options (`--opt`, typed in TritonOptions): report_engine_metrics (publish the engine's `vllm:*` families on
Triton's metrics port; off by default, like NVIDIA's vLLM backend), port (HTTP)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil
from pydantic import Field
from rich.console import Console

from harness.errors import LayerbenchError
from harness.schemas import AppliedConfig, LayerMetric
from stacks.base import PROJECT_ROOT, DeploySettings, Endpoint, Stack, StackOptions, register
from stacks.base.engine_env import (
    check_model_files,
    engine_env,
    engine_kwargs,
    installed_vllm_version,
    model_kwargs,
    settings_from_kwargs,
)
from stacks.base.local import LocalServerStack
from stacks.base.procs import free_port, log_tail, running
from stacks.base.triton_repo import CONFIG_PBTXT, MODEL_PY, TritonModel, choose_model, config_text, write_repository

__all__ = ["CONFIG_PBTXT", "MODEL_PY", "TritonStack", "triton_paths"]  # the docker and k8s forms render from these

TRITON_VENV = PROJECT_ROOT / ".venv-triton"
SETUP_HINT = "run `make setup-triton`"
MIN_GLIBC = (2, 35)  # nvidia-pytriton 0.7.0 is a manylinux_2_35 wheel


class TritonOptions(StackOptions):
    report_engine_metrics: bool = Field(False, description="publish the engine's vllm:* counters, gauges and "
                                        "histograms on Triton's metrics port (NVIDIA's backend: off by default)")


def triton_paths(venv: Path | None = None) -> tuple[Path, Path, Path]:
    """(tritonserver binary, its bundled libraries, the backend directory); LayerbenchError when not set up."""
    venv = venv or TRITON_VENV
    glibc = os.confstr("CS_GNU_LIBC_VERSION") or "glibc 0.0"
    have = tuple(int(x) for x in glibc.split()[-1].split(".")[:2])
    if have < MIN_GLIBC:
        raise LayerbenchError(f"Triton needs glibc >= {'.'.join(map(str, MIN_GLIBC))} (nvidia-pytriton's "
                              f"tritonserver); this host has {glibc}")
    sites = sorted(venv.glob("lib/python3*/site-packages"))
    server = sites[0] / "pytriton" / "tritonserver" if sites else venv / "missing"
    paths = (server / "bin" / "tritonserver", sites[0] / "nvidia_pytriton.libs" if sites else venv,
             venv / "backends")
    if not all(p.exists() for p in paths):
        raise LayerbenchError(f"Triton is not installed ({paths[0]} not found): {SETUP_HINT} (installs "
                              "nvidia-pytriton, whose wheel ships tritonserver 2.51, beside vLLM)")
    return paths


@register
class TritonStack(LocalServerStack):
    kind = "triton"
    docker_form = "harness.targets.k8s.docker_forms:triton"
    k8s_form = "harness.targets.k8s.render_triton:render_triton"
    in_request_path = True
    description = ("Triton Inference Server 2.51, Python backend running vLLM's async engine (decoupled): "
                   "layerbench's model modelled on NVIDIA's vLLM backend, or a copy of NVIDIA's (TRITON_VLLM_MODEL)")
    server_name = "Triton"
    replaces_frontend = ("vLLM's OpenAI API server: requests enter through Triton's HTTP server (generate_stream) "
                         "and its Python backend, which runs vLLM's engine in the backend's stub process")
    stop_timeout_s = 20.0  # Triton unloads the model (engine shutdown) before it exits
    engine_venv = TRITON_VENV  # the engine environment's vLLM with numpy<2, as the stub needs; the baseline's too
    Options = TritonOptions
    options: TritonOptions

    def __init__(self, settings: DeploySettings):
        super().__init__(settings)
        self.model: TritonModel = choose_model(settings.target)  # a TRITON_VLLM_MODEL that cannot serve: refused
        self.grpc_port = free_port(self.port)
        self.metrics_port = free_port(self.port, self.grpc_port)
        self.repo = settings.log_dir / f"triton-repo-{self.port}"
        self.metadata: dict = {}
        self.model_procs: list[tuple[psutil.Process, str]] = []  # the Python stub and the engine's, once ready

    @property
    def model_dir(self) -> Path:
        return self.repo / self.settings.served_model_name

    def ports(self) -> list[int]:
        return [self.port, self.grpc_port, self.metrics_port]

    def engine_spec(self) -> dict:
        """The model's AsyncEngineArgs: the flags stacks.vllm.engine_args gives the baseline, as keywords."""
        s = self.settings
        return {**model_kwargs(s), "served_model_name": s.served_model_name,
                **engine_kwargs(s, "the Triton model's engine arguments"),
                "report_engine_metrics": self.options.report_engine_metrics}

    def engine_plan(self) -> dict:
        return {**settings_from_kwargs(self.engine_spec()), "devices": list(self.settings.devices)}

    def instance_kind(self) -> str:
        """KIND_MODEL on a GPU host: the model places itself (vLLM opens the devices in CUDA_VISIBLE_DEVICES, one
        per tensor-parallel rank), as NVIDIA's vLLM backend does; tritonserver 2.51 from nvidia-pytriton is a GPU
        build (it links libcudart 12.6 and DCGM). KIND_CPU where there is no GPU."""
        return "KIND_MODEL" if self.settings.devices else "KIND_CPU"

    def config_pbtxt(self) -> str:
        return config_text(self.model, self.settings.served_model_name, self.instance_kind(),
                           self.options.report_engine_metrics)

    def write_repository(self) -> None:
        write_repository(self.model, self.model_dir, self.instance_kind(), self.engine_spec())

    def deploy(self) -> None:
        self.check_ports()  # a port held by another process is refused first, and never taken over
        binary, libs, backends = triton_paths()
        check_model_files(self.settings)
        self.write_repository()
        venv = backends.parent
        env = {**engine_env(self.settings, self.engine_cache), "PATH": f"{venv / 'bin'}:{os.environ.get('PATH', '')}",
               # the stub's libpython must be this venv's Python, not whatever the loader finds first
               "LD_LIBRARY_PATH": ":".join(x for x in (str(libs), str(_python_libdir(venv)),
                                                       os.environ.get("LD_LIBRARY_PATH")) if x),
               "LC_ALL": "C.UTF-8"}
        cmd = [str(binary), f"--model-repository={self.repo}", f"--backend-directory={backends}",
               "--http-address=127.0.0.1", f"--http-port={self.port}", "--grpc-address=127.0.0.1",
               f"--grpc-port={self.grpc_port}", "--metrics-address=127.0.0.1", f"--metrics-port={self.metrics_port}",
               f"--allow-gpu-metrics={'true' if self.settings.devices else 'false'}", "--exit-on-error=false",
               "--exit-timeout-secs=15",
               "--backend-config=python,stub-timeout-seconds=600", "--log-verbose=0"]
        self.start(cmd, env)

    def wait_ready(self, timeout: float, console: Console | None = None) -> float:
        """Server ready, then the model READY (its engine started) through tritonclient; a model that fails to
        load is reported with Triton's model status and the last 40 lines of its log."""
        assert self.proc is not None, "deploy() first"
        client = _client(self.port)
        try:
            return self._wait_ready(client, timeout, console or Console(stderr=True))
        finally:
            client.close()

    def _wait_ready(self, client, timeout: float, console: Console) -> float:
        assert self.proc is not None
        t0 = time.monotonic()
        name = self.settings.served_model_name
        with console.status(f"waiting for Triton and its vLLM model (127.0.0.1:{self.port})"):
            while True:
                if not self.proc.alive():
                    raise LayerbenchError(f"Triton exited during startup. Last 40 lines of {self.log_path}:\n"
                                          f"{log_tail(self.log_path)}")
                state = _model_state(client, name)
                if state and state.get("state") == "READY" and _ready(client, name):
                    break
                if state and state.get("state") == "UNAVAILABLE":
                    raise LayerbenchError(f"Triton could not load model {name!r}: {state.get('reason') or 'no reason'}"
                                          f". Last 40 lines of {self.log_path}:\n{log_tail(self.log_path)}")
                if time.monotonic() - t0 > timeout:
                    raise LayerbenchError(f"Triton's model {name!r} not ready after {timeout:.0f}s (state "
                                          f"{state}). Last 40 lines of {self.log_path}:\n{log_tail(self.log_path)}")
                time.sleep(0.5)  # poll interval; readiness is the model state above
        self.metadata = {"server": client.get_server_metadata(), "model": client.get_model_metadata(name)}
        # remember the server, the stub and the engine's processes for teardown's check, and watch the model's
        self.model_procs = [(p, role) for p in self.proc.tree() if (role := _role(p))]
        return time.monotonic() - t0

    def dead(self) -> str | None:
        """Triton outlives its model: a dead stub or engine process leaves a server that answers every request
        with an error, so the model's processes are watched as well as the server."""
        if reason := super().dead():
            return reason
        for p, role in self.model_procs:
            if not running(p):
                return f"Triton's {role} (pid {p.pid}) exited: the model no longer serves; see {self.log_path}"
        return None

    def applied_file(self) -> dict:
        try:
            return json.loads((self.model_dir / "1" / "applied.json").read_text())
        except (OSError, ValueError):
            return {}

    def verify_config(self) -> AppliedConfig:
        cfg = super().verify_config()  # KV cache and concurrency from vLLM's log lines in Triton's log
        cfg.max_model_len = self.applied_file().get("max_model_len")
        return cfg

    def endpoint(self) -> Endpoint:
        return Endpoint(base_url=f"http://127.0.0.1:{self.port}", protocol="triton",
                        model=self.settings.served_model_name)

    def metric_endpoints(self) -> dict[str, str]:
        return {"triton_metrics": f"http://127.0.0.1:{self.metrics_port}/metrics"}  # Triton's own metrics port

    def metricless_endpoints(self) -> dict[str, str]:
        return {"api": f"{self.endpoint().base_url}/metrics"}  # the serving port, where a vLLM user looks first

    def layer_metrics(self) -> tuple[LayerMetric, ...]:
        decoupled = ("for a decoupled model Triton's request duration covers only execute(), which hands the "
                     "request to the engine and returns: not the time the stream takes")
        return (LayerMetric(key="queue µs/request", family="nv_inference_queue_duration_us", how="per",
                            per="nv_inference_request_success", queue_ms=1e-3, note="time a request waited in "
                            "Triton's scheduler before the model's execute()"),
                LayerMetric(key="pending peak", family="nv_inference_pending_request_count", how="peak",
                            note="requests in Triton not yet handed to the model, the highest value scraped during "
                            "the window (needs `scrape: interval`; the default reads metrics only at the window's "
                            "edges, where it shows —)"),
                LayerMetric(key="execute() µs/request", family="nv_inference_request_duration_us", how="per",
                            per="nv_inference_request_success", note=decoupled))

    def observability_note(self) -> str:
        if self.options.report_engine_metrics and self.model.nvidia:
            return ("report_engine_metrics on: NVIDIA's backend publishes the vllm:* families it supports on "
                    "Triton's metrics port (its REPORT_CUSTOM_METRICS parameter)")
        if self.options.report_engine_metrics:
            return ("report_engine_metrics on: the model publishes the engine's vllm:* counters, gauges and "
                    "histograms on Triton's metrics port through its custom-metric API")
        return ("report_engine_metrics off (the default, like NVIDIA's vLLM backend): Triton publishes no vllm:* "
                "family; `--opt report_engine_metrics=true` publishes them on Triton's metrics port")

    def audit_shapes(self) -> list[tuple[str, Stack]]:
        if "report_engine_metrics" in self.settings.options:  # the user chose one setting
            return []
        on = self.settings.model_copy(update={"options": {**self.settings.options, "report_engine_metrics": True}})
        return [("stack-engine-metrics", TritonStack(on))]

    def log_locations(self) -> dict[str, Path]:
        return {"triton": self.log_path, "engine": self.log_path}  # the stub's output lands in Triton's log

    def engine_version(self) -> str:
        return self.applied_file().get("vllm_version") or installed_vllm_version(TRITON_VENV)

    def shape(self) -> str:
        """The model that serves, which the report's first line names."""
        return self.model.label

    def published_shape(self) -> dict:
        """nvidia_backend: whether NVIDIA's vLLM backend serves. The study measured that backend, so its figures
        (baselines/published/) are set beside a run of it only, never beside layerbench's model (a different
        layer, however closely modelled)."""
        return {**super().published_shape(), "nvidia_backend": self.model.nvidia}

    def describe(self) -> dict:
        return {**super().describe(), "grpc_port": self.grpc_port, "metrics_port": self.metrics_port,
                "model_repository": str(self.repo), "report_engine_metrics": self.options.report_engine_metrics,
                "triton_model": self.model.label, "model_py": str(self.model.path or MODEL_PY),
                "triton": self.metadata.get("server", {}).get("version"), "model_metadata": self.metadata.get("model")}


def _role(p: psutil.Process) -> str | None:
    """'Python stub' or the engine's process title (VLLM::EngineCore, VLLM::Worker), else None."""
    try:
        cmd = p.cmdline()
    except psutil.Error:
        return None
    if cmd and cmd[0].endswith("triton_python_backend_stub"):
        return "Python stub"
    return cmd[0] if cmd and cmd[0].startswith("VLLM::") else None


def _python_libdir(venv: Path) -> Path:
    """The lib directory of the Python the venv was made from (`home` in its pyvenv.cfg names its bin/)."""
    for line in (venv / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            return Path(value.strip()).parent / "lib"
    raise LayerbenchError(f"{venv / 'pyvenv.cfg'} names no base Python: {SETUP_HINT}")


def _client(port: int):
    try:
        import tritonclient.http as triton_http
    except ImportError:
        raise LayerbenchError(f"tritonclient is not installed in layerbench's environment: {SETUP_HINT}") from None
    return triton_http.InferenceServerClient(url=f"127.0.0.1:{port}", connection_timeout=5, network_timeout=10)


def _model_state(client, name: str) -> dict | None:
    from tritonclient.utils import InferenceServerException

    try:
        return next((m for m in client.get_model_repository_index() if m.get("name") == name), None)
    except (InferenceServerException, OSError, ConnectionError):
        return None


def _ready(client, name: str) -> bool:
    from tritonclient.utils import InferenceServerException

    try:
        return bool(client.is_server_ready() and client.is_model_ready(name))
    except (InferenceServerException, OSError, ConnectionError):
        return False
