"""Put a model directory into a Hugging Face cache under a repo id, laid out as huggingface_hub lays out a
download: `models--ORG--NAME/blobs/<digest>` holding each file once and `snapshots/<commit>/<path>` as relative
links into blobs/. Blobs of large files are named by their sha256 and small ones by git's blob sha1, as the hub
names them; the commit is a digest of the tree, so the same files always give the same revision.

Two layouts, as the two kinds of download leave them:
- branch (the default, `--branch main`): `refs/<branch>` names the commit. A download by branch or tag leaves
  this (`hf download ORG/NAME`, `snapshot_download(repo)`, or `--revision main`), and so a repo id served with
  no revision, or at `main`, resolves offline.
- commit (`--at-commit`): no `refs/` at all. A download at a 40-hex commit leaves this
  (`hf download ORG/NAME --revision <commit>`, `snapshot_download(repo, revision=<commit>)`, which is how
  layerbench resolves a pinned model, the study's included): huggingface_hub writes `refs/<revision>` only when
  the revision is not already the commit it resolved to (`_cache_commit_hash_for_specific_revision`, called by
  `snapshot_download`; huggingface/huggingface_hub src/huggingface_hub/file_download.py and
  src/huggingface_hub/_snapshot_download.py). Offline, such a cache serves the repo id at that commit only:
  whatever asks for it without a revision looks for `refs/main` and finds nothing.

It lets a host without hub access serve a model "by repo id and revision", the path a GPU user's compare takes:
    python scripts/hf_cache_layout.py .cache/models/tiny-qwen2 /tmp/hf layerbench/tiny-qwen2
    HF_HUB_CACHE=/tmp/hf HF_HUB_OFFLINE=1 make compare STACK=vllm MODEL=layerbench/tiny-qwen2
    commit=$(python scripts/hf_cache_layout.py --at-commit .cache/models/tiny-qwen2 /tmp/hfc layerbench/tiny-qwen2)
    HF_HUB_CACHE=/tmp/hfc HF_HUB_OFFLINE=1 make run STACK=ray MODEL=layerbench/tiny-qwen2 REVISION=$commit
Standard library only. Prints the commit."""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
from pathlib import Path

LFS_MIN_BYTES = 10 * 2**20  # the hub stores files above this through LFS (named by sha256)


def blob_name(data: bytes) -> str:
    if len(data) >= LFS_MIN_BYTES:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lay_out(src: Path, cache: Path, repo_id: str, branch: str | None = "main") -> str:
    """Copy `src` (followed through links) into `cache` under `repo_id`; returns the commit. branch=None: the
    commit layout, no `refs/` written (one already there, from an earlier download by branch, is left as is)."""
    files = sorted(p for p in src.rglob("*") if p.is_file())
    if not (src / "config.json").is_file():
        raise SystemExit(f"{src} has no config.json: not a model directory")
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    names = {}
    for f in files:
        data = f.read_bytes()
        names[f.relative_to(src).as_posix()] = name = blob_name(data)
        blob = repo / "blobs" / name
        if not blob.exists():
            tmp = blob.with_name(name + ".incomplete")
            tmp.write_bytes(data)
            tmp.replace(blob)
    commit = hashlib.sha1("".join(f"{k} {v}\n" for k, v in sorted(names.items())).encode()).hexdigest()
    snap = repo / "snapshots" / commit
    shutil.rmtree(snap, ignore_errors=True)
    for rel, name in names.items():
        link = snap / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(repo / "blobs" / name, link.parent))
    if branch is not None:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / branch).write_text(commit)
    return commit


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("src", type=Path, help="a model directory (config.json, weights, tokenizer)")
    p.add_argument("cache", type=Path, help="the HF cache (what HF_HUB_CACHE names)")
    p.add_argument("repo_id", help="org/name")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--branch", default="main", help="the ref that names the commit (default main)")
    how.add_argument("--at-commit", action="store_true",
                     help="no refs/: as a download at a commit (revision=<40-hex sha>) leaves the cache")
    a = p.parse_args()
    print(lay_out(a.src, a.cache, a.repo_id, None if a.at_commit else a.branch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
