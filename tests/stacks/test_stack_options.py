"""Typed stack options: a bad `--opt` value is refused when the stack is constructed, naming the stack and the
option, before anything is deployed; the reference's stack and option tables are the registry's stacks and the
models' fields."""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from pydantic.fields import FieldInfo

import stacks  # noqa: F401  (registers every adapter)
from harness.cli.main import main
from harness.errors import LayerbenchError
from stacks.base import REGISTRY, DeploySettings, get_stack

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
KINDS = tuple(sorted(REGISTRY))


def build(kind: str, **options: Any):
    return get_stack(kind)(DeploySettings(options=options))


@pytest.mark.parametrize(("kind", "option", "value", "why"), [
    ("ray", "ingress_replicas", "two", "valid integer"),
    ("ray", "ingress_replicas", 0, "greater than or equal to 1"),
    ("ray", "ingress_replicas", 1.5, "fractional part"),
    ("ray", "ingress_replicas", True, "boolean"),
    ("ray", "max_ongoing_requests", 0, "greater than or equal to 1"),
    ("ray", "stream_batching_interval_ms", -1, "greater than or equal to 0"),
    ("ray", "num_cpus", "many", "valid integer"),
    ("ray", "request_path", "grpc", "'proxy', 'haproxy' or 'direct'"),
    ("ray", "port", 70000, "less than or equal to 65535"),
    ("vllm", "port", 0, "greater than or equal to 1"),
    ("triton", "report_engine_metrics", "maybe", "valid boolean"),
    ("kserve", "mode", "serverless", "'raw'"),
    ("triton", "port", 0, "greater than or equal to 1"),
    ("sim", "fail_500", 1.5, "less than or equal to 1"),
    ("sim", "tokens_per_chunk", 0, "greater than or equal to 1"),
    ("sim", "metrics_fault", "sometimes", "'none', '500', 'hang' or 'garbage'"),
    ("sim-proxy", "metrics", "drop", "'pass', 'hide' or 'rename'"),
    ("sim-proxy", "rechunk", "x", "valid integer"),
])
def test_bad_value_is_refused_at_construction(kind, option, value, why):
    with pytest.raises(LayerbenchError) as e:
        build(kind, **{option: value})
    msg = str(e.value)
    assert msg.startswith(f"stack {kind}: option {option}: "), msg
    assert why in msg and repr(value) in msg


def test_unknown_option_is_refused_with_the_known_ones():
    with pytest.raises(LayerbenchError, match=r"unknown option\(s\) for stack ray: nope; known: .*ingress_replicas"):
        build("ray", nope=1)
    with pytest.raises(LayerbenchError,
                       match="unknown option.*endpoint: port; known: aliases, metric_endpoints, model, protocol"):
        build("endpoint", port=8000)
    with pytest.raises(LayerbenchError, match="request_delay_ms"):  # a proxy option is not the engine's
        build("sim", request_delay_ms=5)


def test_good_values_arrive_typed():
    ray = build("ray", ingress_replicas=3, stream_batching_interval_ms=0, port=18000)
    assert ray.options.ingress_replicas == 3 and ray.options.stream_batching_interval_ms == 0.0
    assert ray.port == 18000 and ray.opts == {"request_router": "power_of_two", "request_path": "proxy",
                                              "ingress_replicas": 3,
                                              "max_ongoing_requests": 1_000_000_000,
                                              "stream_batching_interval_ms": 0.0, "num_cpus": 8}
    # `--opt` guesses numbers; a text field gets the text back
    sim = build("sim-proxy", metrics_fault=500, version=123, rename_prefix=7)
    assert (sim.options.metrics_fault, sim.options.version, sim.options.rename_prefix) == ("500", "123", "7")


