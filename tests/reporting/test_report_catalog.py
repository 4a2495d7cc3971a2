"""`make report` survives any results folder: damaged files name their folder and never hide the other runs,
interrupted, failed and killed runs are listed with their status, a cut requests.jsonl is flagged.

The folders are copies of one real single run and one real compare (sim engine, sim proxy), damaged on purpose."""

from __future__ import annotations

import fcntl
import json
import shutil
from pathlib import Path

import pytest
import yaml

from harness.cli.main import main
from harness.reporting import catalog
from harness.reporting.catalog import read_results
from harness.reporting.summary_report import SUMMARY_HEADER, write_summary

pytestmark = pytest.mark.slow  # the seed is a reference-engine run and a 2-pair compare: 10 s

STATUS, RUN, DELTA = SUMMARY_HEADER.index("status"), SUMMARY_HEADER.index("run"), SUMMARY_HEADER.index(
    "delta at highest level")


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"run": a complete single run's folder, "compare": a complete compare's}, made once for the module."""
    root = tmp_path_factory.mktemp("seed")
    profile = root / "p.yaml"  # the write_profile fixture is per test; this runs once
    profile.write_text(yaml.safe_dump({"concurrency": [1], "requests": 20, "requests_per_concurrency": 0,
                                       "output_tokens": 8, "input_tokens": 32, "warmup_sweep": False}))
    results = root / "results"
    fast = ["--opt", "ttft_ms=5", "--opt", "itl_ms=1"]  # the figures don't matter here, the folders do
    assert main(["run", "--stack", "sim", "--profile", str(profile), "--results-dir", str(results), *fast,
                 "--gpu-hourly-usd", "3.6"]) == 0
    assert main(["compare", "--stack", "sim-proxy", "--profile", str(profile), "--repeats", "1", "--pairs", "2",
                 "--results-dir", str(results), "--reports-dir", str(root / "reports"), *fast]) == 0
    dirs = sorted(results.iterdir())
    assert len(dirs) == 2
    return {"compare" if "compare" in d.name else "run": d for d in dirs}


def clone(seed: dict[str, Path], kind: str, results: Path, name: str) -> Path:
    dest = results / name
    shutil.copytree(seed[kind], dest)
    return dest


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def by_run(rows: list[list[str]]) -> dict[str, list[str]]:
    return {r[RUN]: r for r in rows}


def line_for(problems: list[str], name: str) -> str:
    found = [p for p in problems if f"/{name}: " in p]
    assert len(found) == 1, (name, problems)  # one line per folder
    return found[0]


def test_damaged_folders_are_named_and_good_runs_kept(seed, tmp_path):
    results = tmp_path / "results"
    clone(seed, "run", results, "good-run")
    clone(seed, "compare", results, "good-compare")
    text = (seed["compare"] / "compare.json").read_text()
    (clone(seed, "compare", results, "cmp-cut") / "compare.json").write_text(text[: len(text) // 2])
    (clone(seed, "compare", results, "cmp-empty") / "compare.json").write_text("")
    (clone(seed, "compare", results, "cmp-array") / "compare.json").write_text("[1, 2]")
    edit_json(clone(seed, "compare", results, "cmp-foreign") / "compare.json", repeats="many")  # other version
    s = (seed["run"] / "summary.json").read_text()
    (clone(seed, "run", results, "sum-cut") / "summary.json").write_text(s[:-40])
    d = json.loads(s)
    d["levels"][-1]["stats"].pop("goodput")
    (clone(seed, "run", results, "sum-shape") / "summary.json").write_text(json.dumps(d))
    (clone(seed, "run", results, "sum-missing") / "summary.json").unlink()
    (clone(seed, "run", results, "meta-cut") / "run.json").write_text('{"status": "comp')
    (clone(seed, "run", results, "meta-array") / "run.json").write_text("[]")
    edit_json(clone(seed, "run", results, "meta-foreign") / "run.json", status=["complete"])
    (clone(seed, "run", results, "meta-missing") / "run.json").unlink()
    (results / "empty").mkdir()
    (results / "stray-file.txt").write_text("not a folder: ignored")

    entries, problems = read_results(results)
    rows = by_run(write_summary(results, tmp_path).rows)

    # the good runs are reported with their figures, and no problem
    assert rows["good-run"][STATUS] == "complete" and rows["good-run"][DELTA] == "— (single run)"
    assert rows["good-run"][SUMMARY_HEADER.index("goodput")].endswith("%")
    assert rows["good-compare"][STATUS] == "complete" and "% at c=1" in rows["good-compare"][DELTA]
    assert rows["good-compare"][0] == "sim-proxy"
    assert not [p for p in problems if "/good-" in p]
    # damaged summaries: listed from run.json, without figures, flagged, and named
    for name, why in (("cmp-cut", "compare.json is not valid JSON (line "), ("cmp-empty", "compare.json is empty"),
                      ("cmp-array", "compare.json holds a JSON array, not an object"),
                      ("cmp-foreign", "compare.json does not match this version of layerbench (1 error(s); "
                                      "first: repeats:"),
                      ("sum-cut", "summary.json is not valid JSON"),
                      ("sum-shape", "summary.json does not match this version of layerbench"),
                      ("sum-missing", "run.json says complete but summary.json is missing")):
        assert why in line_for(problems, name), name
        name_of_file = "compare.json" if name.startswith("cmp") else "summary.json"
        assert rows[name][STATUS].startswith(f"complete ({name_of_file} "), rows[name]
        assert rows[name][SUMMARY_HEADER.index("goodput")] == "—"
    assert rows["cmp-cut"][0] == "sim-proxy"  # a compare's run.json holds the stack as a dict
    # no readable run.json (or no folder content): skipped, and named
    for name, why in (("meta-cut", "run.json is not valid JSON"), ("meta-array", "run.json holds a JSON array"),
                      ("meta-foreign", "run.json does not match this version of layerbench"),
                      ("meta-missing", "no run.json"), ("empty", "empty folder")):
        line = line_for(problems, name)
        assert why in line and line.endswith("skipped"), line
        assert name not in rows
    assert len(problems) == 12 and len(entries) == len(rows) == 9
    assert not any("stray-file" in p for p in problems)


def test_cut_requests_jsonl_is_flagged(seed, tmp_path):
    results = tmp_path / "results"
    cut = clone(seed, "run", results, "cut") / "requests.jsonl"
    raw = cut.read_bytes()
    n = raw.count(b"\n")
    cut.write_bytes(raw[:-30])  # the last record loses its end and its newline
    garbled = clone(seed, "run", results, "garbled") / "requests.jsonl"
    lines = garbled.read_text().splitlines(keepends=True)
    lines[2] = "not json\n"
    lines[4] = "42\n"  # JSON, but not a record
    garbled.write_text("".join(lines))

    r = write_summary(results, tmp_path)
    rows, problems = r.rows, r.problems
    rows_by = by_run(rows)
    assert rows_by["cut"][STATUS] == f"complete (requests.jsonl: line {n} truncated)"
    assert rows_by["cut"][SUMMARY_HEADER.index("goodput")].endswith("%")  # the figures are still shown
    assert rows_by["garbled"][STATUS] == "complete (requests.jsonl: line 3 is not a JSON record (and 1 more bad " \
                                         "lines))"
    assert f"requests.jsonl: line {n} truncated" in line_for(problems, "cut")
    assert "line 3 is not a JSON record" in line_for(problems, "garbled")


def test_interrupted_and_failed_runs_are_listed_with_their_reason(seed, tmp_path):
    results = tmp_path / "results"
    run = clone(seed, "run", results, "interrupted")
    edit_json(run / "run.json", status="interrupted",
              reason="interrupted by the user (Ctrl-C / SIGTERM); deployments torn down\nsecond line")
    (run / "summary.json").unlink()  # stopped before the first level ended
    cmp = clone(seed, "compare", results, "failed")
    edit_json(cmp / "run.json", status="failed", reason="baseline sim failed: engine exited | code 1")
    (cmp / "compare.json").unlink()
    partial = clone(seed, "run", results, "failed-late")  # died after a level: what it measured is shown
    edit_json(partial / "run.json", status="failed", reason="sim died mid-run after c=1")

    r = write_summary(results, tmp_path)
    rows, problems = r.rows, r.problems
    rows_by = by_run(rows)
    assert problems == []  # not damaged: these runs say what happened to them
    assert rows_by["interrupted"][STATUS] == ("interrupted — interrupted by the user (Ctrl-C / SIGTERM); "
                                              "deployments torn down")
    assert rows_by["interrupted"][0] == "sim" and rows_by["interrupted"][DELTA] == "— (single run)"
    assert rows_by["failed"][STATUS] == "failed — baseline sim failed: engine exited \\| code 1"
    assert rows_by["failed"][0] == "sim-proxy" and rows_by["failed"][DELTA] == "— (compare)"
    assert rows_by["failed-late"][STATUS].startswith("failed — sim died")
    assert rows_by["failed-late"][SUMMARY_HEADER.index("goodput")].endswith("%")
    md = (tmp_path / "summary.md").read_text()
    assert "| failed — baseline sim failed: engine exited \\| code 1 |" in md and "second line" not in md


def test_running_without_a_process_is_shown_as_such(seed, tmp_path, monkeypatch):
    results = tmp_path / "results"
    for name in ("live", "killed"):
        run = clone(seed, "run", results, name)
        edit_json(run / "run.json", status="running", reason=None)
        raw = (run / "requests.jsonl").read_bytes()
        (run / "requests.jsonl").write_bytes(raw[:-10])  # a line being written, or cut by the kill
    with (results / "live" / "run.lock").open("w") as lock:  # what RunWriter holds for the whole run
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries, problems = read_results(results)
    status = {e.run_id: e.status for e in entries}
    assert status["live"] == "running"  # a line mid-write is not damage while the run is live
    assert status["killed"].startswith("running (no process; requests.jsonl: line ")
    assert "no process is writing it" in line_for(problems, "killed") and len(problems) == 1

    # folders of layerbench versions without the lock: whoever holds requests.jsonl open
    for name in ("live", "killed"):
        (results / name / "run.lock").unlink()
    with (results / "live" / "requests.jsonl").open("a"):
        entries, _ = read_results(results)
    assert {e.run_id: e.status for e in entries}["live"] == "running"
    monkeypatch.setattr(catalog, "open_by_some_process", lambda paths: None)  # processes cannot be inspected
    entries, _ = read_results(results)
    assert {e.status for e in entries} == {"running?"}


def test_report_command_prints_problems_and_exits_0(seed, tmp_path, capsys):
    results, out = tmp_path / "results", tmp_path / "reports" / "summary.md"
    clone(seed, "compare", results, "good")
    (clone(seed, "compare", results, "bad") / "compare.json").write_text('{"run_id": ')
    (results / "empty").mkdir()
    assert main(["report", "--results-dir", str(results), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "skipped or damaged (2):" in printed
    assert f"{results / 'bad'}: compare.json is not valid JSON" in printed
    assert f"{results / 'empty'}: empty folder; skipped" in printed
    assert "(2 runs, 2 folders skipped or flagged)" in printed
    md = out.read_text()
    assert "| sim-proxy | in it |" in md and "## Skipped or damaged" in md
    assert f"| {results / 'bad'} | compare.json is not valid JSON" in md  # the list is a folder | why table

    # nothing reportable is still exit 0, and says so
    for name in ("good", "bad"):
        shutil.rmtree(results / name)
    assert main(["report", "--results-dir", str(results), "--out", str(out)]) == 0
    assert "no run could be reported: every folder under" in capsys.readouterr().out
    assert "No run under" in out.read_text() and "empty folder; skipped" in out.read_text()
    assert main(["report", "--results-dir", str(tmp_path / "nowhere"), "--out", str(out)]) == 0
    assert "nowhere: no such folder" in capsys.readouterr().out


def test_a_run_with_a_gpu_price_says_what_it_cost(seed):
    md = (seed["run"] / "summary.md").read_text()
    # $3.6 an hour is $0.001 a second; c=1's tokens priced at the measured throughput
    assert "**Cost** at $3.6 per GPU-hour: this run $" in md and "per million output tokens: c=1 $" in md
