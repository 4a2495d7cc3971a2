"""The import layering between layerbench's packages: `python scripts/layers.py` prints the longest chain of
imports between packages, any cycle, and every import that climbs against LAYERS; tests/project/test_layering.py
holds the same three as the contract CI runs (in make test-fast).

A package is a folder of harness/ or stacks/ (harness.cli, stacks.base, ...); a module loose at the top of one
(harness/errors.py, stacks/ray.py) counts as its own package. Every import counts, at module level or inside a
function, so a lazy import cannot hide a climb; the stacks' registry imports its adapters by name at run time
(stacks/__init__.py), which is not an import edge."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOTS = ("harness", "stacks")
# Top to bottom. A package may import only packages of lower layers; packages of one layer are independent of each
# other. Patterns are full matches on the package's dotted name.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("harness.__main__",),
    ("harness.cli",),
    ("harness.bench", "harness.procedures"),
    ("harness.measure", "harness.targets"),
    ("stacks", r"stacks\.(?!base$|refengine$)\w+", "harness.reporting"),
    ("stacks.base", "stacks.refengine", "harness.analysis"),
    ("harness.results",),
    ("harness.load", "harness.host"),
    ("harness.schemas",),
    ("harness.profile",),
    ("harness.errors", "harness.signals", "harness.redact", "harness.childproc", "harness.wire", "harness"),
)
# Edges between packages of one layer that the layering allows: an adapter built on the bare vLLM adapter.
ALLOWED = (("stacks.kserve", "stacks.vllm"),)
# Named breaks that must never come back (each was once in the code): presentation reads records only, analysis
# computes only, adapters never reach into the load client, host facts stay on the standard library.
FORBIDDEN = (
    ("harness.reporting", "harness.procedures"), ("harness.reporting", "harness.measure"),
    ("harness.analysis", r"stacks(\..*)?"), ("harness.analysis", "harness.measure"),
    (r"stacks(\..*)?", "harness.load"), ("harness.host", r"harness\.(bench|load|procedures|measure|results)"),
)


def _unit(module: str) -> str:
    return ".".join(module.split(".")[:2])


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for top in ROOTS:
        for path in (root / top).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            names = [stem] + [f"{stem}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                out.add(name)
    return out


def edges(root: Path) -> dict[tuple[str, str], list[str]]:
    """(importer package, imported package) -> the importing modules."""
    known = modules(root)
    found: dict[tuple[str, str], list[str]] = {}
    for module, path in known.items():
        for dep in _imports(module, path, known):
            a, b = _unit(module), _unit(dep)
            if a != b:
                found.setdefault((a, b), []).append(module)
    return found


def graph(root: Path) -> dict[str, set[str]]:
    g: dict[str, set[str]] = {_unit(m): set() for m in modules(root)}
    for a, b in edges(root):
        g[a].add(b)
    return g


def layer_of(unit: str) -> int | None:
    for i, patterns in enumerate(LAYERS):
        if any(re.fullmatch(p, unit) for p in patterns):
            return i
    return None


def violations(root: Path) -> list[str]:
    out = []
    for (a, b), where in sorted(edges(root).items()):
        la, lb = layer_of(a), layer_of(b)
        named = [f"{x} -> {y}" for x, y in FORBIDDEN if re.fullmatch(x, a) and re.fullmatch(y, b)]
        if (a, b) in ALLOWED:
            continue
        if la is None or lb is None:
            out.append(f"{a} -> {b}: {'a package no layer names: ' + (a if la is None else b)}")
        elif la >= lb or named:
            why = "forbidden by name" if named else ("same layer" if la == lb else "climbs")
            out.append(f"{a} -> {b} ({why}): {', '.join(sorted(set(where)))}")
    return out


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one package."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in g.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            strong(v)
    return out


def longest_chain(g: dict[str, set[str]]) -> list[str]:
    """The longest path of imports between packages (in packages); a cycle is cut where it closes."""
    memo: dict[str, list[str]] = {}
    visiting: set[str] = set()

    def walk(v: str) -> list[str]:
        if v in memo:
            return memo[v]
        visiting.add(v)
        best = [v]
        for w in sorted(g.get(v, ())):
            if w not in visiting:
                sub = walk(w)
                if len(sub) + 1 > len(best):
                    best = [v, *sub]
        visiting.discard(v)
        memo[v] = best
        return best

    return max((walk(v) for v in sorted(g)), key=len)


def main() -> int:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    g = graph(root)
    chain = longest_chain(g)
    print(f"packages: {len(g)}; longest chain of imports: {len(chain)} deep")
    print("  " + " -> ".join(chain))
    found = cycles(g)
    print(f"cycles: {len(found)}" + "".join(f"\n  {' <-> '.join(c)}" for c in found))
    bad = violations(root)
    print(f"imports against the layering: {len(bad)}" + "".join(f"\n  {v}" for v in bad))
    return 1 if found or bad else 0


if __name__ == "__main__":
    sys.exit(main())
