"""Property tests for the parsers of untrusted input: profile files, streamed SSE bodies, Prometheus text.

Each parser either returns a result or raises its one documented error type, whatever the input; valid input
generated at random round-trips exactly, wherever the network splits it."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.errors import LayerbenchError
from harness.load.scraper import parse_metrics
from harness.load.sse import SSEParser
from harness.profile.loading import load_profile
from harness.profile.schema import PROFILE_DIR, SLO, EngineSettings, LoadProfile
from harness.wire import ChunkedDecoder

# ~200 examples a test keeps the file within ~20 s on a loaded 2-core host; no deadline: a busy host stalls.
# LAYERBENCH_PROPERTY_EXAMPLES=5000 searches harder, for a one-off hunt after changing a parser.
PROPS = settings(max_examples=int(os.environ.get("LAYERBENCH_PROPERTY_EXAMPLES", "200")), deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])


def fragments(pieces: list, max_size: int = 40) -> st.SearchStrategy:
    """Concatenations of format-specific tokens and random filler: random text alone rarely gets past a
    parser's first line, these reach its deeper states."""
    filler = st.binary(max_size=3) if isinstance(pieces[0], bytes) else st.text(max_size=3)
    empty = pieces[0][:0]
    return st.lists(st.sampled_from(pieces) | filler, max_size=max_size).map(empty.join)


# ---- profiles -------------------------------------------------------------------------------------------------

scalars = (st.none() | st.booleans() | st.integers() | st.integers(-3, 300) | st.floats() | st.text(max_size=8)
           | st.sampled_from(["auto", "chat", "interval", "float32", "boundary"]))
values = st.recursive(scalars, lambda v: st.lists(v, max_size=4) | st.dictionaries(st.text(max_size=5), v, max_size=3),
                      max_leaves=8)


def fields_of(model: type) -> st.SearchStrategy:
    """Mappings with the model's real field names (and now and then a stray key) to random-typed values."""
    return st.dictionaries(st.sampled_from(sorted(model.model_fields)) | st.text(max_size=6), values, max_size=6)


profile_maps = st.builds(lambda top, slo, eng: {**top, **{k: v for k, v in (("slo", slo), ("engine", eng)) if v}},
                         fields_of(LoadProfile), st.none() | fields_of(SLO), st.none() | fields_of(EngineSettings))
# a valid profile with a field or two replaced: random documents are rarely valid, these often are
QUICK = yaml.safe_load((PROFILE_DIR / "quick.yaml").read_text())
near_valid = st.dictionaries(st.sampled_from(sorted(LoadProfile.model_fields)), scalars, min_size=1, max_size=2).map(
    lambda over: {**QUICK, **over})
yaml_tokens = ["concurrency:", "requests:", "slo:", "engine:", " [", "]", "{", "}", "- ", "\n", "  ", ": ", ",",
               "!!binary ", "!!int ", "!!float ", "!!timestamp ", "&a ", "*a", "2001-13-01", "true", ".inf", ".nan",
               "1e999", "'", '"', "? ", "<<: ", "!!python/object:os.system ", "%YAML 1.1\n", "---\n", "\t", "#"]
documents = st.one_of(
    profile_maps.map(lambda m: yaml.safe_dump(m).encode()),
    near_valid.map(lambda m: yaml.safe_dump(m).encode()),
    st.dictionaries(st.sampled_from(sorted(LoadProfile.model_fields)), scalars).map(
        lambda m: yaml.safe_dump(m).encode()),
    values.map(lambda v: yaml.safe_dump(v).encode()),
    st.text().map(str.encode),
    st.binary(),
    fragments(yaml_tokens).map(str.encode),
)


@pytest.fixture(scope="module")
def profile_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # one file rewritten per example: hypothesis refuses function-scoped fixtures such as tmp_path
    return tmp_path_factory.mktemp("props") / "profile.yaml"


@PROPS
@given(doc=documents)
@example(b"\xff\xfe not utf-8")
@example(b"[" * 500)  # deep nesting: RecursionError inside PyYAML
@example(b"requests: 2001-13-01")
@example(b"!!float")  # IndexError inside PyYAML
@example(b"engine: !!int")
@example(b"concurrency: &a [*a]")
@example(b"concurrency: [true]")
@example(b"{1: 2, null: 3}")
def test_profile_loader_raises_only_layerbench_errors_naming_the_file(profile_path, doc):
    path = profile_path
    path.write_bytes(doc)
    try:
        p = load_profile(str(path))
    except LayerbenchError as e:
        assert str(path) in str(e)
        return
    # whatever was accepted is what the model promises: no bool passed off as an int, no inf or nan
    assert p.concurrency and all(type(c) is int and c >= 1 for c in p.concurrency)
    for model in (p, p.slo, p.engine):
        for f, info in type(model).model_fields.items():
            v = getattr(model, f)
            assert type(v) is not bool or info.annotation in (bool, bool | None), f
            assert not isinstance(v, float) or math.isfinite(v), f


