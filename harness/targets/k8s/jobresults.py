"""How the load Job hands its results back: one marker line at the end of its log, read through the API
server's pod log endpoint, so a run needs no PVC, no object store and no `kubectl cp` (exec).

The line (format v1), printed last by the Job's container, alone on its line:

    LAYERBENCH_RESULTS v1 <sha256 hex of the archive> <base64 of a tar.gz of the results directory>

The archive holds the directory's contents with relative paths (regular files and folders only). Standard
base64, no line breaks. The kubelet rotates container logs at 10 MiB by default, so the line must stay well
under that: `pack` refuses archives over MAX_ENCODED bytes and the Job then fails visibly instead of
delivering a truncated line. The Job's command ends with

    python -m harness.targets.k8s.jobresults pack <results dir>

which prints the line (exit 1 with a message on stderr when the directory is missing or too large)."""

from __future__ import annotations

import base64
import hashlib
import io
import sys
import tarfile
from pathlib import Path, PurePosixPath

from harness.errors import LayerbenchError

MARKER = "LAYERBENCH_RESULTS"
VERSION = "v1"
MAX_ENCODED = 8 * 1024 * 1024  # below the kubelet's default 10 MiB log rotation, with room for the run's output


def pack(results_dir: Path) -> str:
    """The marker line for everything under `results_dir`."""
    if not results_dir.is_dir():
        raise LayerbenchError(f"no results directory at {results_dir}")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(results_dir.rglob("*")):
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                continue
            tar.add(path, arcname=path.relative_to(results_dir).as_posix(), recursive=False)
    data = buf.getvalue()
    encoded = base64.b64encode(data).decode("ascii")
    if len(encoded) > MAX_ENCODED:
        raise LayerbenchError(f"results in {results_dir} are {len(encoded)} bytes encoded, over the "
                              f"{MAX_ENCODED} a container log line can safely carry")
    return f"{MARKER} {VERSION} {hashlib.sha256(data).hexdigest()} {encoded}"


def unpack(log: str, dest: Path) -> list[Path]:
    """Finds the last marker line in a Job's log, checks it and extracts it into `dest`; returns the files."""
    lines = [line for line in log.splitlines() if line.startswith(MARKER + " ")]
    if not lines:
        raise LayerbenchError(f"the load Job's log has no {MARKER} line (did the Job end with "
                              f"`python -m harness.targets.k8s.jobresults pack DIR`? a log over the kubelet's rotation "
                              f"size loses its beginning, never its end)")
    parts = lines[-1].split(" ")
    if len(parts) != 4 or parts[1] != VERSION:
        raise LayerbenchError(f"{MARKER} line of an unknown format (want `{MARKER} {VERSION} <sha256> <base64>`, "
                              f"got {len(parts)} fields, version {parts[1] if len(parts) > 1 else '-'})")
    try:
        data = base64.b64decode(parts[3], validate=True)
    except ValueError as e:
        raise LayerbenchError(f"{MARKER} line: payload is not base64 ({e})") from None
    if hashlib.sha256(data).hexdigest() != parts[2]:
        raise LayerbenchError(f"{MARKER} line: sha256 mismatch (the line was cut or altered in the log)")
    dest.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = tar.getmembers()
            for m in members:  # the archive came through a log: accept plain relative files and folders only
                p = PurePosixPath(m.name)
                if p.is_absolute() or ".." in p.parts or not (m.isfile() or m.isdir()):
                    raise LayerbenchError(f"{MARKER} archive member {m.name!r} is not a plain relative path")
            # the "data" filter (3.11.4+) also drops modes and owners a results file has no use for
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(dest, members=members, **safe)
            written = [dest / m.name for m in members if m.isfile()]
    except (tarfile.TarError, EOFError, OSError) as e:
        raise LayerbenchError(f"{MARKER} archive cannot be read: {e}") from None
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] != "pack":
        print("usage: python -m harness.targets.k8s.jobresults pack <results dir>", file=sys.stderr)
        return 2
    try:
        line = pack(Path(args[1]))
    except LayerbenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    sys.stdout.write("\n" + line + "\n")  # own line even when the run's last output had no newline
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
