"""What a deployment applied and served, and what a published study measured for it."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel


class AppliedConfig(BaseModel):
    """What the engine says it applied: /v1/models and the startup log."""

    max_model_len: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_at_tokens: int | None = None
    # from vLLM's "Initializing a V1 LLM engine ... with config:" line
    tensor_parallel_size: int | None = None
    model: str | None = None  # what the engine loaded: a repo id or a directory
    revision: str | None = None  # the commit it resolved a repo id to (None for a directory)


class ServedModel(BaseModel):
    """The model both sides of a compare serve, resolved once before anything is deployed (stacks.base.engine_model):
    what the profile asked for, the exact files on this host, and the identity the report records."""

    source: Literal["tiny", "gpu-like", "hub", "path"]
    id: str  # a Hugging Face repo id, the directory as given, or "tiny"
    revision: str | None = None  # hub: the commit the requested revision resolved to
    requested_revision: str | None = None  # hub: as the profile named it (a branch, tag or commit)
    path: Path | None = None  # the files: a snapshot inside the HF cache, or a directory (None: not yet fetched)
    hf_cache: Path | None = None  # hub: the cache every engine reads it from (HF_HUB_CACHE)
    config_digest: str | None = None  # sha256 of config.json, first 12 hex digits
    weights_bytes: int | None = None
    served_name: str = "tiny"  # the name clients ask for (--served-model-name)

    def text(self) -> str:
        rev = f" @ {self.revision[:12]}" if self.revision else (
            f" @ {self.requested_revision} (not resolved yet)" if self.requested_revision else "")
        return f"{self.id}{rev}" + (f", config {self.config_digest}" if self.config_digest else "")

    def engine_ref(self) -> tuple[str, str | None]:
        """(what the engine's --model gets, its --revision): a repo id and commit for a hub model, so the engine
        resolves it through the HF cache exactly as a user's would; else the directory."""
        if self.source == "hub":
            return self.id, self.revision or self.requested_revision
        return str(self.path), None

    def same_files(self, model: str | None, revision: str | None) -> bool:
        """Whether an engine that reported loading (model, revision) loaded these files."""
        if model is None:
            return False
        if self.source == "hub" and model == self.id:
            return revision == self.revision
        snapshot = f"models--{self.id.replace('/', '--')}/snapshots/{self.revision}"
        if self.source == "hub" and self.revision and model.rstrip("/").endswith(snapshot):
            return True  # the snapshot's folder, in a cache elsewhere (a pod's mounted HF cache)
        try:
            return self.path is not None and Path(model).resolve() == self.path.resolve()
        except OSError:
            return False


class PublishedResult(BaseModel):
    """A published measurement of this stack against bare vLLM, which a compare's report holds its run to."""

    concurrency: int
    delta_pct: float
    verdict: Literal["overhead", "gain", "within noise"]
    source: str