@pytest.mark.parametrize("doc", [
    {"concurrency": [True]}, {"concurrency": [1, False]}, {"requests": True}, {"repeats": True},
    {"concurrency": ["4"]}, {"concurrency": [4.0]}, {"slo": {"ttft_s": True}}, {"engine": {"max_num_seqs": False}},
    {"engine": {"max_model_len": True}}, {"request_timeout_s": float("inf")}, {"min_duration_s": float("nan")},
])
def test_profile_refuses_bools_strings_and_non_finite_numbers(doc, write_profile):
    with pytest.raises(LayerbenchError, match=r"malformed: field '(concurrency|requests|repeats|slo|engine|"
                                              r"request_timeout_s|min_duration_s)"):
        load_profile(str(write_profile(**doc)))


def test_profile_still_takes_ints_and_ints_for_floats(write_profile):
    p = load_profile(str(write_profile(concurrency=[2, 1], requests=40, slo={"ttft_s": 1, "e2e_s": 30},
                                       engine={"kv_cache_gib": 2, "max_num_seqs": 8})))
    assert p.concurrency == [1, 2] and p.requests == 40 and p.slo.ttft_s == 1.0 and p.engine.kv_cache_gib == 2.0


# ---- SSE over chunked transfer encoding ----------------------------------------------------------------------

no_eol = st.binary(max_size=12).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
names = st.sampled_from([b"data", b"event", b"id", b"retry", b"", b"dat", b"datax", b" data", b"Data"]) | no_eol.map(
    lambda b: b.replace(b":", b""))
# a field line: (name, colon?, space after colon?, value); without a colon the whole line is the name
field_lines = st.tuples(names, st.booleans() | st.just(True), st.booleans(), no_eol)  # mostly with a colon
events = st.lists(field_lines, max_size=4)


def encode_line(name: bytes, colon: bool, space: bool, value: bytes) -> tuple[bytes, bytes | None]:
    """The line's bytes and the data it contributes (None: none). One space after the colon is dropped by
    the spec, so a value that starts with a space needs that separator space to survive."""
    if not colon:
        line = name or b"x"  # an empty line would end the event
        return line, (b"" if line == b"data" else None)
    sep = b": " if space or value[:1] == b" " else b":"
    return name + sep + value, (value if name == b"data" else None)


def sse_stream(evs: list, tail: list, eols: list[bytes]) -> tuple[bytes, list[bytes], list[int], bytes]:
    """Encodes events (each ended by a blank line) and an unfinished tail event. Returns the bytes, the data of
    each dispatched event, the offset of each such event's first byte, and the tail's bytes."""
    out, expected, starts, eol_i, last_eol = bytearray(), [], [], 0, b""

    def put(line: bytes) -> None:
        nonlocal eol_i, last_eol
        eol = eols[eol_i % len(eols)]
        eol_i += 1
        if last_eol == b"\r" and not line and eol == b"\n":
            eol = b"\r\n"  # CR then LF is one line break: the blank line would vanish into it
        out.extend(line + eol)
        last_eol = eol

    for ev in evs:
        start, data = len(out), []
        for fl in ev:
            line, d = encode_line(*fl)
            put(line)
            if d is not None:
                data.append(d)
        put(b"")
        if data:
            expected.append(b"\n".join(data))
            starts.append(start)
    tail_at = len(out)
    for fl in tail:
        put(encode_line(*fl)[0])
    return bytes(out), expected, starts, bytes(out[tail_at:])


def chunked(body: bytes, sizes: list[int], upper: bool, ext: bool) -> bytes:
    out, pos, i = [], 0, 0
    while pos < len(body):
        n = min(sizes[i % len(sizes)], len(body) - pos)
        i += 1
        size = f"{n:X}" if upper else f"0{n:x}"
        out.append(size.encode() + (b";ext=1" if ext else b"") + b"\r\n" + body[pos : pos + n] + b"\r\n")
        pos += n
    return b"".join(out) + b"0\r\n\r\n"


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted({c % (len(data) + 1) for c in cuts}), len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


