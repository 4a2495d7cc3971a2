"""Write the structural schemas layerbench validates custom resources against (harness/targets/k8s/schemas/) from CRD
YAML files: each kind's served version's openAPIV3Schema with every `description` removed (the validators need
the structure, not the prose), as gzip-compressed JSON. The result is committed with its sources named in
harness/targets/k8s/schemas/SOURCES.md, so a clone validates strictly without any file beside it.

Usage: python scripts/crd_schemas.py CRD_DIR   (KServe's config/crd/full/ and KubeRay's config/crd/bases/)"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import yaml

OUT = Path(__file__).resolve().parent.parent / "stacks" / "k8s" / "schemas"
WANTED = {("serving.kserve.io", "InferenceService", "v1beta1"), ("serving.kserve.io", "ServingRuntime", "v1alpha1"),
          ("ray.io", "RayService", "v1")}


def structural(node):
    if isinstance(node, dict):
        return {k: structural(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [structural(v) for v in node]
    return node


def main() -> int:
    src = Path(sys.argv[1])
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    found = set()
    for path in sorted(src.glob("*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=loader):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = doc["spec"]["group"], doc["spec"]["names"]["kind"]
            for v in doc["spec"]["versions"]:
                if (group, kind, v["name"]) in WANTED:
                    out = OUT / f"{group}_{kind}_{v['name']}.json.gz"
                    data = json.dumps(structural(v["schema"]["openAPIV3Schema"]), sort_keys=True).encode()
                    out.write_bytes(gzip.compress(data, mtime=0))
                    found.add((group, kind, v["name"]))
                    print(f"{out.name}: {len(data)} bytes of schema from {path.name}")
    missing = WANTED - found
    if missing:
        print(f"not found in {src}: {sorted(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
