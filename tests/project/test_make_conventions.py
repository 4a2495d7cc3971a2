"""The Makefile is the user's whole interface: `make` alone prints help, help lists every target, `make clean`
removes generated reports but never the committed examples; and the links in committed reports resolve."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def make(*args: str, cwd: Path = ROOT) -> str:
    out = subprocess.run(["make", "-s", "-f", str(ROOT / "Makefile"), *args], cwd=cwd, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def phony_targets() -> list[str]:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    return re.search(r"^\.PHONY:(.*)$", text, re.M).group(1).split()


def test_make_alone_prints_help_listing_every_target():
    plain, help_ = make(), make("help")
    assert plain == help_
    listed = set(re.findall(r"^#\s+([a-z-]+)\s{2,}", help_, re.M))
    missing = [t for t in phony_targets() if t not in listed]
    assert not missing, f"targets missing from `make help`: {missing}"


def test_make_clean_keeps_the_committed_examples(tmp_path):
    for d in ("reports/examples/run-a", "reports/harness", "reports/20261201-compare-ray-x", "reports/soak",
              "results/20261201-compare-ray-x"):
        (tmp_path / d).mkdir(parents=True)
        (tmp_path / d / "report.md").write_text("x")
    (tmp_path / "reports/summary.md").write_text("x")
    (tmp_path / "reports/README.md").write_text("x")
    make("clean", cwd=tmp_path)
    left = sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / "reports").iterdir())
    assert left == ["reports/README.md", "reports/examples", "reports/harness"]
    assert (tmp_path / "reports/examples/run-a/report.md").exists() and not (tmp_path / "results").exists()


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", sorted((ROOT / "reports/examples").glob("*/report.md")) + [ROOT / "README.md"],
                         ids=lambda p: p.parent.name if p.name == "report.md" else p.name)
def test_relative_links_in_committed_reports_resolve(doc):
    targets = [t.split("#")[0] for t in LINK.findall(doc.read_text()) if not re.match(r"[a-z]+:", t)]
    broken = [t for t in targets if t and not (doc.parent / t).exists()]
    assert not broken, f"{doc}: {broken}"


def test_stacks_lists_every_stack_with_its_typed_options(capsys):
    from stacks.base import REGISTRY

    assert main(["stacks"]) == 0
    out = capsys.readouterr().out
    for kind, cls in REGISTRY.items():
        assert kind in out and cls.description.split()[0] in out, kind
        for name in cls.Options.model_fields:
            assert name in out, (kind, name)


def test_an_unknown_stack_is_refused_with_the_list(capsys):
    assert main(["run", "--stack", "rayy"]) == 2
    err = capsys.readouterr().err
    assert "unknown stack 'rayy'" in err and "ray" in err and "triton" in err and "vllm" in err


@pytest.mark.parametrize("target", ["run", "serve", "compare", "diagnose", "capacity", "audit"])
def test_a_stacks_options_reach_every_command_that_deploys_it(target):
    # `make compare STACK=vllm-router OPT=policy=round_robin` once ran the router's default policy: OPT was read by
    # `make sweep` alone, and the others dropped it without a word
    cmd = make("-n", target, "STACK=vllm-router", "OPT=policy=round_robin image=x:1", "MODE=raw", "PROFILE=quick")
    assert re.findall(r"--opt (\S+)", cmd) == ["mode=raw", "policy=round_robin", "image=x:1"], cmd
    assert "--option" in make("-n", "sweep", "STACK=ray", "OPT=ingress_replicas=1,2")
