"""A model pinned to a commit, served offline: the tiny model laid out in a Hugging Face cache as a download at a
commit leaves it (snapshots/<commit>/ and blobs/, no refs/: huggingface_hub names a commit in refs/ only for a
branch or tag), HF_HUB_OFFLINE=1, and the repo id with that commit given to a compare, as
`HF_HUB_CACHE=... HF_HUB_OFFLINE=1 make compare STACK=ray MODEL=org/name REVISION=<commit>` gives it. Both sides,
bare vLLM and the layer, must serve every request from that cache, and whatever loads the model must ask for
the commit: a reader that asks for the repo id alone looks for refs/main, which such a cache does not have.
The layout is checked here; the compares that serve such a cache (slow: a real vLLM and the layer, one after the
other) are each stack's only compare of the session, checked in test_ray_compare.py and test_kserve_compare.py
(tests/integration/conftest.py: check_pinned_offline)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import LayerbenchError
from harness.profile.schema import EngineSettings
from stacks.base.engine_model import resolve
from tests.integration.conftest import REPO, hub_cache


@pytest.fixture
def commit_cache(tmp_path, monkeypatch) -> tuple[Path, str]:
    """The tiny model under REPO in an HF cache laid out at a commit, read offline: (the repo's folder, commit)."""
    hub = hub_cache(tmp_path / "hub", branch=None)
    repo, commit = hub.repo, hub.commit
    assert not (repo / "refs").exists() and (repo / "snapshots" / commit / "config.json").is_file()
    # huggingface_hub reads the cache and offline switch when first imported, and engine_model reads them when it
    # resolves: set before either, and handed by the harness to every engine's environment
    monkeypatch.setenv("HF_HUB_CACHE", str(hub.cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return repo, commit


def test_a_cache_laid_out_at_a_commit_answers_that_commit_only(commit_cache):
    repo, commit = commit_cache
    from huggingface_hub import try_to_load_from_cache

    # huggingface_hub's own cache lookup: the file at the commit, nothing for the repo id alone (no refs/main)
    found = try_to_load_from_cache(REPO, "config.json", cache_dir=repo.parent, revision=commit)
    assert found == str(repo / "snapshots" / commit / "config.json")
    assert not isinstance(try_to_load_from_cache(REPO, "config.json", cache_dir=repo.parent), str)
    m = resolve(EngineSettings(model=REPO, revision=commit), None, [])
    assert (m.source, m.revision, m.requested_revision, m.path) == ("hub", commit, commit,
                                                                     repo / "snapshots" / commit)
    assert m.engine_ref() == (REPO, commit)
    # the repo id without a revision means main, which this cache cannot name: refused, saying how to fetch it
    with pytest.raises(LayerbenchError, match=f"`hf download {REPO} --revision main --cache-dir {repo.parent}`"):
        resolve(EngineSettings(model=REPO), None, [])
    assert not (repo / "refs").exists()