@PROPS
@given(st.lists(events, max_size=6), events, st.lists(st.sampled_from([b"\n", b"\r\n", b"\r"]), min_size=1, max_size=4),
       st.lists(st.integers(1, 40), min_size=1, max_size=4), st.booleans(), st.booleans(),
       st.lists(st.integers(0, 10_000), max_size=12))
def test_sse_over_chunked_yields_exactly_the_data_events_wherever_reads_split(evs, tail, eols, sizes, upper, ext, cuts):
    body, expected, starts, tail_bytes = sse_stream(evs, tail, eols)
    wire = chunked(body, sizes, upper, ext)
    dec, sse = ChunkedDecoder(), SSEParser()
    got, decoded = [], []
    for t, piece in enumerate(split(wire, cuts)):
        decoded.append(dec.feed(piece))
        got += sse.feed(decoded[-1], t)
    assert dec.done and b"".join(decoded) == body
    assert [d for _, d in got] == expected
    # each event is stamped with the read that carried its first byte
    ends, acc = [], 0
    for d in decoded:
        acc += len(d)
        ends.append(acc)
    assert [t for t, _ in got] == [next(t for t, e in enumerate(ends) if e > s) for s in starts]
    assert sse.pending == bool(tail_bytes.strip())
    # byte by byte, without the chunked layer, gives the same events
    one = SSEParser()
    assert [d for i in range(len(body)) for _, d in one.feed(body[i : i + 1], i)] == expected


@PROPS
@given(st.binary() | fragments([b"0", b"1", b"a", b"F", b"\r\n", b"\r", b"\n", b";", b" ", b"-", b"x", b"0x"]),
       st.lists(st.integers(0, 10_000), max_size=8))
@example(b"-5\r\nabc\r\n", [])
@example(b"3\r\nabcXY0\r\n\r\n", [])
@example(b"1" * 5000, [10])
def test_chunked_decoder_on_garbage_raises_only_value_error_and_ignores_splits(wire, cuts):
    def run(pieces: list[bytes]) -> tuple[bytes, bool] | None:
        dec, out = ChunkedDecoder(), []
        try:
            for p in pieces:
                out.append(dec.feed(p))
        except ValueError as e:
            assert str(e)
            return None
        return b"".join(out), dec.done

    assert run(split(wire, cuts)) == run([wire])


@pytest.mark.parametrize("reads, events", [
    # a CRLF split across reads is one line break: its LF used to become a blank line that cut the event in two
    ([b"data: a\r", b"\ndata: b\r\n\r\n"], [(0, b"a\nb")]),
    ([b"data: a\r", b"\n", b"\r\n"], [(0, b"a")]),
    ([b"data:  two spaces\n\n"], [(0, b" two spaces")]),  # the spec drops one space, not all
    ([b"data\n\n"], [(0, b"")]),  # a bare `data` line is an empty data field
    ([b" ", b"data: x\n\n"], []),  # the field is " data", not data: a leading space is not dropped
])
def test_sse_parser_regressions(reads, events):
    p = SSEParser()
    assert [e for t, r in enumerate(reads) for e in p.feed(r, t)] == events


@pytest.mark.parametrize("wire, msg", [
    (b"-5\r\nabcde\r\n", "size line"), (b"+5\r\nabcde\r\n", "size line"), (b"0x5\r\nabcde\r\n", "size line"),
    (b"1_0\r\n", "size line"), (b"\r\n", "size line"), (b"3\r\nabcde\r\n", "CRLF"), (b"3\r\nabc\n", "CRLF"),
    (b"1" * 5000, "longer than"),
])
def test_chunked_decoder_refuses_bad_framing(wire, msg):
    for step in (1, len(wire)):  # the same error whichever read carries the bad byte
        dec = ChunkedDecoder()
        with pytest.raises(ValueError, match=msg):
            for i in range(0, len(wire), step):
                dec.feed(wire[i : i + step])


@PROPS
@given(st.binary() | fragments([b"data", b"data:", b": ", b":", b" ", b"\r", b"\n", b"\r\n", b"event:", b"x"]),
       st.lists(st.integers(0, 10_000), max_size=8))
@example(b"data:a\r\ndata:b\r\n\r\n", [7])
@example(b" data:x\n\n", [1])
def test_sse_parser_takes_any_bytes_and_ignores_splits(stream, cuts):
    def run(pieces: list[bytes]) -> list[bytes]:
        p, out = SSEParser(), []
        for t, piece in enumerate(pieces):
            evs = p.feed(piece, t)
            assert all(isinstance(d, bytes) and isinstance(t_ev, int) for t_ev, d in evs)
            out += [d for _, d in evs]
        return out

    assert run(split(stream, cuts)) == run([stream])


