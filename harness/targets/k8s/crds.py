"""Validation of rendered custom resources (KServe InferenceService and ServingRuntime, KubeRay RayService)
against the `openAPIV3Schema` of their real CRDs: by default the structural schemas kept in harness/targets/k8s/schemas/
(their sources in SOURCES.md there); LAYERBENCH_CRD_DIR names a folder of CRD YAML files to use instead, and a
live run validates against the CRDs the cluster has installed (`schema_of_crd`).

Strict: an object field the schema does not declare is an error (a typo such as `minReplica` would be
silently pruned by the API server and the deployment would not be the one measured), except where the CRD
allows unknown fields (`x-kubernetes-preserve-unknown-fields`)."""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import yaml

from harness.errors import LayerbenchError
from stacks.base import CACHE_DIR

SCHEMAS = Path(__file__).resolve().parent / "schemas"


def crd_dir() -> Path | None:
    """The folder of CRD YAML files named by LAYERBENCH_CRD_DIR, or None: the schemas kept in the checkout."""
    return Path(os.environ["LAYERBENCH_CRD_DIR"]) if os.environ.get("LAYERBENCH_CRD_DIR") else None


def crd_schema(api_version: str, kind: str, directory: Path | None = None) -> dict[str, Any]:
    """The strict openAPIV3Schema of `kind` at `api_version` (group/version): from the CRD files in `directory`
    (or LAYERBENCH_CRD_DIR), else from the schemas kept in harness/targets/k8s/schemas/."""
    directory = directory or crd_dir()
    return _schema(api_version, kind, directory) if directory is not None else _kept(api_version, kind)


@functools.lru_cache(maxsize=16)
def _kept(api_version: str, kind: str) -> dict[str, Any]:
    group, _, version = api_version.rpartition("/")
    path = SCHEMAS / f"{group}_{kind}_{version}.json.gz"
    if not path.exists():
        kept = ", ".join(p.name.removesuffix(".json.gz") for p in sorted(SCHEMAS.glob("*.json.gz")))
        raise LayerbenchError(f"layerbench keeps no schema for {kind} {api_version} (it has: {kept}); set "
                              "LAYERBENCH_CRD_DIR to a folder with that CRD's YAML")
    return strict(json.loads(gzip.decompress(path.read_bytes())))


def schema_of_crd(crd: dict[str, Any], version: str) -> dict[str, Any] | None:
    """The strict schema of an installed CRD (as the cluster returns it) at `version`, or None."""
    for v in (crd.get("spec") or {}).get("versions") or []:
        if v.get("name") == version and (v.get("schema") or {}).get("openAPIV3Schema"):
            return strict(v["schema"]["openAPIV3Schema"])
    return None


@functools.lru_cache(maxsize=16)
def _schema(api_version: str, kind: str, directory: Path) -> dict[str, Any]:
    group, _, version = api_version.rpartition("/")
    for path in sorted(directory.glob("*.yaml")):
        text = path.read_text()
        if "CustomResourceDefinition" not in text or f"kind: {kind}\n" not in text:
            continue
        if (schema := _cached(text, group, kind, version)) is not None:
            return schema
    raise LayerbenchError(f"no CRD for {kind} {api_version} in {directory} (set LAYERBENCH_CRD_DIR)")


def _cached(text: str, group: str, kind: str, version: str) -> dict[str, Any] | None:
    """The strict schema from a CRD file's `text`, kept as JSON under .cache/ keyed by the CRD's content:
    parsing a CRD's megabytes of YAML takes seconds, reading the JSON a few milliseconds."""
    key = hashlib.sha256(f"{group}/{version}/{kind}\n{text}".encode()).hexdigest()[:24]
    cache = CACHE_DIR / "crd-schemas" / f"{kind}-{key}.json"
    try:
        return json.loads(cache.read_text())
    except (OSError, ValueError):
        pass
    schema = _parse(text, group, kind, version)
    if schema is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(schema))
            tmp.replace(cache)
        except OSError:
            pass  # a read-only checkout validates as well, only slower
    return schema


def _parse(text: str, group: str, kind: str, version: str) -> dict[str, Any] | None:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRDs are megabytes of YAML
    for doc in yaml.load_all(text, Loader=loader):
        if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
            continue
        spec = doc.get("spec", {})
        if spec.get("group") != group or spec.get("names", {}).get("kind") != kind:
            continue
        for v in spec.get("versions", []):
            if v.get("name") == version:
                return strict(v["schema"]["openAPIV3Schema"])
    return None


def strict(schema: Any) -> Any:
    """The schema with undeclared object fields refused, unless the CRD preserves unknown fields there."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if ("properties" in schema and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def validate(obj: dict[str, Any], directory: Path | None = None, schema: dict[str, Any] | None = None) -> list[str]:
    """One line per schema violation of `obj` ("Kind/name: path: message"); [] when it is valid. schema: the
    one to use (a live cluster's CRD), else crd_schema's."""
    import jsonschema

    schema = schema or crd_schema(obj["apiVersion"], obj["kind"], directory)
    who = f"{obj['kind']}/{obj.get('metadata', {}).get('name', '?')}"
    errors = jsonschema.Draft7Validator(schema).iter_errors(obj)
    return [f"{who}: {'.'.join(str(p) for p in e.absolute_path) or '(root)'}: {e.message}"
            for e in sorted(errors, key=lambda e: list(map(str, e.absolute_path)))]
