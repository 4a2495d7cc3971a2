"""An already-running OpenAI-compatible server given by URL: nothing is deployed or torn down, so any
server can be measured (`make run STACK=endpoint URL=http://127.0.0.1:8000`)."""

from __future__ import annotations

import httpx

from harness.errors import LayerbenchError
from stacks.base import Endpoint, NoOptions, Stack, register


@register
class EndpointStack(Stack):
    kind = "endpoint"
    description = "an existing OpenAI-compatible server (--url)"
    Options = NoOptions  # nothing is deployed, so there is nothing to set
    cheap_liveness = False  # dead() asks over the network: between levels only (a level stops when unreachable)

    _model: str | None = None
    _version: str | None = None

    def _url(self) -> str:
        if not self.settings.url:
            raise LayerbenchError("STACK=endpoint needs a server address: URL=http://127.0.0.1:8000")
        return self.settings.url.rstrip("/")

    def deploy(self) -> None:
        self._url()

    def wait_ready(self, timeout: float, console=None) -> float:
        url = self._url()
        try:
            resp = httpx.get(f"{url}/v1/models", timeout=min(timeout, 10))
            resp.raise_for_status()
            self._model = resp.json()["data"][0]["id"]
        except httpx.HTTPError as e:
            raise LayerbenchError(f"cannot reach {url}/v1/models: {type(e).__name__}: {e}") from None
        except (ValueError, KeyError, IndexError):
            raise LayerbenchError(f"{url}/v1/models did not list a model (is it OpenAI-compatible?)") from None
        return 0.0

    def teardown(self) -> None:
        pass  # not ours to stop

    def dead(self) -> str | None:
        url = self._url()
        try:
            httpx.get(f"{url}/v1/models", timeout=5).raise_for_status()
        except httpx.HTTPError as e:
            return f"{url} no longer answers /v1/models ({type(e).__name__})"
        return None

    def endpoint(self) -> Endpoint:
        return Endpoint(base_url=self._url(), model=self._model or self.settings.served_model_name)

    def engine_version(self) -> str:
        if self._version is None:
            try:
                self._version = str(httpx.get(f"{self._url()}/version", timeout=5).json()["version"])
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                self._version = "unknown"
        return self._version
