"""A model pinned to a commit, served offline: the tiny model laid out in a Hugging Face cache as a download at a
commit leaves it (snapshots/<commit>/ and blobs/, no refs/: huggingface_hub names a commit in refs/ only for a
branch or tag), HF_HUB_OFFLINE=1, and the repo id with that commit given to a compare, as
`HF_HUB_CACHE=... HF_HUB_OFFLINE=1 make compare STACK=ray MODEL=org/name REVISION=<commit>` gives it. Both sides,
bare vLLM and the layer, must serve every request from that cache, and whatever loads the model must ask for
the commit: a reader that asks for the repo id alone looks for refs/main, which such a cache does not have.
The compares are slow (a real vLLM and the layer, one after the other); the layout test is not."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.errors import LayerbenchError
from harness.profile.schema import EngineSettings
from stacks.base import MODEL_DIR
from stacks.base.engine_model import resolve
from tests.integration.conftest import assert_gone, pids_of

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from hf_cache_layout import lay_out  # noqa: E402

REPO = "layerbench/tiny-qwen2"


@pytest.fixture
def commit_cache(tmp_path, monkeypatch) -> tuple[Path, str]:
    """The tiny model under REPO in an HF cache laid out at a commit, read offline: (the repo's folder, commit)."""
    if not (MODEL_DIR / "config.json").exists():
        pytest.fail(f"{MODEL_DIR} missing: run `make setup` (make test does) to generate the tiny model")
    cache = tmp_path / "hub"
    commit = lay_out(MODEL_DIR, cache, REPO, branch=None)
    repo = cache / f"models--{REPO.replace('/', '--')}"
    assert not (repo / "refs").exists() and (repo / "snapshots" / commit / "config.json").is_file()
    # huggingface_hub reads the cache and offline switch when first imported, and engine_model reads them when it
    # resolves: set before either, and handed by the harness to every engine's environment
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
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


@pytest.mark.slow
@pytest.mark.parametrize("stack, opts", [("ray", []), ("kserve", ["--opt", "mode=inprocess"])],
                         ids=["ray", "kserve-inprocess"])
def test_a_commit_pinned_model_is_served_offline_on_both_sides(commit_cache, small_compare, stack, opts):
    """Ray Serve LLM and KServe's in-process server start the engine themselves: each must hand it the commit (an
    engine or layer that read the repo id alone would find no refs/main and fail to start)."""
    repo, commit = commit_cache
    rc, run, s = small_compare(stack, "--model", REPO, "--revision", commit, *opts)
    assert rc == 0 and s.status == "complete", s.failures
    assert (s.model.source, s.model.id, s.model.revision, s.model.requested_revision) == ("hub", REPO, commit,
                                                                                          commit)
    for side in ("baseline", "stack"):
        levels = s.runs[side].levels
        assert levels, side
        for lv in levels:  # every request answered, at every level, by both sides
            assert lv.stats.sent > 0 and lv.stats.succeeded == lv.stats.sent and not lv.stats.errors, (side, lv.stats)
        a = s.applied[side]  # vLLM's own config line: that commit's files
        assert s.model.same_files(a.model, a.revision), (side, a.model, a.revision)
    assert s.settings_match, s.settings_mismatches
    meta = json.loads((run / "run.json").read_text())
    assert meta["model"]["revision"] == meta["model"]["requested_revision"] == commit
    assert meta["model"]["path"] == str(repo / "snapshots" / commit)
    report = (run.parents[1] / "reports" / run.name / "report.md").read_text()
    assert f"served: **{REPO} @ {commit[:12]}, config {s.model.config_digest}**" in report
    assert not (repo / "refs").exists()  # served from the cache as it was: no engine wrote a ref in passing
    assert_gone(pids_of(meta, "stack"))
