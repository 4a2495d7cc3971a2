"""Shared fixtures: the generated model's tokenizer, a scripted raw HTTP server for client tests, and a
helper to write profiles; and the session's check that no test left a process running."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import psutil
import pytest
import yaml

from stacks.base import MODEL_DIR
from stacks.base.procs import running


@pytest.fixture(scope="session")
def tokenizer_path() -> Path:
    path = MODEL_DIR / "tokenizer.json"
    if not path.exists():
        pytest.fail(f"{path} missing: run `make setup` (make test does) to generate the tiny model")
    return path


@pytest.fixture(autouse=True)
def fresh_gpu_probe():
    """Each test asks the driver anew: harness.host.gpus caches its answer per process, and a test that scripts a fake
    NVML or nvidia-smi must not leave its host behind for the next one (the probe reads NVML first)."""
    from harness.host import gpus

    gpus.reset_cache()
    yield
    gpus.reset_cache()


@pytest.fixture
def write_profile(tmp_path: Path) -> Callable[..., Path]:
    return profile_writer(tmp_path)


def profile_writer(folder: Path) -> Callable[..., Path]:
    """write(name, **fields): a profile YAML in `folder` (made if missing); session fixtures use it directly."""

    def write(name: str = "t", **fields) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        p = folder / f"{name}.yaml"
        p.write_text(yaml.safe_dump(fields))
        return p

    return write


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class ScriptedServer:
    """A raw TCP server on 127.0.0.1 whose per-connection behaviour is an async function: it lets tests send
    bytes split wherever they like, cut streams, and answer errors, exactly as a real server could."""

    def __init__(self, handler: Handler):
        self.handler = handler
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def __aenter__(self) -> ScriptedServer:
        async def on_conn(reader, writer):
            try:
                await reader.readuntil(b"\r\n\r\n")  # request head; body length ignored
                await self.handler(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def scripted_server() -> type[ScriptedServer]:
    return ScriptedServer


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


STREAM_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
               b"connection: close\r\n\r\n")


# Every process a test starts is stopped by the test. A process left running (an orphaned engine, a Ray daemon)
# takes CPU from the tests that measure timings after it, so the session finds them: pytest marks its environment,
# every child inherits the mark, and what still carries it when the session ends was left behind.
SESSION_MARK = "LAYERBENCH_TEST_SESSION"


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller, before any xdist worker starts (they inherit it)
        os.environ[SESSION_MARK] = f"{os.getpid()}-{time.time_ns()}"
        # a compare's profiled windows only where a test asks for them (--cpu-profile): the others would each pay
        # one more window per level and side for what they do not check
        os.environ.setdefault("LAYERBENCH_CPU_PROFILE", "0")
        # the slow lane runs two compares at once, each the other's "busy host": they say so and go on
        os.environ.setdefault("LAYERBENCH_BUSY_HOST", "warn")


def marked_processes(mark: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter():
        if p.pid == os.getpid():
            continue
        try:
            # multiprocessing's resource tracker serves this pytest and exits with it
            if (p.environ().get(SESSION_MARK) == mark
                    and "multiprocessing.resource_tracker" not in " ".join(p.cmdline())):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.hookimpl(wrapper=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int):
    result = yield  # after xdist has shut its workers down
    mark = os.environ.get(SESSION_MARK)
    if hasattr(session.config, "workerinput") or not mark:
        return result
    left = marked_processes(mark)
    _, left = psutil.wait_procs(left, timeout=20)  # workers and servers still on their way out
    left = [p for p in left if running(p)]  # a zombie another process has yet to reap has stopped
    if not left:
        return result
    lines = []
    for p in left:
        try:
            lines.append(f"  pid {p.pid} pgid {os.getpgid(p.pid)} up {time.time() - p.create_time():.0f} s, "
                         f"{p.cpu_times().user + p.cpu_times().system:.1f} s CPU: {' '.join(p.cmdline())[:200]}")
            p.terminate()
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue
    _, still = psutil.wait_procs(left, timeout=10)
    for p in still:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    print(f"\nthe tests left {len(lines)} process(es) running (stopped now, by pid):\n" + "\n".join(lines), flush=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
    return result


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The costliest files first (their `cost` mark), each file's tests together and in their own order, the rest as
    collected. make test's side-by-side lane hands whole files to two workers in this order (pytest-xdist's loadfile
    with --no-loadscope-reorder): longest first, so neither worker is left alone with a long file at the end. In
    collection order one worker finished about 2 minutes after the other (769 s for 1290 s of tests, 2026-12-03)."""
    first: dict[Path, tuple[float, int]] = {}
    for i, item in enumerate(items):
        mark = item.get_closest_marker("cost")
        first.setdefault(item.path, (-(mark.args[0] if mark else 0), i))
    items.sort(key=lambda item: first[item.path])
