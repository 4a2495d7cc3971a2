"""The layering as a contract: the import graph between packages (scripts/layers.py) has no cycle, no import
against LAYERS or FORBIDDEN, and no chain longer than MAX_CHAIN; no function in harness/ or stacks/ takes more
than MAX_PARAMS parameters (a bundle that travels together is one typed object)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_CHAIN = 10
MAX_PARAMS = 6


def _layers():
    spec = importlib.util.spec_from_file_location("layers", ROOT / "scripts" / "layers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_cycle_between_packages():
    layers = _layers()
    assert layers.cycles(layers.graph(ROOT)) == []


def test_no_import_against_the_layering():
    assert _layers().violations(ROOT) == []


def test_the_longest_import_chain_is_short():
    layers = _layers()
    chain = layers.longest_chain(layers.graph(ROOT))
    assert len(chain) <= MAX_CHAIN, " -> ".join(chain)


def test_every_package_has_a_layer():
    layers = _layers()
    assert [u for u in layers.graph(ROOT) if layers.layer_of(u) is None] == []


def test_the_contract_catches_a_climb(tmp_path):
    """The check itself: a reporting module that imports a procedure is named, and a cycle is found."""
    layers = _layers()
    for pkg in ("harness/reporting", "harness/procedures", "harness/schemas"):
        (tmp_path / pkg).mkdir(parents=True)
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "stacks").mkdir()
    (tmp_path / "harness/__init__.py").write_text("")
    (tmp_path / "stacks/__init__.py").write_text("")
    (tmp_path / "harness/reporting/table.py").write_text("from harness.procedures.compare import run\n")
    (tmp_path / "harness/procedures/compare.py").write_text("from harness.reporting import table\n")
    found = layers.violations(tmp_path)
    assert any(v.startswith("harness.reporting -> harness.procedures (forbidden by name)") for v in found), found
    assert layers.cycles(layers.graph(tmp_path)) == [["harness.procedures", "harness.reporting"]]


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    if names[:1] in (["self"], ["cls"]):
        names = names[1:]
    return len(names) + (a.vararg is not None) + (a.kwarg is not None)


def test_no_function_takes_more_than_six_parameters():
    wide = []
    for top in ("harness", "stacks"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _params(node) > MAX_PARAMS:
                    wide.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({_params(node)})")
    assert wide == [], "\n".join(wide)