# ---- Prometheus text ------------------------------------------------------------------------------------------

prom_tokens = ["# TYPE ", "# HELP ", "counter", "gauge", "histogram", "summary", "untyped", "{", "}", "=", '"', ",",
               "\\", "\n", " ", "a", "_total", "_bucket", "le", "quantile", "+Inf", "NaN", "1", "-", ".", "e", "x",
               "9" * 100]


@PROPS
@given(st.text() | fragments(prom_tokens))
@example('a{x="1"} 1\n# TYPE a gauge\n')
@example("# TYPE a histogram\na_bucket{le=\"x\"} 1\n")
@example("a 1 " + "9" * 400)  # a timestamp beyond a float: OverflowError inside prometheus_client
@example("a " + "9" * 400)  # an integer value beyond a float: OverflowError in float()
def test_parse_metrics_returns_or_raises_value_error(text):
    try:
        families, samples = parse_metrics(text)
    except ValueError:
        return
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in families.items())
    assert all(isinstance(k, str) and isinstance(v, float) for k, v in samples.items())


# suffixes the parser gives a meaning to are kept out of the base names; the f{i}_ prefix keeps names apart
metric_base = st.text("abcmsu_:019", max_size=8).filter(
    lambda n: not n.endswith(("_sum", "_count", "_bucket", "_created", "_total", "_info")))
label_names = st.text("abelXY_09", max_size=5).map(lambda k: f"l{k}").filter(lambda k: k != "le")
label_sets = st.lists(st.dictionaries(label_names, st.text(st.characters(exclude_categories=("Cs",)), max_size=6),
                                      max_size=3), min_size=1, max_size=3)
numbers = st.floats(allow_nan=True, allow_infinity=True)
kinds = st.sampled_from(["counter", "gauge", "untyped", "summary", "histogram"])
# (base name, type, TYPE line for untyped?, label sets, values, HELP text, timestamps?)
families_st = st.lists(st.tuples(metric_base, kinds, st.booleans(), label_sets, st.lists(numbers, min_size=5,
                                 max_size=5), st.text(max_size=8), st.booleans()), max_size=5)


def fmt(v: float) -> str:
    return "NaN" if math.isnan(v) else "+Inf" if v == math.inf else "-Inf" if v == -math.inf else repr(v)


def esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(fams: list) -> tuple[str, dict[str, str], dict[str, float]]:
    """Text in the Prometheus exposition format, the families it declares and the samples parse_metrics keeps."""
    lines, families, samples = [], {}, {}

    def sample(name: str, labels: dict[str, str], v: float, ts: bool) -> None:
        body = ",".join(f'{k}="{esc(x)}"' for k, x in labels.items())
        lines.append(f"{name}{{{body}}} {fmt(v)}" + (" 1700000000000" if ts else ""))
        if not name.endswith("_bucket"):  # parse_metrics leaves histogram buckets out
            samples[f"{name}{{{','.join(f'{k}={x}' for k, x in sorted(labels.items()))}}}"] = v

    for i, (base, kind, typed, label_list, vals, help_text, ts) in enumerate(fams):
        name = f"f{i}_{base}" + ("_total" if kind == "counter" else "")
        if help_text:
            lines.append(f"# HELP {name} {help_text.replace(chr(92), chr(92) * 2).replace(chr(10), chr(92) + 'n')}")
        if typed or kind != "untyped":
            lines.append(f"# TYPE {name} {kind}")
        families[name] = "unknown" if kind == "untyped" else kind
        seen = set()
        for labels in label_list:
            if (key := tuple(sorted(labels.items()))) in seen:
                continue
            seen.add(key)
            if kind == "summary":
                for q, v in zip(("0.5", "0.99"), vals, strict=False):
                    sample(name, {**labels, "quantile": q}, v, ts)
            elif kind == "histogram":
                for le, v in zip(("0.1", "+Inf"), vals, strict=False):
                    sample(f"{name}_bucket", {**labels, "le": le}, v, ts)
            if kind in ("summary", "histogram"):
                sample(f"{name}_sum", labels, vals[2], ts)
                sample(f"{name}_count", labels, vals[3], ts)
            else:
                sample(name, labels, vals[4], ts)
        lines.append("")
    return "\n".join(lines) + "\n", families, samples


@PROPS
@given(families_st)
def test_parse_metrics_keeps_every_generated_sample(fams):
    text, families, samples = exposition(fams)
    got_families, got = parse_metrics(text)
    assert got_families == families
    assert got.keys() == samples.keys()
    for k, v in samples.items():
        assert got[k] == v or (math.isnan(v) and math.isnan(got[k])), k
