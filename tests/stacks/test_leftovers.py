"""What a teardown removes from /dev/shm and /tmp: files that appeared during the deployment and that no running
process holds. Another program's live files stay, a POSIX semaphore among them, which /proc/<pid>/maps names by a
temporary file (`/dev/shm/sem.XXXXXX (deleted)`), never by its `sem.mp-*` name."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

from stacks.base.procs import Leftovers, holders


def semaphores() -> set[Path]:
    return set(Path("/dev/shm").glob("sem.mp-*"))


def test_a_live_semaphore_made_during_the_deployment_stays_and_an_orphan_goes(tmp_path):
    left = Leftovers((f"{tmp_path}/dist_*", "/dev/shm/sem.mp-*"))
    left.snapshot()
    before = semaphores()
    lock = mp.get_context("spawn").Lock()  # a named semaphore this process maps, as a starting vLLM's EngineCore does
    [sem] = semaphores() - before
    orphan = tmp_path / "dist_1"
    orphan.mkdir()
    (orphan / "f").write_text("x")
    assert holders().hold(sem) and not holders().hold(orphan)
    gone = left.remove()
    assert orphan in gone and not orphan.exists()
    assert sem not in gone and sem.exists(), "a live process's semaphore was removed"
    del lock
