"""An already-running server given by URL: nothing is deployed or torn down, so any server can be measured
(`make run STACK=endpoint URL=http://127.0.0.1:8000`). OpenAI-compatible by default; `--opt protocol=triton
--opt model=NAME` measures a Triton model's generate_stream (the k8s and docker targets' Triton load)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import httpx
from pydantic import Field, field_validator

from harness.errors import LayerbenchError
from stacks.base import DeploySettings, Endpoint, NoOptions, Stack, register


class EndpointOptions(NoOptions):
    protocol: Literal["openai", "triton"] = Field("openai", description="the server's API: OpenAI's (the model "
                                                  "from /v1/models) or Triton's generate_stream")
    model: str | None = Field(None, description="the model to load (protocol triton: required; openai: the "
                              "first of /v1/models)")
    metric_endpoints: str | None = Field(
        None, description="where the server's metrics are, as name=url pairs separated by commas (default: "
        "api=<url>/metrics); the k8s and docker targets name the layer's own ports here")
    aliases: str | None = Field(None, description="prefixes the layer puts in place of `vllm:`, separated by commas "
                                "(Ray Serve: ray_vllm_)")
    tokenizer: str | None = Field(
        None, description="the served model's tokenizer, which counts prompt lengths: a directory holding its "
        "tokenizer.json (an HF cache snapshot, <hub>/models--org--name/snapshots/<commit or branch>), or that file; "
        "refused when it has none (default: the tiny model's; the k8s and docker targets name the served model's)")

    spread: str | None = Field(
        None, description="several engines' base URLs, separated by commas, that the load client spreads its requests "
        "over itself (--url names the first): the k8s target's bare side with engine.replicas above 1, as the local "
        "target spreads over its bare engines (harness/load/spread.py)")
    spread_by: Literal["round_robin", "hash"] = Field(
        "round_robin", description="with spread: each request to the next engine in turn, or to the one a hash of "
        "the prompt's first characters picks (the profile's engine.baseline_spread)")

    @field_validator("spread")
    @classmethod
    def _spread_urls(cls, v: str | None) -> str | None:
        if v is not None and (len(urls := v.split(",")) < 2 or not all(u.startswith(("http://", "https://"))
                                                                        for u in urls)):
            raise ValueError(f"spread takes two or more http://host:port base URLs separated by commas, got {v!r}")
        return v

    @field_validator("metric_endpoints")
    @classmethod
    def _pairs(cls, v: str | None) -> str | None:
        if v is not None:
            for pair in v.split(","):
                name, sep, url = pair.partition("=")
                if not sep or not name or not url.startswith(("http://", "https://")):
                    raise ValueError("metric_endpoints takes name=http://host:port/path pairs separated by "
                                     f"commas, got {pair!r}")
        return v


def tokenizer_dir(value: str) -> Path:
    """The directory holding the tokenizer.json that --opt tokenizer names. A snapshot named by a branch or tag
    (<repo dir>/snapshots/main) is the commit the cache's <repo dir>/refs/main holds, as huggingface_hub lays out its
    cache (https://huggingface.co/docs/huggingface_hub/guides/manage-cache). LayerbenchError when there is none:
    prompts counted at 4 characters a token would not be in the served model's tokens."""
    path = Path(value).expanduser()
    if path.name == "tokenizer.json":
        path = path.parent
    try:
        if not path.exists() and path.parent.name == "snapshots":
            ref = path.parent.parent / "refs" / path.name
            if ref.is_file():
                path = path.parent / ref.read_text().strip()
        found = (path / "tokenizer.json").is_file()
    except OSError as e:
        raise LayerbenchError(f"stack endpoint: --opt tokenizer={value}: {path} cannot be read ({e.strerror or e}): "
                              "the load's user needs read access to the HF cache") from None
    if not found:
        raise LayerbenchError(f"stack endpoint: --opt tokenizer={value}: no tokenizer.json in {path}; fetch the served "
                              "model into that HF cache at the served revision (hf download ORG/NAME --revision REV), "
                              "or name a directory that holds the served model's tokenizer.json")
    return path


@register
class EndpointStack(Stack):
    kind = "endpoint"
    loads_model = False
    description = "an existing OpenAI-compatible (or Triton) server (--url)"
    Options = EndpointOptions  # nothing is deployed: only how to talk to it
    options: EndpointOptions
    cheap_liveness = False  # dead() asks over the network: between levels only (a level stops when unreachable)

    _model: str | None = None
    _version: str | None = None

    def __init__(self, settings: DeploySettings):
        super().__init__(settings)
        if self.options.protocol == "triton" and not self.options.model:
            raise LayerbenchError("stack endpoint: protocol triton needs the model's name: --opt model=NAME")
        if self.options.tokenizer:  # the load sizes prompts with model_path's tokenizer.json (harness.measure.sweep)
            self.settings = settings.model_copy(update={"model_path": tokenizer_dir(self.options.tokenizer)})

    def baseline(self) -> Stack | None:
        return None  # a server layerbench did not start: no version-matched bare vLLM to set beside it

    def _url(self) -> str:
        if not self.settings.url:
            raise LayerbenchError("STACK=endpoint needs a server address: URL=http://127.0.0.1:8000")
        return self.settings.url.rstrip("/")

    def _urls(self) -> list[str]:
        """Every server the load goes to: the spread's engines, or the one at --url."""
        if self.options.spread:
            return [u.rstrip("/") for u in self.options.spread.split(",")]
        return [self._url()]

    def deploy(self) -> None:
        self._url()

    def _health(self, url: str | None = None) -> str:
        """What answers 200 while the server at `url` (default: --url) serves: the model's readiness (Triton) or the
        model list."""
        url = url or self._url()
        if self.options.protocol == "triton":
            return f"{url}/v2/models/{self.options.model}/ready"
        return f"{url}/v1/models"

    def wait_ready(self, timeout: float, console=None) -> float:
        url = self._url()
        if self.options.protocol == "triton":
            try:
                httpx.get(self._health(), timeout=min(timeout, 10)).raise_for_status()
            except httpx.HTTPError as e:
                raise LayerbenchError(f"Triton model {self.options.model!r} at {url} is not ready: "
                                      f"{type(e).__name__}: {e}") from None
            self._model = self.options.model
            return 0.0
        for url in self._urls():  # every engine of a spread serves the model under one name
            try:
                resp = httpx.get(f"{url}/v1/models", timeout=min(timeout, 10))
                resp.raise_for_status()
                self._model = self._model or self.options.model or resp.json()["data"][0]["id"]
            except httpx.HTTPError as e:
                raise LayerbenchError(f"cannot reach {url}/v1/models: {type(e).__name__}: {e}") from None
            except (ValueError, KeyError, IndexError):
                raise LayerbenchError(f"{url}/v1/models did not list a model (is it OpenAI-compatible?)") from None
        return 0.0

    def teardown(self) -> None:
        pass  # not ours to stop

    def dead(self) -> str | None:
        for url in self._urls():
            try:
                httpx.get(self._health(url), timeout=5).raise_for_status()
            except httpx.HTTPError as e:
                return f"{self._health(url)} no longer answers ({type(e).__name__})"
        return None

    def endpoint(self) -> Endpoint:
        spread = self._urls() if self.options.spread else []
        return Endpoint(base_url=self._url(), protocol=self.options.protocol,
                        model=self._model or self.options.model or self.settings.served_model_name,
                        spread=spread, spread_by=self.options.spread_by)

    def metric_endpoints(self) -> dict[str, str]:
        if self.options.metric_endpoints:
            return dict(pair.split("=", 1) for pair in self.options.metric_endpoints.split(","))
        return super().metric_endpoints()

    def metric_aliases(self) -> tuple[str, ...]:
        return tuple(a for a in (self.options.aliases or "").split(",") if a)

    def engine_version(self) -> str:
        if self._version is None:
            try:
                self._version = str(httpx.get(f"{self._url()}/version", timeout=5).json()["version"])
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                self._version = "unknown"
        return self._version