def test_allowed_options_come_from_the_models():
    assert get_stack("ray").allowed_options() == {"port", "request_path", "ingress_replicas", "max_ongoing_requests",
                                                  "stream_batching_interval_ms", "num_cpus", "request_router"}
    assert get_stack("vllm").allowed_options() == {"port"}
    assert get_stack("triton").allowed_options() == {"port", "report_engine_metrics"}
    assert get_stack("endpoint").allowed_options() == {"protocol", "model", "metric_endpoints", "aliases",
                                                     "tokenizer", "spread", "spread_by"}
    sim, proxy = get_stack("sim").allowed_options(), get_stack("sim-proxy").allowed_options()
    assert {"ttft_ms", "fail_500", "port"} <= sim and sim < proxy and {"metrics", "rechunk"} <= proxy - sim


def test_cli_refuses_a_bad_option_before_anything_is_deployed(tmp_path, capsys, monkeypatch):
    from stacks.base.procs import ManagedProcess

    started: list[str] = []
    monkeypatch.setattr(ManagedProcess, "start", lambda self: started.append(self.name))
    for kind in KINDS:
        monkeypatch.setattr(get_stack(kind), "deploy", lambda self: started.append(self.kind))
    results = tmp_path / "results"
    rc = main(["compare", "--stack", "ray", "--opt", "ingress_replicas=two", "--results-dir", str(results),
               "--reports-dir", str(tmp_path / "reports")])
    assert rc == 2
    err = capsys.readouterr().err
    assert "stack ray: option ingress_replicas" in err and "'two'" in err
    assert started == []  # neither the stack nor its baseline was deployed, no process was started
    written = list(results.rglob("*")) if results.exists() else []
    assert not [p for p in written if p.name.startswith("summary") or p.name == "compare.json"], written
    assert not (tmp_path / "reports").exists()


# --- the reference's stack and option tables -------------------------------------------------------------

def _rows(heading: str) -> list[list[str]]:
    text = REFERENCE.read_text()
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows, f"no rows under {heading!r} in docs/reference.md"
    return [[c.strip().replace("`", "") for c in line.strip().strip("|").split(" | ")] for line in rows]


def _readme_rows() -> list[list[str]]:
    return _rows("### Stack options")



def _num(x: float) -> str:
    return f"{x:g}"


def _type_text(field: FieldInfo) -> str:
    ann = field.annotation
    if get_origin(ann) is Literal:
        return " / ".join(str(a) for a in get_args(ann))
    if get_origin(ann) in (Union, types.UnionType):  # `int | None`: None means "not set"
        ann = next(a for a in get_args(ann) if a is not type(None))
    name = ann.__name__
    ge = next((m.ge for m in field.metadata if hasattr(m, "ge")), None)
    le = next((m.le for m in field.metadata if hasattr(m, "le")), None)
    if ge is not None and le is not None:
        return f"{name} {_num(ge)}…{_num(le)}"
    if ge is not None:
        return f"{name} ≥ {_num(ge)}"
    return f"{name} ≤ {_num(le)}" if le is not None else name


def _default_text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    return _num(value) if isinstance(value, float) else str(value)


def test_readme_option_table_matches_the_models():
    rows = _readme_rows()
    pairs = [(r[0], k.strip()) for r in rows for k in r[1].split(",")]
    assert len(pairs) == len(set(pairs)), "an option is listed twice for one stack"
    for kind in KINDS:
        listed = {r[0] for r in rows if kind in [s.strip() for s in r[1].split(",")]}
        assert listed == get_stack(kind).allowed_options(), f"README options for {kind}"
    for option, kinds, type_text, default, _what in rows:
        for kind in kinds.split(", "):
            field = get_stack(kind).Options.model_fields[option]
            assert type_text == _type_text(field), f"README type of {option} ({kind})"
            assert default == _default_text(field.default), f"README default of {option} ({kind})"


def test_readme_stack_table_lists_every_stack():
    stacks_section = REFERENCE.read_text().split("### Stacks", 1)[1].split("###", 1)[0]
    assert set(re.findall(r"^\| `([a-z-]+)` \|", stacks_section, re.M)) == set(KINDS)
