"""Bad inputs and a full disk: one clear message, a non-zero exit, nothing left running, nothing half-written."""

from __future__ import annotations

import resource
import socket

import pytest

from harness.cli.main import main
from tests.faults.conftest import Layerbench, lines, meta, run_dir


def test_port_in_use_is_refused_at_once(tmp_path, quick_profile, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        for stack in ("sim", "sim-proxy"):
            rc = main(["run", "--stack", stack, "--profile", str(quick_profile()), "--port", str(port),
                       "--results-dir", str(tmp_path / stack)])
            err = capsys.readouterr().err
            assert rc == 2 and f"port {port} on 127.0.0.1 is already in use" in err, err
            assert "teardown incomplete" not in err


@pytest.mark.parametrize("args,message", [
    (["run", "--stack", "sim", "--port", "70000"], "between 1 and 65535"),
    (["run", "--stack", "sim", "--port", "-1"], "--port"),
    (["compare", "--stack", "sim", "--repeats", "-1"], "--repeats"),
    (["run", "--stack", "sim", "--results-dir", "/etc/hostname/x"], "is a file"),
    (["run", "--stack", "endpoint", "--url", "ftp://x"], "--url"),
    (["run", "--stack", "endpoint", "--url", "http://user:secret@127.0.0.1:1"], "secrets must not be in URLs"),
    (["compare", "--stack", "ray", "--opt", "ingress_replicas=two"], "option ingress_replicas"),
    (["run", "--stack", "sim", "--opt", "ttft_ms=-5"], "option ttft_ms"),
    (["compare", "--resume", "no-such-run"], "no run 'no-such-run'"),
])
def test_bad_input_gets_one_message(tmp_path, capsys, args, message):
    if "--results-dir" not in args:
        args = [*args, "--results-dir", str(tmp_path / "r")]
    try:
        rc = main(args)
    except SystemExit as e:  # argparse's own refusal
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and message in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())  # nothing half-written


@pytest.mark.slow  # seconds of real load; `make test` runs it, `make test-fast` stays under 2 min
def test_disk_full_is_a_clear_error_and_written_records_stay_whole(tmp_path, quick_profile):
    """A file size limit stands in for a full disk: writes fail with EFBIG as they would with ENOSPC."""
    limit = 48 * 1024

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    results = tmp_path / "r"
    lb = Layerbench(["run", "--stack", "sim", "--profile", str(quick_profile(concurrency=[4], requests=2000)),
                     "--results-dir", str(results), "--opt", "ttft_ms=5", "--opt", "itl_ms=1"], tmp_path,
                    preexec=small_files)
    rc = lb.wait()
    out = " ".join(lb.output().split())  # the console wraps at 80 columns: where depends on the tmp path's length
    assert rc == 2 and "cannot write" in out and "requests.jsonl" in out and "is the disk" in out, out
    assert "Traceback" not in out
    run = run_dir(results)
    assert meta(run)["status"] == "failed"
    recorded = lines(run / "requests.jsonl")  # every line parses: the cut one was removed
    assert len(recorded) > 10 and (run / "requests.jsonl").read_bytes().endswith(b"\n")
    assert (run / "requests.jsonl").stat().st_size <= limit
