"""Shared fixtures: the generated model's tokenizer, a scripted raw HTTP server for client tests, and a
helper to write profiles."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import yaml

from stacks.base import MODEL_DIR


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
